#!/usr/bin/env bash
# The rerail demo: two "hosts" (network namespaces) joined by two rails
# (veth pairs through per-rail switches). One rank streams checksummed
# messages to the other through libnccl-net-rerail.so, driven the way NCCL's
# proxy drives it. Mid-run the NIC carrying the traffic fails (link down);
# rerail fails over to the backup rail without losing, duplicating or
# corrupting a byte; the NIC comes back and traffic fails back to it.
#   BUILD_DIR=...    where rerail is built (default: build/)
#   DEMO_SECONDS=N   length of the run (default 16)
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$top/build}"
secs="${DEMO_SECONDS:-16}"
if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: run as root (it builds network namespaces)" >&2
  exit 1
fi
harness="$build/test/harness/rerail-harness"
[ -x "$harness" ] || { echo "demo.sh: $harness not built (run tools/build.sh)" >&2; exit 1; }

work="$(mktemp -d /tmp/rerail-demo.XXXXXX)"
export DEMO_WORK="$work" DEMO_HARNESS="$harness" DEMO_LIB="$build/net_plugin" DEMO_SECONDS="$secs"
export DEMO_TOOL="$build/tools/rerail"
cat > "$work/run.sh" <<'INNER'
#!/usr/bin/env bash
set -u
cd "$DEMO_WORK" && mkdir -p rdv
export LD_LIBRARY_PATH="$DEMO_LIB" NCCL_NET_PLUGIN=rerail RERAIL_SOCKET_IFNAME=rail \
       RERAIL_PROGRESS_TIMEOUT=500 RERAIL_FAILBACK_HOLD=500 RERAIL_LOG_LEVEL=warn \
       RERAIL_HEALTH_PATH="$DEMO_WORK/health" RERAIL_TELEMETRY_DIR="$DEMO_WORK/telemetry"
common=(--rendezvous "$DEMO_WORK/rdv" --conns 4 --duration "$DEMO_SECONDS" --max-size 4M --quiet)
netlab exec 1 "$DEMO_HARNESS" --role server "${common[@]}" > server.log 2>&1 &
server=$!
netlab exec 0 "$DEMO_HARNESS" --role client "${common[@]}" > client.log 2>&1 &
client=$!
t0=$SECONDS
phase() { echo "[$((SECONDS - t0))s] $*"; }
sleep $((DEMO_SECONDS / 3))
phase "healthy: the NIC and rail state series dashboards read (0 = up):"
grep -h '^rerail_\(nic\|rail\)_state' "$DEMO_WORK"/telemetry/*.prom 2>/dev/null | head -8 | sed 's/^/    /' || true
phase "rank 0's NIC rail0 fails (ip link set rail0 down)"
netlab link 0 0 down
sleep 2
phase "rerail status (the shared health table; both ranks run on this machine):"
"$DEMO_TOOL" status --path "$DEMO_WORK/health" | sed 's/^/    /'
sleep $((DEMO_SECONDS / 3 - 2))
phase "rail0 comes back (ip link set rail0 up)"
netlab link 0 0 up
sleep 2
phase "rerail status after the fail-back:"
"$DEMO_TOOL" status --path "$DEMO_WORK/health" | sed 's/^/    /'
phase "rerail events (the telemetry event log):"
"$DEMO_TOOL" events --dir "$DEMO_WORK/telemetry" --once 2>/dev/null | tail -6 | sed 's/^/    /' 
wait "$client"; crc=$?
wait "$server"; src=$?
phase "run over"
echo
echo "what the plugin reported (rank 0):"
grep -E "health: (nic_state|failover|failback)" client.log | sed 's/.*health: /  /' | sort | uniq -c | sed 's/^ */  /' || true
echo
echo "what moved:"
grep -E "^  (sent|received|plugin warnings)" client.log server.log | sed 's/^[a-z]*\.log://' || true
[ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
INNER
chmod +x "$work/run.sh"
echo "rerail demo: 2 hosts x 2 rails, 4 connections, ${secs}s of checksummed traffic, a NIC failure and its recovery"
if "$top/test/lab/netlab.sh" run --name rrdemo --hosts 2 --rails 2 -- "$work/run.sh"; then
  echo
  echo "DEMO PASSED: every byte arrived intact across the NIC failure (logs: $work)"
else
  echo
  echo "DEMO FAILED (logs: $work)" >&2
  exit 1
fi
