#!/bin/bash
# The verbs rail under faults, inside the Soft-RoCE lab (run by test_verbs_faults.sh through
# rxelab.sh, one boot for every case): the NCCL-faithful harness as two "hosts" A (client,
# sends) and B (server, receives), each pooling its two rxe NICs with RERAIL_TRANSPORT=verbs,
# every byte and sequence number checked. Cases (a PASS/FAIL line each):
#   flaps      60 s (x RERAIL_TEST_SCALE, at least 15 s) of random faults on both rails in turn,
#              one at a time, each healed before the next: a NIC down (host A or B), a cable / switch
#              port down, a silent rail (RoCE dropped, links up). Passes with zero errors, every
#              message the sender completed received exactly once and intact (the receiver
#              checks each byte, size and sequence: a lost, duplicated or corrupt message is an
#              error), no hang (the harness's watchdog), and failovers and fail-backs counted
#              in the plugin's log (so a run whose faults did nothing cannot pass).
#   all_down   host A's two NICs go down at once (one `ip -batch`): both sides end with a clean
#              error (exit 1, no crash, no hang) naming both rails, within δ + 1 s
#              (docs/failover.md, "Giving up"); each side must learn it from the plugin.
#   dead_peer  SIGKILL the sending process: the receiver ends with a clean error within
#              δ + 1 s, no replay loop.
#              (all_down and dead_peer run once more when they miss only the time bound.)
#   telemetry  telemetry on, host A's rail-0 NIC down: `rerail status` (text and JSON), the
#              Prometheus file and the event log show the NIC down, the failover off it, and
#              its transport (verbs) and RDMA device (status reads them from the .prom file).
#   forged_write  host A stands in for a hostile peer: its 300th data write names a chunk no
#              receive has (RERAIL_TEST_FORGE_WRITE). The NIC places it; host B's engine must
#              refuse it after the fact, fail that rail over and get the message again by
#              replay: both sides exit 0 with every byte checked.
#   slow_rail  tbf limits host A's rail 0 to 5 % of its rate mid-run: demoted, the connection
#              moves >= 70 % of what it moves with that NIC down (a control run right after),
#              and traffic returns once the limit goes (verbs_gray.sh).
#   latency    netem delays host A's rail 0 by 100 ms mid-run under light traffic: no demotion
#              before it, demoted within 6 s with the traffic on rail 1, and back once the delay
#              goes (verbs_gray.sh).
#
# usage: verbs_faults.sh HARNESS PLUGIN_DIR RERAIL CASE...
#   RERAIL_TEST_SCALE        scales the flapping time (default 1; the sanitizer pass uses 0.25)
#   RERAIL_FLAPS_SEED        seed of the fault sequence (default: random, printed for a rerun)
#   RERAIL_FLAPS_DELTA       δ (RERAIL_PROGRESS_TIMEOUT) of the flaps case, default 1000 ms; the
#                            sanitizer build sets 2000 (its processes are 2-3 times slower)
# shellcheck disable=SC2317  # the cases are called by name
set -uo pipefail
HARNESS=${1:?usage: $0 HARNESS PLUGIN_DIR RERAIL CASE...}
PLUGIN_DIR=${2:?usage}
RERAIL=${3:?usage}
shift 3
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(flaps all_down dead_peer telemetry)
SCALE=${RERAIL_TEST_SCALE:-1}
WORK=$(mktemp -d /tmp/verbs-faults.XXXXXX)
FAILS=0

# Connection setup of the RDMA devices travels out of band (RERAIL_SOCKET_IFNAME): over lo,
# which both lab hosts share as their management network, so a data NIC going down never
# takes setup or reconnects with it.
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 HNET_LOG_TIME=1
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
unset RERAIL_PROGRESS_TIMEOUT RERAIL_FAILBACK_HOLD RERAIL_TELEMETRY_DIR

