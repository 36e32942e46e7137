#!/usr/bin/env bash
# Thousands of connections on the TCP rail (issue 23): setup time and memory
# per connection, rerail against NCCL's own socket transport (NCCL_NET=Socket,
# taken out of libnccl.so.2) in ONE run, on loopback, one rail, two processes.
# Both are driven by the same NCCL-faithful harness (rerail-harness
# --scale-report): the server listens N times (one listen comm per
# connection, as NCCL does per peer and channel), the client connects N
# times, connect()/accept() are called again and again until each returns a
# comm, then every connection carries a few small checked messages
# (--iters 8, at most 4 KiB, one in flight) before anything is closed.
#
# Figures, per side (the client holds N send comms, the server N receive
# comms):
#   setup ms   the server's listen phase plus the connect phase (from the
#              client's first connect() to the last comm on either side); the
#              harness's handle files in between are left out
#   KB/conn    resident memory growth over N, after traffic (before close);
#              the harness's own buffers are allocated and touched before the
#              baseline
#   connect ms the client's connect phase alone (first connect() to its last comm)
#   done ms    the client's first connect() to the end of both sides' traffic:
#              a plugin that leaves part of its setup to the first operations
#              (rerail's send end reads the listener's last answers behind
#              connect(), conn_confirm.c) pays it there
#   fds, thr   file descriptors and threads the process holds then
# Rounds alternate the plugins so the machine's drift hits all alike; the
# table gives each figure's median over the rounds.
#
# usage: bench/conn_scale.sh BUILD_DIR [--quick]
#   --quick      N = 512 only, one round
# environment:
#   CONNS="512 2048"  connection counts (default)
#   ROUNDS=N          alternating rounds (default 3)
#   RERAIL_B=DIR      a second rerail build (DIR/net_plugin/libnccl-net-rerail.so)
#                     as another column: before/after a change
#   NCCL_LIB=PATH     libnccl.so.2 (default: the dynamic loader's search, else
#                     the one CMake found for BUILD_DIR)
#   OUT_DIR           where the JSON summaries go (default: a fresh temp dir)
#   BARRIER=1         each side starts its traffic only once the other has all its
#                     comms (--setup-barrier): on one host, the traffic of the side
#                     done first otherwise slows the other's setup
# rerail runs with its defaults (RERAIL_BACKUPS=1: on one NIC there is no
# backup to open) on RERAIL_SOCKET_IFNAME=lo; NCCL with NCCL_SOCKET_IFNAME=lo.
set -euo pipefail

# shellcheck source=bench/bench_cli.sh
. "$(dirname "$0")/bench_cli.sh"
bench_cli_parse conn_scale.sh "$@"
CMDLINE="bench/conn_scale.sh BUILD_DIR"
if [[ $QUICK == 1 ]]; then CMDLINE+=" --quick"; fi
if [[ ${BARRIER:-0} == 1 ]]; then CMDLINE="BARRIER=1 $CMDLINE"; fi

HARNESS="$BUILD/test/harness/rerail-harness"
PLUGIN_A="$BUILD/net_plugin/libnccl-net-rerail.so"
for f in "$HARNESS" "$PLUGIN_A"; do
  [[ -e "$f" ]] || { echo "conn_scale.sh: $f not built (the harness needs RERAIL_BUILD_TESTS=ON)" >&2; exit 1; }
done
PLUGIN_B=""
if [[ -n "${RERAIL_B:-}" ]]; then
  PLUGIN_B="$(cd "$RERAIL_B" && pwd)/net_plugin/libnccl-net-rerail.so"
  [[ -e "$PLUGIN_B" ]] || { echo "conn_scale.sh: RERAIL_B: $PLUGIN_B not built" >&2; exit 1; }
fi
# shellcheck source=bench/find_libnccl.sh
. "$(dirname "$0")/find_libnccl.sh"
find_libnccl "$BUILD"
if [[ -z "$NCCL_LIB" ]]; then
  echo "conn_scale.sh: libnccl.so.2 not found: NCCL's socket transport is half of this benchmark;" \
       "set NCCL_LIB=/path/to/libnccl.so.2" >&2
  exit 1
fi
NCCL_VERSION=$(libnccl_version "$NCCL_LIB")

CONNS=${CONNS:-$([[ $QUICK == 1 ]] && echo 512 || echo "512 2048")}
ROUNDS=${ROUNDS:-$([[ $QUICK == 1 ]] && echo 1 || echo 3)}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/rerail-conn-scale.XXXXXX)}
mkdir -p "$OUT_DIR"

# Every connection holds a few descriptors on each side: room for them.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

