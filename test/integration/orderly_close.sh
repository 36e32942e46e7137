#!/usr/bin/env bash
# Orderly close: a rank that destroys its communicator as soon as its own side
# is done must never turn its peer's last calls into errors (docs/failover.md,
# "Orderly close"). Short two-process exchanges, every byte checked, where one
# side closes right when its schedule is done (rerail-harness --close-when-done,
# no end barrier) while the other may still test its last requests:
#
#   recv_closes      the receiver closes right after its last receive completed
#                    (the sender may still wait for those receives' acks)
#   recv_closes_rb   the same, with a rollback earlier in each run (the 3rd data
#                    write is forged, RERAIL_TEST_FORGE_WRITE: the receiver refuses
#                    it, the rail is failed over or reopened and the message replayed)
#   send_closes      the sender closes as soon as its last sends are done; all are
#                    small (copied and reported done at once) and the receiver keeps
#                    only 2 receives posted, so it posts its last ones after the sender
#                    closed: it must still get every byte
#
# Over loopback (one rail) and over the network lab (two hosts, two rails;
# there also RERAIL_FAILOVER=balance, and a rail failed over earlier). Every run
# must end with exit 0 on both sides: zero errors, every byte checked.
#
# usage: orderly_close.sh PLUGIN_DIR HARNESS
#   RERAIL_CLOSE_RUNS  runs per loopback case (default 200; scaled by RERAIL_TEST_SCALE,
#                      at least 20), in every case
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
TOP="$(cd "$(dirname "$0")/../.." && pwd)"
scale=${RERAIL_TEST_SCALE:-1}
RUNS=$(awk -v n="${RERAIL_CLOSE_RUNS:-200}" -v k="$scale" 'BEGIN { d = int(n * k); print (d < 20 ? 20 : d) }')
LAB_RUNS=$RUNS
if [ "$(id -u)" -ne 0 ]; then
  echo "orderly_close: needs root for the network lab" >&2
  exit 1
fi
work=$(mktemp -d /tmp/rerail-close.XXXXXX)

# The loop that runs N pairs; written once, run on loopback and in the lab.
cat > "$work/pairs.sh" <<'INNER'
#!/usr/bin/env bash
# pairs.sh NAME RUNS SERVER_PREFIX CLIENT_PREFIX -- HARNESS_ARGS...
# Env: S_EXTRA / C_EXTRA (extra harness arguments), S_ENV / C_ENV (extra env).
name=$1 runs=$2 spre=$3 cpre=$4
shift 5
fails=0
for i in $(seq 1 "$runs"); do
  d="$WORK/$name/$i"
  mkdir -p "$d/rdv"
  # shellcheck disable=SC2086
  $spre env ${S_ENV:-} "$HARNESS" --role server --rendezvous "$d/rdv" --seed "$i" --timeout 60 --quiet \
    "$@" ${S_EXTRA:-} >"$d/server.log" 2>&1 &
  sp=$!
  # shellcheck disable=SC2086
  $cpre env ${C_ENV:-} "$HARNESS" --role client --rendezvous "$d/rdv" --seed "$i" --timeout 60 --quiet \
    "$@" ${C_EXTRA:-} >"$d/client.log" 2>&1
  c=$?
  wait "$sp"
  s=$?
  if [ "$c" -ne 0 ] || [ "$s" -ne 0 ]; then
    fails=$((fails + 1))
    echo "  $name run $i: server exit $s, client exit $c"
    grep -h "ERROR" "$d"/*.log | head -3 | sed 's/^/    /'
  else
    rm -rf "$d"
  fi
done
echo "$name: $((runs - fails)) of $runs runs clean"
[ "$fails" -eq 0 ]
INNER
chmod +x "$work/pairs.sh"
export WORK="$work" HARNESS

failed=0

# ---- loopback, one rail
(
  export LD_LIBRARY_PATH="$PLUGIN_DIR" RERAIL_SOCKET_IFNAME=lo
  unset RERAIL_TRANSPORT NCCL_DEBUG
  f=0
  S_EXTRA=--close-when-done "$work/pairs.sh" recv_closes "$RUNS" "" "" -- \
    --conns 2 --iters 12 --max-size 1M || f=1
  S_EXTRA=--close-when-done C_ENV=RERAIL_TEST_FORGE_WRITE=3 "$work/pairs.sh" recv_closes_rb "$RUNS" "" "" -- \
    --conns 2 --iters 12 --max-size 256K || f=1
  C_EXTRA=--close-when-done "$work/pairs.sh" send_closes "$RUNS" "" "" -- \
    --conns 2 --iters 24 --max-size 4K --inflight 2 || f=1
  exit $f
) || failed=$((failed + 1))

# ---- network lab: two hosts, two rails
cat > "$work/lab.sh" <<INNER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$PLUGIN_DIR" RERAIL_SOCKET_IFNAME=rail RERAIL_LOG_LEVEL=warn WORK="$work" HARNESS="$HARNESS"
f=0
args=(--conns 2 --iters 12 --max-size 1M)
S_EXTRA=--close-when-done "$work/pairs.sh" lab_recv_closes $LAB_RUNS "netlab exec 1" "netlab exec 0" -- "\${args[@]}" || f=1
S_EXTRA=--close-when-done S_ENV=RERAIL_FAILOVER=balance C_ENV=RERAIL_FAILOVER=balance \
  "$work/pairs.sh" lab_recv_closes_balance $LAB_RUNS "netlab exec 1" "netlab exec 0" -- "\${args[@]}" || f=1
S_EXTRA=--close-when-done C_ENV=RERAIL_TEST_FORGE_WRITE=3 \
  "$work/pairs.sh" lab_recv_closes_failover $LAB_RUNS "netlab exec 1" "netlab exec 0" -- "\${args[@]}" || f=1
C_EXTRA=--close-when-done S_ENV=RERAIL_FAILOVER=balance C_ENV=RERAIL_FAILOVER=balance \
  "$work/pairs.sh" lab_send_closes_balance $LAB_RUNS "netlab exec 1" "netlab exec 0" -- --conns 2 --iters 24 --max-size 4K --inflight 2 || f=1
exit \$f
INNER
chmod +x "$work/lab.sh"
"$TOP/test/lab/netlab.sh" run --name rrclose --hosts 2 --rails 2 -- "$work/lab.sh" || failed=$((failed + 1))

if [ "$failed" -eq 0 ]; then
  echo "PASS orderly_close: every run of every case ended with zero errors, every byte checked"
  rm -rf "$work"
  exit 0
fi
echo "FAIL orderly_close: $failed group(s) of cases failed (logs in $work)"
exit 1