calc() { awk "BEGIN { printf \"%.3f\", $* }"; }
is_true() { awk "BEGIN { exit !($*) }"; }
# scaled SECONDS MIN: SECONDS x scale, at least MIN (whole seconds)
scaled() { awk -v v="$1" -v s="$SCALE" -v m="$2" 'BEGIN { x = int(v * s + 0.5); if (x < m) x = m; print x }'; }
# shellcheck source=../../harness/harness_json.sh disable=SC1091
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../harness" && pwd)/harness_json.sh"
# count ERE FILE...: matching lines; paces the fault loop (a healed rail back in service before
# the next fault, with a deadline), never a verdict: verdicts read the harness's counters.
count() { cat "${@:2}" 2>/dev/null | grep -cE "$1"; }

# pair_start NAME ARGS...: server on host B, client on host A, with ARGS; the environment
# from PAIR_ENV (both) and A_ENV / B_ENV. Logs in $WORK/NAME; sets DIR SPID CPID.
PAIR_ENV=() A_ENV=() B_ENV=()
pair_start() {
  DIR=$WORK/$1
  shift
  rm -rf "$DIR"   # a rerun's rendezvous starts empty
  mkdir -p "$DIR/rdv"
  env "${PAIR_ENV[@]}" "${B_ENV[@]}" RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe2,rxe3 \
    RERAIL_HEALTH_PATH=/dev/shm/rr-health-B "$HARNESS" --role server --rendezvous "$DIR/rdv" --json "$@" \
    >"$DIR/server.json" 2>"$DIR/server.log" &
  SPID=$!
  env "${PAIR_ENV[@]}" "${A_ENV[@]}" RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe0,rxe1 \
    RERAIL_HEALTH_PATH=/dev/shm/rr-health-A "$HARNESS" --role client --rendezvous "$DIR/rdv" --json "$@" \
    >"$DIR/client.json" 2>"$DIR/client.log" &
  CPID=$!
}
# started: both sides moving traffic (their "<role>.traffic" flags) within 60 s
started() {
  local end=$((SECONDS + 60))
  while [ ! -e "$DIR/rdv/server.traffic" ] || [ ! -e "$DIR/rdv/client.traffic" ]; do
    if [ "$SECONDS" -ge "$end" ] || ! kill -0 "$SPID" 2>/dev/null || ! kill -0 "$CPID" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
}
# wait_pid PID DEADLINE_S: its exit status, or 137 after killing it at the deadline (backstop)
wait_pid() {
  local end=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "backstop: process $1 still running after $2 s: killed"
      kill -9 "$1" 2>/dev/null
      break
    fi
    sleep 0.1
  done
  wait "$1" 2>/dev/null
}
pair_wait() { wait_pid "$CPID" "$1"; CRC=$?; wait_pid "$SPID" 30; SRC=$?; }
verdict() { # verdict CASE WHY-NOT FIGURES: PASS when WHY-NOT is empty
  if [ -z "$2" ]; then echo "verbs_faults: PASS $1: $3"
  else
    echo "verbs_faults: FAIL $1: $2; $3"
    FAILS=$((FAILS + 1))
    local f
    for f in "$DIR"/client.log "$DIR"/server.log; do echo "---- $f (tail)"; tail -n 25 "$f"; done
  fi
}
# verdict_timed CASE WHY-NOT LATE FIGURES: as verdict, but a case that failed only on a timing
# bound (LATE) is run once more: the machine running CI is shared, and a regression fails twice.
ATTEMPT=0 RETRY=0
verdict_timed() {
  if [ -z "$2" ] && [ -n "$3" ] && [ "$ATTEMPT" -eq 0 ]; then
    echo "verbs_faults: $1: timing bound missed ($3$4); running it once more"
    RETRY=1
    return
  fi
  verdict "$1" "$2$3" "$4$([ "$ATTEMPT" -gt 0 ] && echo " (second run)")"
}