SIDES=(rerail nccl)
[[ -n "$PLUGIN_B" ]] && SIDES+=(rerail_b)
plugin_of() {
  case "$1" in
    rerail) echo "$PLUGIN_A" ;;
    rerail_b) echo "$PLUGIN_B" ;;
    nccl) echo "nccl-socket:$NCCL_LIB" ;;
  esac
}

# run SIDE N ROUND: one server and one client; their JSON summaries in OUT_DIR.
run() {
  local side=$1 n=$2 round=$3 rdv pid rc=0
  rdv=$(mktemp -d "$OUT_DIR/rdv.XXXXXX")
  local args=(--plugin "$(plugin_of "$side")" --rendezvous "$rdv" --conns "$n" --iters 8 --max-size 4K
              --inflight 1 --no-flush --scale-report --json --quiet --timeout 300 --max-call-ms 5000)
  [[ ${BARRIER:-0} == 1 ]] && args+=(--setup-barrier)
  local base="$OUT_DIR/$side.$n.$round"
  RERAIL_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo "$HARNESS" --role server "${args[@]}" >"$base.server.json" 2>"$base.server.err" &
  pid=$!
  RERAIL_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo "$HARNESS" --role client "${args[@]}" >"$base.client.json" 2>"$base.client.err" || rc=$?
  wait "$pid" || rc=$?
  rm -rf "$rdv"
  if [[ $rc != 0 ]]; then
    echo "conn_scale.sh: $side with $n connections failed (exit $rc); see $base.*" >&2
    exit 1
  fi
}

for n in $CONNS; do
  for ((r = 1; r <= ROUNDS; r++)); do
    for side in "${SIDES[@]}"; do
      echo "conn_scale.sh: $side, $n connections, round $r" >&2
      run "$side" "$n" "$r"
    done
  done
done

python3 - "$OUT_DIR" "$ROUNDS" "$CONNS" "${SIDES[@]}" <<'EOF'
import json, statistics, sys
out, rounds, conns, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def load(side, n, r, role):
    lines = open(f"{out}/{side}.{n}.{r}.{role}.json").read().strip().splitlines()
    return json.loads(lines[-1])
def med(xs):
    return statistics.median(xs)
names = {"rerail": "rerail", "rerail_b": "rerail B", "nccl": "NCCL Socket"}
print("| N | plugin | setup ms | connect ms | done ms | client KB/conn | server KB/conn | client fds | server fds | threads (c/s) | CPU ms in setup (c/s) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fig = {}
for n in conns:
    for side in sides:
        runs = [(load(side, n, r, "client"), load(side, n, r, "server")) for r in range(1, rounds + 1)]
        setup = med([s["scale"]["setup_ms"] for c, s in runs])
        conn = med([c["scale"]["connect_ms"] for c, s in runs])
        done = med([max(c["scale"]["traffic_done_ms"], s["scale"]["traffic_done_ms"]) for c, s in runs])
        ckb = med([c["scale"]["kb_per_conn_traffic"] for c, s in runs])
        skb = med([s["scale"]["kb_per_conn_traffic"] for c, s in runs])
        c, s = runs[-1]
        cfd = c["scale"]["traffic"]["fds"] - c["scale"]["before"]["fds"]
        sfd = s["scale"]["traffic"]["fds"] - s["scale"]["before"]["fds"]
        cth, sth = c["scale"]["traffic"]["threads"], s["scale"]["traffic"]["threads"]
        ccpu = med([c["scale"]["setup"]["cpu_ms"] - c["scale"]["before"]["cpu_ms"] for c, s in runs])
        scpu = med([s["scale"]["setup"]["cpu_ms"] - s["scale"]["before"]["cpu_ms"] for c, s in runs])
        fig[(n, side)] = (setup, ckb, skb, conn, done)
        print(f"| {n} | {names[side]} | {setup:.0f} | {conn:.0f} | {done:.0f} | {ckb:.1f} | {skb:.1f} | {cfd} | {sfd} | {cth}/{sth} | {ccpu:.0f}/{scpu:.0f} |")
print()
for n in conns:
    for side in sides:
        if side == "nccl":
            continue
        a, b = fig[(n, side)], fig[(n, "nccl")]
        print(f"- N={n}, {names[side]} / NCCL: setup {a[0] / b[0]:.2f}x, connect {a[3] / b[3]:.2f}x, "
              f"done {a[4] / b[4]:.2f}x, memory per connection "
              f"{a[1] / b[1]:.2f}x (client), {a[2] / b[2]:.2f}x (server)")
EOF
echo
echo "NCCL ${NCCL_VERSION:-?} ($NCCL_LIB); $ROUNDS round(s), medians; command: $CMDLINE${RERAIL_B:+ (RERAIL_B=...)}"
echo "fds: descriptors the connections added (listen, connect and accepted sockets still open); threads: the process's"
