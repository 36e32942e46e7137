#!/usr/bin/env bash
# What an operator's dashboard sees, from the first export on: a healthy job
# and the same job through a NIC failure.
#
# usage: telemetry_series.sh PLUGIN_DIR HARNESS
#   PLUGIN_DIR  directory holding libnccl-net-rerail.so
#   HARNESS     the rerail-harness executable
#
# The harness runs as two hosts in the network lab (2 rails, 4 connections of
# checksummed traffic) with telemetry on; node_exporter's textfile collector
# (own instance: 127.0.0.1, a free port) reads their .prom files. The metrics
# a dashboard uses are every rerail_ name in the queries of
# docs/grafana/rerail-dashboard.json (panels, annotations, variables).
#
# Cases:
#   healthy    traffic, no failure: every dashboard metric has a series for
#              both processes on /metrics; each process has the state of both
#              pooled NICs (0 = up), a state per rail of its connections (0),
#              failover and fail-back counters for each such rail and an
#              error counter per peer, all at 0; promtool check metrics clean
#   failure    host 0's rail0 goes down: the same metrics still have their
#              series, host 0 reads rail0 down (2) for the NIC and its rail
#              and counts a failover; promtool clean; the run ends with zero
#              errors (every byte checked)
#   log_paths  the plugin names its sources in log lines relative to the
#              project (common/health/rr_health_bus.c), not by the build machine's path
#
# Needs root (the lab), promtool and prometheus-node-exporter
# (tools/install-deps.sh). A lab named after $RERAIL_LAB (default rrts) and
# this process's pid. KEEP_LOGS=1 keeps the work directory.
# shellcheck disable=SC2034,SC2153,SC1091  # PAIR_ENV: read by resilience_lib.sh; CPID, SPID: set by it
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
# shellcheck source=resilience_lib.sh
. "$(dirname "$0")/resilience_lib.sh"

PROMTOOL=$(command -v promtool || true)
NODE_EXP=$(command -v prometheus-node-exporter || command -v node_exporter || true)
for t in "$PROMTOOL" "$NODE_EXP" "$(command -v curl)" "$(command -v readelf)"; do
  [ -n "$t" ] || { echo "FAIL: needs promtool, prometheus-node-exporter, curl and readelf (tools/install-deps.sh)" >&2; exit 1; }
done
DASH="$RES_TOP/docs/grafana/rerail-dashboard.json"
LABNAME="$(printf %.8s "${RERAIL_LAB:-rrts}")s$$"
TEL="$WORK/tel"
mkdir -p "$TEL"
NPID=""
stop_exporter() { [ -n "$NPID" ] && kill "$NPID" 2>/dev/null && wait "$NPID" 2>/dev/null; NPID=""; }
trap 'stop_exporter; lab_cleanup' EXIT

# ---- log_paths: no lab needed. The log's source names are __FILE__ strings:
# relative ones exist only when the compiler maps the project's path away (the
# sanitizers add absolute ones of their own, so those are not counted against).
SO="$PLUGIN_DIR/libnccl-net-rerail.so"
readelf -p .rodata "$SO" >"$WORK/rodata.txt" 2>&1
rel=$(grep -cE '\]  (common|net_plugin)/[A-Za-z0-9_/]+\.c$' "$WORK/rodata.txt")
if grep -qE '\]  common/([A-Za-z0-9_]+/)?rr_health_bus\.c$' "$WORK/rodata.txt"; then
  pass log_paths "$rel source names relative to the project, as common/health/rr_health_bus.c"
else
  fail log_paths "$SO does not name rr_health_bus.c as common/...: $(grep -E 'rr_health_bus\.c$' "$WORK/rodata.txt" | head -2)"
fi

# ---- node_exporter on the telemetry directory
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
"$NODE_EXP" --web.listen-address="127.0.0.1:$PORT" --collector.disable-defaults --collector.textfile \
  --collector.textfile.directory="$TEL" >"$WORK/node_exporter.log" 2>&1 &
NPID=$!
# scrape PHASE: /metrics into $WORK/PHASE.metrics, every .prom into $WORK/PHASE/
scrape() {
  mkdir -p "$WORK/$1"
  cp "$TEL"/rerail-*.prom "$WORK/$1/" 2>/dev/null
  curl -sf --max-time 2 "http://127.0.0.1:$PORT/metrics" >"$WORK/$1.metrics"
}

# check PHASE: the dashboard's metrics and the phase's values on /metrics, promtool on the files
check() {
  local phase=$1 f why=""
  for f in "$WORK/$phase"/rerail-*.prom; do
    [ -e "$f" ] || { why+=" no .prom file;"; break; }
    "$PROMTOOL" check metrics <"$f" >"$WORK/$phase/promtool.out" 2>&1 ||
      why+=" promtool on $(basename "$f"): $(tr '\n' ' ' <"$WORK/$phase/promtool.out");"
  done
  python3 "$WORK/check.py" "$DASH" "$WORK/$phase.metrics" "$phase" "$CPID" "$SPID" >"$WORK/$phase/check.out" 2>&1 ||
    why+=" $(tr '\n' ';' <"$WORK/$phase/check.out")"
  if [ -z "$why" ]; then pass "$phase" "$(cat "$WORK/$phase/check.out")"
  else fail "$phase" "$why"; fi
}

# ---- the job
lab_start "$LABNAME" 2 2
PAIR_ENV=(RERAIL_TELEMETRY_DIR="$TEL" RERAIL_TELEMETRY_INTERVAL=200 RERAIL_HEALTH_PATH="$WORK/health")
pair_start pair --conns 4 --max-size 4M --duration 15 --quiet
if ! pair_wait_traffic; then
  pair_wait 30
  fail healthy "traffic never started (server exit $SRC, client exit $CRC)"
  finish