# ---- flaps ---------------------------------------------------------------------------------
# One fault at a time, on rail 0 and rail 1 in turn (rail 0 carries the traffic when nothing is
# wrong, so every other fault moves it), its kind and length random; the next fault waits until
# the healed rail is back in service (up again, or a fail-back onto it, in either plugin's log;
# at most 8 s)
# and 0.3-1 s more. δ is 1 s: under TCG a loaded
# guest can leave a healthy rail's probe unanswered for half a second.
case_flaps() {
  local secs delta=${RERAIL_FLAPS_DELTA:-1000} seed end n=0 r kind hold gap hold_ms gap_ms why="" fo fb sent recv up i back
  secs=$(scaled 60 15)
  seed=${RERAIL_FLAPS_SEED:-$((${EPOCHREALTIME/./} % 1000000))}
  RANDOM=$seed
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$delta" RERAIL_FAILBACK_HOLD=500)
  pair_start flaps --conns 2 --duration "$secs" --max-size 256K --inflight 4 --stall-report \
    --timeout $((secs + 60)) --seed "$seed"
  echo "verbs_faults: flaps: $secs s of random faults, seed $seed (RERAIL_FLAPS_SEED=$seed replays it), δ = $delta ms"
  if ! started; then pair_wait 30; verdict flaps "traffic never started (client $CRC, server $SRC)" ""; return; fi
  # Faults until 2 s before the end, so the last one heals while traffic still runs.
  end=$((${EPOCHREALTIME/./} / 1000 + (secs - 2) * 1000))
  while [ $((${EPOCHREALTIME/./} / 1000)) -lt "$end" ]; do
    # drawn here, not inside $(...): a subshell's RANDOM would not follow the seed
    r=$((n % 2)) kind=$((RANDOM % 4)) hold_ms=$((RANDOM % 900)) gap_ms=$((RANDOM % 700))
    # a rail back in service: up again (a backup), or traffic failed back onto it
    back="health: (rail_state veth[AB]$r up|failback veth[AB][01] -> veth[AB]$r,)"
    up=$(count "$back" "$DIR"/client.log "$DIR"/server.log)
    hold=$(calc "0.3 + $hold_ms / 1000")
    case $kind in
      0) echo "$EPOCHREALTIME rail $r NIC A down $hold s"
         rxefault link "$r" down A; sleep "$hold"; rxefault link "$r" up A ;;
      1) echo "$EPOCHREALTIME rail $r NIC B down $hold s"
         rxefault link "$r" down B; sleep "$hold"; rxefault link "$r" up B ;;
      2) echo "$EPOCHREALTIME rail $r cable A down $hold s"
         rxefault cable "$r" down A; sleep "$hold"; rxefault cable "$r" up A ;;
      3) hold=$(calc "$delta / 1000 + $hold"); echo "$EPOCHREALTIME rail $r silent $hold s"
         rxefault drop "$r" on; sleep "$hold"; rxefault drop "$r" off ;;
    esac >>"$DIR/faults.log"
    n=$((n + 1))
    # the healed rail back in service on either end before the other one may fail (the
    # reconnect takes 0.2-3 s under TCG); then a random pause
    i=$((SECONDS + 8))   # a deadline, not a count: a process start costs 0.1-1 s in the guest
    while [ "$SECONDS" -lt "$i" ] && [ "$(count "$back" "$DIR"/client.log "$DIR"/server.log)" -le "$up" ]; do
      sleep 0.2
    done
    gap=$(calc "0.3 + $gap_ms / 1000")
    sleep "$gap"
  done
  pair_wait $((secs + 90))
  echo "---- faults (wall-clock start, rail, what, how long)"; cat "$DIR/faults.log"
  fo=$(( $(jget "$DIR/client.json" 'd["counters"]["failovers_total"]' | tr -c '0-9\n' 0) +
         $(jget "$DIR/server.json" 'd["counters"]["failovers_total"]' | tr -c '0-9\n' 0) ))
  fb=$(( $(jget "$DIR/client.json" 'd["counters"]["failbacks_total"]' | tr -c '0-9\n' 0) +
         $(jget "$DIR/server.json" 'd["counters"]["failbacks_total"]' | tr -c '0-9\n' 0) ))
  sent=$(jget "$DIR/client.json" 'd["send"]["msgs"]')
  recv=$(jget "$DIR/server.json" 'd["recv"]["msgs"]')
  [ "$CRC" -eq 0 ] && [ "$SRC" -eq 0 ] || why+="client exit $CRC, server exit $SRC (3 = hang); "
  [ "$(jget "$DIR/client.json" 'd["errors"]')" = 0 ] && [ "$(jget "$DIR/server.json" 'd["errors"]')" = 0 ] ||
    why+="errors reported (lost, duplicate or corrupt data, or a failed call); "
  [ "$sent" != "?" ] && [ "$sent" = "$recv" ] || why+="the sender completed $sent messages, the receiver got $recv; "
  [ "$n" -ge 2 ] || why+="only $n faults injected; "
  [ "$fo" -ge 2 ] || why+="$fo failovers counted by the plugin (the faults did nothing?); "
  [ "$fb" -ge 1 ] || why+="no fail-back counted by the plugin; "
  verdict flaps "$why" "$n faults ($(grep -c silent "$DIR/faults.log") silent), $fo failovers, $fb fail-backs (both sides' counters); $recv messages received exactly once, intact; longest stall $(jget "$DIR/server.json" 'd["stall"]["longest"]["ms"]') ms"
}

