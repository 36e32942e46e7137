#!/usr/bin/env bash
# Correctness across the network lab: two hosts (namespaces) joined by two
# rails, 4 connections of checksummed traffic with random sizes 0..8 MiB and
# grouped receives for ${RERAIL_LAB_SECONDS:-60} s (scaled by RERAIL_TEST_SCALE),
# every byte checked, zero errors allowed, and zero rails demoted as degraded
# (demotion on at its defaults: this is the healthy run that shows ordinary
# noise never demotes a rail; counted from both processes' telemetry event logs,
# rail_state events into state "degraded"). Needs root (CI runs as root).
#
# usage: harness_lab.sh PLUGIN_DIR HARNESS
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
TOP="$(cd "$(dirname "$0")/../.." && pwd)"
scale=${RERAIL_TEST_SCALE:-1}
secs=$(awk -v s="${RERAIL_LAB_SECONDS:-60}" -v k="$scale" 'BEGIN { d = int(s * k); print (d < 5 ? 5 : d) }')
if [ "$(id -u)" -ne 0 ]; then
  echo "harness_lab: needs root for the network lab" >&2
  exit 1
fi
work=$(mktemp -d /tmp/rerail-harness-lab.XXXXXX)
mkdir -p "$work/rdv" "$work/tel"
cat > "$work/run.sh" <<INNER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$PLUGIN_DIR" RERAIL_SOCKET_IFNAME=rail RERAIL_LOG_LEVEL=warn RERAIL_TELEMETRY_DIR="$work/tel"
unset RERAIL_DEGRADED_PCT RERAIL_DEGRADED_MS RERAIL_DEGRADED_RESTORE_PCT RERAIL_DEGRADED_RETRANS_PCT
args=(--rendezvous "$work/rdv" --conns 4 --min-size 0 --max-size 8M --duration $secs --seed 11 --timeout $((secs + 120)) --quiet)
netlab exec 1 "$HARNESS" --role server "\${args[@]}" > "$work/server.log" 2>&1 &
s=\$!
netlab exec 0 "$HARNESS" --role client "\${args[@]}" > "$work/client.log" 2>&1
c=\$?
wait \$s
r=\$?
exit \$(( c != 0 || r != 0 ))
INNER
chmod +x "$work/run.sh"
"$TOP/test/lab/netlab.sh" run --name rrlab --hosts 2 --rails 2 -- "$work/run.sh"
rc=$?
grep -hE "^  (sent|received|plugin warnings)" "$work/client.log" "$work/server.log"
# Demotions in both processes' event logs; "?" when a process wrote none (telemetry
# could not start: the run cannot show zero then).
demotions=$(python3 - "$work"/tel/rerail-events-*.jsonl <<'PY'
import json, sys
files = [f for f in sys.argv[1:] if not f.endswith("*.jsonl")]
n = 0
for f in files:
    for line in open(f):
        ev = json.loads(line)
        n += ev.get("kind") == "rail_state" and ev.get("state") == "degraded"
print(n if len(files) == 2 else "?")
PY
)
echo "  demotions: $demotions"
[ "$demotions" = 0 ] || { echo "harness_lab: $demotions rail demotions in a healthy run (want 0)"; rc=1; }
if [ $rc -eq 0 ]; then
  echo "PASS harness_lab: ${secs}s, 4 connections, sizes 0..8M, grouped receives, every byte checked, 0 demotions"
  rm -rf "$work"
  exit 0
fi
echo "FAIL harness_lab (logs in $work)"
tail -20 "$work/client.log" "$work/server.log"
exit 1