fi

cat >"$WORK/check.py" <<'PY'
import json, re, sys
dash_path, metrics_path, phase, cpid, spid = sys.argv[1:6]

def exprs(node):
    """Every query string of the dashboard: targets, annotations, variables."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "query", "definition") and isinstance(v, str):
                yield v
            else:
                yield from exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v)

wanted = sorted({m for e in exprs(json.load(open(dash_path))) for m in re.findall(r"\brerail_[a-z0-9_]+", e)})
samples = []  # (name, labels, value)
scrape_error = None
for line in open(metrics_path):
    if line.startswith("#") or not line.strip():
        continue
    m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line.strip())
    if not m:
        continue
    labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    samples.append((m.group(1), labels, float(m.group(3))))
    if m.group(1) == "node_textfile_scrape_error":
        scrape_error = float(m.group(3))

bad = []
if scrape_error != 0:
    bad.append("node_textfile_scrape_error is %s" % scrape_error)
if not wanted:
    bad.append("no rerail_ metric in the dashboard's queries")

def series(name, pid, **want):
    return [(l, v) for n, l, v in samples
            if n == name and l.get("pid") == pid and all(l.get(k) == x for k, x in want.items())]

for pid, who in ((cpid, "sender"), (spid, "receiver")):
    missing = [m for m in wanted if not series(m, pid)]
    if missing:
        bad.append("%s (pid %s): no series for %s" % (who, pid, ", ".join(missing)))
    rails = {(l["nic"], l["peer"]): v for l, v in series("rerail_rail_state", pid)}
    for fam in ("rerail_failovers_total", "rerail_failbacks_total"):
        keys = {(l["nic"], l["peer"]) for l, v in series(fam, pid)}
        if keys != set(rails):
            bad.append("%s: %s for %s, rail states for %s" % (who, fam, sorted(keys), sorted(rails)))
    err_peers = {l["peer"] for l, v in series("rerail_connection_errors_total", pid)}
    if not {p for _, p in rails} <= err_peers:
        bad.append("%s: connection errors for %s, rails to %s" % (who, sorted(err_peers), sorted(rails)))
    nics = {l["nic"]: v for l, v in series("rerail_nic_state", pid)}
    for nic in ("rail0", "rail1"):
        if nic not in nics:
            bad.append("%s: no rerail_nic_state for pooled NIC %s" % (who, nic))
        if nic not in {n for n, _ in rails}:
            bad.append("%s: no rerail_rail_state over %s" % (who, nic))
    if phase == "healthy":
        nonzero = ["%s%s=%g" % (n, {k: l[k] for k in ("nic", "peer") if k in l}, v)
                   for n, l, v in samples if l.get("pid") == pid and v != 0 and n in (
                       "rerail_nic_state", "rerail_rail_state", "rerail_failovers_total",
                       "rerail_failbacks_total", "rerail_connection_errors_total")]
        if nonzero:
            bad.append("%s: healthy, but %s" % (who, ", ".join(nonzero)))
    elif who == "sender":
        if nics.get("rail0") != 2:
            bad.append("sender: rerail_nic_state{nic=rail0} is %s, not 2 (down)" % nics.get("rail0"))
        if not any(v == 2 for (nic, _), v in rails.items() if nic == "rail0"):
            bad.append("sender: no rail over rail0 reads down: %s" % rails)
        if sum(v for _, v in series("rerail_failovers_total", cpid, nic="rail0")) < 1:
            bad.append("sender: no failover off rail0 counted")
for b in bad:
    print(b)
if not bad:
    print("%d dashboard metrics with series for both processes; rail states %s" % (
        len(wanted), sorted({(l["nic"], l["peer"], v) for n, l, v in samples
                             if n == "rerail_rail_state" and l.get("pid") == cpid})))
sys.exit(1 if bad else 0)
PY

# exported: both processes' files show traffic and its latency
exported() {
  local f n=0
  for f in "$TEL"/rerail-*.prom; do
    [ -e "$f" ] || return 1
    grep -qE '^rerail_rail_requests_total\{.*\} [1-9]' "$f" &&
      grep -qE '^rerail_rail_latency_seconds\{.*quantile' "$f" && n=$((n + 1))
  done
  [ $n -eq 2 ]
}
# ---- healthy
n=0
until exported || [ $n -ge 50 ]; do sleep 0.1; n=$((n + 1)); done
sleep 0.5   # two more exports
scrape healthy || fail healthy "no /metrics on 127.0.0.1:$PORT: $(tail -3 "$WORK/node_exporter.log")"
[ -s "$WORK/healthy.metrics" ] && check healthy

# ---- failure: host 0's rail0 NIC goes down
link 0 0 down
# down_seen: the sender's file reads rail0 down and a failover
down_seen() {
  grep -qE '^rerail_nic_state\{.*nic="rail0".*\} 2$' "$TEL/rerail-"*"-$CPID.prom" 2>/dev/null &&
    grep -qE '^rerail_failovers_total\{.*nic="rail0".*\} [1-9]' "$TEL/rerail-"*"-$CPID.prom"
}
n=0
until down_seen || [ $n -ge 50 ]; do sleep 0.1; n=$((n + 1)); done
sleep 0.5
scrape failure || fail failure "no /metrics on 127.0.0.1:$PORT: $(tail -3 "$WORK/node_exporter.log")"
[ -s "$WORK/failure.metrics" ] && check failure
pair_wait 60
if ok_pair; then pass run "across the failure: $(what_moved), zero errors"
else fail run "server exit $SRC, client exit $CRC, errors $(jget "$PAIR_DIR/server.json" 'd["errors"]')/$(jget "$PAIR_DIR/client.json" 'd["errors"]')"; fi
stop_exporter
finish