# ---- all rails down ------------------------------------------------------------------------
case_all_down() {
  local delta=1000 limit tl se ce sdt cdt why="" late="" f
  limit=$((delta + 1000))
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$delta")
  pair_start all_down --conns 2 --duration 60 --max-size 256K --inflight 4 --stall-report \
    --timeout 30 --no-peer-abort
  if ! started; then pair_wait 30; verdict all_down "traffic never started (client $CRC, server $SRC)" ""; return; fi
  sleep 1
  printf 'link set vethA0 down\nlink set vethA1 down\n' | ip -b -
  tl=$EPOCHREALTIME
  pair_wait 60
  se=$(jget "$DIR/server.json" 'd["first_error"]["wall"]')
  ce=$(jget "$DIR/client.json" 'd["first_error"]["wall"]')
  if [ "$se" != "?" ]; then sdt=$(calc "($se - $tl) * 1000"); else sdt="?"; fi
  if [ "$ce" != "?" ]; then cdt=$(calc "($ce - $tl) * 1000"); else cdt="?"; fi
  # 1 = a clean error; 3 = the harness's watchdog (a hang); 137 = the backstop; > 128 a signal
  [ "$CRC" -eq 1 ] || why+="the sender did not end with a clean error (exit $CRC); "
  [ "$SRC" -eq 1 ] || why+="the receiver did not end with a clean error (exit $SRC); "
  for f in client server; do
    [ "$(jget "$DIR/$f.json" 'd["counters"]["connection_errors_total"]')" -ge 1 ] 2>/dev/null ||
      why+="the $f's plugin counted no connection error; "
  done
  { [ "$cdt" != "?" ] && is_true "$cdt <= $limit"; } || late+="the sender's error came $cdt ms after (limit $limit); "
  { [ "$sdt" != "?" ] && is_true "$sdt <= $limit"; } || late+="the receiver's error came $sdt ms after (limit $limit); "
  verdict_timed all_down "$why" "$late" "δ = $delta ms; the sender's error $cdt ms, the receiver's $sdt ms after both NICs went down (limit $limit ms); exits $CRC/$SRC; plugin: $(grep -hE 'WARN.*failed' "$DIR/client.log" | head -1 | sed 's/.*NET\/rerail: //' | cut -c1-150)"
  rxefault link 0 up A
  rxefault link 1 up A
}

# ---- dead peer ------------------------------------------------------------------------------
case_dead_peer() {
  local delta=1000 limit tk se sdt loops why="" late=""
  limit=$((delta + 1000))
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$delta")
  pair_start dead_peer --conns 2 --duration 60 --max-size 256K --inflight 4 --stall-report \
    --timeout 30 --no-peer-abort
  if ! started; then pair_wait 30; verdict dead_peer "traffic never started (client $CRC, server $SRC)" ""; return; fi
  sleep 1
  tk=$EPOCHREALTIME
  kill -9 "$CPID"
  pair_wait 60
  se=$(jget "$DIR/server.json" 'd["first_error"]["wall"]')
  if [ "$se" != "?" ]; then sdt=$(calc "($se - $tk) * 1000"); else sdt="?"; fi
  loops=$(jget "$DIR/server.json" 'd["counters"]["failovers_total"]')
  [ "$SRC" -eq 1 ] || why+="the receiver did not end with a clean error (exit $SRC); "
  [ "$loops" -le 4 ] 2>/dev/null || why+="$loops failovers counted by the receiver, the peer dead (a replay loop?); "
  { [ "$sdt" != "?" ] && is_true "$sdt <= $limit"; } || late+="the error came $sdt ms after SIGKILL (limit $limit); "
  verdict_timed dead_peer "$why" "$late" "δ = $delta ms; the receiver's error $sdt ms after SIGKILL (limit $limit ms), exit $SRC; plugin: $(grep -hE 'WARN.*failed' "$DIR/server.log" | head -1 | sed 's/.*NET\/rerail: //' | cut -c1-150)"
}

# ---- telemetry -----------------------------------------------------------------------------
case_telemetry() {
  local why="" st js prom ev
  PAIR_ENV=(RERAIL_PROGRESS_TIMEOUT=1000 RERAIL_FAILBACK_HOLD=500 RERAIL_TELEMETRY_INTERVAL=200)
  A_ENV=("RERAIL_TELEMETRY_DIR=$WORK/telemetry/telA") B_ENV=("RERAIL_TELEMETRY_DIR=$WORK/telemetry/telB")
  # long enough to still run when the checks read the live table and .prom file (a loaded
  # guest takes seconds to start a command)
  pair_start telemetry --conns 2 --duration 16 --max-size 256K --inflight 4 --timeout 60
  A_ENV=() B_ENV=()
  if ! started; then pair_wait 30; verdict telemetry "traffic never started (client $CRC, server $SRC)" ""; return; fi
  sleep 1
  rxefault link 0 down A
  # the failover, as the exporter writes it (every 200 ms): counted off vethA0 in the .prom
  for _ in $(seq 40); do
    grep -qsE '^rerail_failovers_total\{[^}]*nic="vethA0",peer="[^"]+"\} [1-9]' "$WORK"/telemetry/telA/rerail-*.prom && break
    sleep 0.1
  done
  sleep 1
  kill -0 "$CPID" 2>/dev/null || why+="the sender ended before the checks (raise --duration); "
  st=$DIR/status.txt js=$DIR/status.json
  "$RERAIL" status --path /dev/shm/rr-health-A --dir "$WORK/telemetry/telA" >"$st" 2>&1
  "$RERAIL" status --json --path /dev/shm/rr-health-A --dir "$WORK/telemetry/telA" >"$js" 2>&1
  prom=$(compgen -G "$WORK/telemetry/telA/rerail-*.prom" | head -1)
  # the file goes when the process unloads the plugin: keep a copy
  if [ -n "$prom" ] && cp "$prom" "$DIR/a.prom"; then prom=$DIR/a.prom; else prom=""; fi
  rxefault link 0 up A
  pair_wait 60
  ev=$(compgen -G "$WORK/telemetry/telA/rerail-events-*.jsonl" | head -1)
  [ "$CRC" -eq 0 ] && [ "$SRC" -eq 0 ] || why+="client exit $CRC, server exit $SRC; "
  # rerail status: the NIC down, the failover off it, and its transport (read from the .prom
  # file of the row's process: the health table has no field for it)
  grep -qE '^vethA0 .* down .* verbs rxe0:1 ' "$st" || why+="rerail status: no 'vethA0 ... down ... verbs rxe0:1' row; "
  grep -qE '^vethA1 .* up .* verbs rxe1:1 ' "$st" || why+="rerail status: no 'vethA1 ... up ... verbs rxe1:1' row; "
  python3 - "$js" <<'EOF' || why+="rerail status --json: vethA0 (verbs, rxe0 port 1) is not down with a failover off it onto vethA1 (verbs, rxe1); "
import json, sys
d = json.load(open(sys.argv[1]))
n = {x["ifname"]: x for x in d["nics"]}
a0, a1 = n["vethA0"], n["vethA1"]
assert a0["state"] == "down" and a0["failovers_from"] >= 1 and a1["failovers_to"] >= 1 and a1["state"] == "up"
assert a0["transport"] == "verbs" and a0["rdma_device"] == "rxe0" and a0["rdma_port"] == 1
assert a1["transport"] == "verbs" and a1["rdma_device"] == "rxe1"
EOF
  # the Prometheus file
  if [ -z "$prom" ]; then why+="no .prom file; "
  else
    grep -qE '^rerail_nic_info\{[^}]*nic="vethA0",transport="verbs",rdma_device="rxe0",rdma_port="1"\} 1$' "$prom" ||
      why+=".prom: no rerail_nic_info for vethA0 on verbs rxe0 port 1; "
    grep -qE '^rerail_nic_state\{[^}]*nic="vethA0"\} 2$' "$prom" || why+=".prom: vethA0's state is not down (2); "
    grep -qE '^rerail_failovers_total\{[^}]*nic="vethA0",peer="[^"]+"\} [1-9]' "$prom" ||
      why+=".prom: no failover counted off vethA0; "
  fi
  # the event log
  if [ -z "$ev" ]; then why+="no event log; "
  else
    python3 - "$ev" <<'EOF' || why+="event log: no nic_state down and failover vethA0 -> vethA1 naming verbs rxe0 / rxe1; "
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
assert any(e["kind"] == "nic_state" and e["nic"] == "vethA0" and e["state"] == "down"
           and e["transport"] == "verbs" and e["rdma_device"] == "rxe0" for e in evs)
assert any(e["kind"] == "failover" and e["nic"] == "vethA0" and e["to_nic"] == "vethA1"
           and e["transport"] == "verbs" and e["rdma_device"] == "rxe0"
           and e["to_transport"] == "verbs" and e["to_rdma_device"] == "rxe1" for e in evs)
EOF
  fi
  echo "---- rerail status (host A, after the failover)"; cat "$st"
  echo "---- .prom (host A): NIC lines"; grep -E '^rerail_(nic_|failovers_total)' "$DIR/a.prom" 2>/dev/null
  echo "---- event log (host A): the failover"; grep -m1 '"failover"' "$ev" 2>/dev/null
  verdict telemetry "$why" "rerail status, the .prom file and the event log show vethA0 (verbs, rxe0) down and the failover to vethA1 (verbs, rxe1)"
}

# ---- forged write -------------------------------------------------------------------------
case_forged_write() {
  local why=""
  PAIR_ENV=(RERAIL_PROGRESS_TIMEOUT=1000 RERAIL_FAILBACK_HOLD=500) A_ENV=(RERAIL_TEST_FORGE_WRITE=300)
  pair_start forged_write --conns 2 --duration 8 --max-size 256K --inflight 4 --timeout 60
  A_ENV=()
  if ! started; then pair_wait 30; verdict forged_write "traffic never started (client $CRC, server $SRC)" ""; return; fi
  pair_wait 60
  [ "$CRC" -eq 0 ] && [ "$SRC" -eq 0 ] || why+="client exit $CRC, server exit $SRC; "
  [ "$(jget "$DIR/client.json" 'd["counters"]["test_forged_writes_total"]')" -ge 1 ] 2>/dev/null ||
    why+="the sender never forged a write (inconclusive); "
  [ "$(jget "$DIR/server.json" 'sum(v for k, v in d["counters"].items() if k.startswith("protocol_violations_total"))')" -ge 1 ] 2>/dev/null ||
    why+="the receiver did not refuse the forged write; "
  verdict forged_write "$why" "refused after the NIC placed it ($(grep -ho 'broke the protocol ([^)]*)' "$DIR/server.log" | head -1)), failed over, every byte checked"
}

# slow_rail, latency: a rail shaped to 5 % or delayed is demoted and comes back (verbs_gray.sh)
# shellcheck source=test/lab/rxe/verbs_gray.sh disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/verbs_gray.sh"

echo "verbs_faults: cases ${CASES[*]} (scale $SCALE)"
for c in "${CASES[@]}"; do
  declare -f "case_$c" >/dev/null || { echo "unknown case '$c'" >&2; exit 2; }
done
for c in "${CASES[@]}"; do
  t0=$SECONDS ATTEMPT=0 RETRY=0
  "case_$c"
  if [ "$RETRY" = 1 ]; then ATTEMPT=1 RETRY=0; "case_$c"; fi
  echo "verbs_faults: ($c took $((SECONDS - t0)) s)"
done
echo "verbs_faults: $FAILS failure(s)"
exit $((FAILS != 0))
