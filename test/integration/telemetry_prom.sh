#!/usr/bin/env bash
# Telemetry files against their real consumers.
#
# usage: telemetry_prom.sh RERAIL TEL_WRITER PLUGIN_DIR HARNESS
#   RERAIL      the rerail tool (rerail top, rerail events)
#   TEL_WRITER  rerail-tel-writer (test/integration/tel_writer.c): a stand-in
#               job recording synthetic traffic in real time and reporting
#               health events
#   PLUGIN_DIR  directory of libnccl-net-rerail.so; HARNESS rerail-harness
#
# Cases:
#   promtool    `promtool check metrics` accepts the .prom file (lint included)
#   node_exp    node_exporter (own instance: 127.0.0.1, a free port, textfile
#               collector only) serves the rerail_ series without scrape errors
#   top         `rerail top --once` shows the rails and their rate
#   events      `rerail events --once` shows the events readably
#   follow      `rerail events --follow` misses nothing across rotations
#   grafana     every query of docs/grafana/rerail-dashboard.json (panels,
#               annotations, variables) runs on a Prometheus (own instance)
#               scraping that node_exporter, and the panels' ones return data
#   none        no files: both commands say so and exit 0
#   cleanup     a dead process's .prom is removed by the next job; a job's own
#               .prom goes when it exits, its event log stays
#   plugin      the real plugin on loopback (harness): the files it writes
#               pass promtool, both directions are there
# Needs prometheus, promtool (Debian: prometheus) and prometheus-node-exporter;
# CI runs tools/install-deps.sh. The packaged services are not used.
set -u
RERAIL=${1:?usage: $0 RERAIL TEL_WRITER PLUGIN_DIR HARNESS}
WRITER=${2:?}
PLUGIN_DIR=${3:?}
HARNESS=${4:?}

PROMTOOL=$(command -v promtool || true)
NODE_EXP=$(command -v prometheus-node-exporter || command -v node_exporter || true)
if [ -z "$PROMTOOL" ] || [ -z "$NODE_EXP" ]; then
  echo "telemetry_prom: needs promtool and prometheus-node-exporter (apt-get install -y prometheus prometheus-node-exporter)" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rerail-telprom.XXXXXX")
FAILS=0
RESULTS=()
BG=()
HOST=$(hostname | tr '/ \t' '___')

cleanup() {
  local p
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BG[@]}"; do wait "$p" 2>/dev/null; done
  echo
  echo "==== summary"
  for p in "${RESULTS[@]}"; do echo "  $p"; done
  if [ "$FAILS" -eq 0 ]; then
    rm -rf "$WORK"
    echo "all passed"
  else
    echo "$FAILS case(s) failed; files kept in $WORK"
  fi
}
trap cleanup EXIT
pass() { RESULTS+=("PASS  $1${2:+: $2}"); echo "PASS  $1${2:+: $2}"; }
fail() { FAILS=$((FAILS + 1)); RESULTS+=("FAIL  $1${2:+: $2}"); echo "FAIL  $1${2:+: $2}"; }

# wait_for SECONDS CMD...: poll CMD every 0.1 s
wait_for() {
  local n=$(( $1 * 10 )); shift
  while [ $n -gt 0 ]; do
    "$@" && return 0
    sleep 0.1
    n=$((n - 1))
  done
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# ---------------------------------------------------------------- a stand-in job
D1="$WORK/tel"
mkdir -p "$D1"
# A .prom left by a process of this host that died without unloading rerail.
sleep 0 & DEAD=$!; wait $DEAD
echo 'rerail_rail_bytes_total{host="x"} 1' >"$D1/rerail-$HOST-$DEAD.prom"

RERAIL_TELEMETRY_DIR="$D1" RERAIL_TELEMETRY_INTERVAL=200 \
  "$WRITER" --seconds 60 --rails 2 --rate 100 --events 6 --event-interval-ms 50 >"$WORK/writer.out" 2>"$WORK/writer.err" &
WPID=$!
BG+=("$WPID")
PROM="$D1/rerail-$HOST-$WPID.prom"
EVENTS="$D1/rerail-events-$HOST-$WPID.jsonl"
if ! wait_for 10 grep -q ready "$WORK/writer.out"; then
  fail writer "the stand-in job did not start: $(cat "$WORK/writer.err")"
  exit 1
fi
# Let a few intervals pass: windows full, all events reported, latency quantiles present.
sleep 1.5
cp "$PROM" "$WORK/writer.prom"

# ---- promtool
if "$PROMTOOL" check metrics <"$WORK/writer.prom" >"$WORK/promtool.out" 2>&1; then
  pass promtool "$(grep -c '^rerail_' "$WORK/writer.prom") samples, lint clean"
else
  fail promtool "$(cat "$WORK/promtool.out")"
fi

# ---- cleanup of a dead process's file
if [ ! -e "$D1/rerail-$HOST-$DEAD.prom" ]; then pass stale "dead pid $DEAD's .prom removed"
else fail stale "rerail-$HOST-$DEAD.prom still there"; fi

# ---- node_exporter
PORT=$(free_port)
"$NODE_EXP" --web.listen-address="127.0.0.1:$PORT" --collector.disable-defaults --collector.textfile \
  --collector.textfile.directory="$D1" >"$WORK/node_exporter.log" 2>&1 &
NPID=$!
BG+=("$NPID")
scrape() { curl -sf --max-time 2 "http://127.0.0.1:$PORT/metrics" >"$WORK/scrape.txt"; }
if wait_for 10 scrape; then
  ok=1
  why=""
  grep -q "^rerail_rail_bytes_total{direction=\"tx\",host=\"$HOST\",nic=\"rail0\",peer=\"10.77.0.2\",pid=\"$WPID\",rail=\"0\"} " \
    "$WORK/scrape.txt" || { ok=0; why+=" no rail0 tx bytes;"; }
  grep -q "^rerail_failovers_total{host=\"$HOST\",nic=\"rail0\",peer=\"10.77.0.2\",pid=\"$WPID\"} 1\$" \
    "$WORK/scrape.txt" || { ok=0; why+=" no failover count;"; }
  grep -q '^rerail_rail_latency_seconds{.*quantile="0.99"' "$WORK/scrape.txt" || { ok=0; why+=" no latency quantile;"; }
  grep -q '^rerail_rail_throughput_bytes_per_second{' "$WORK/scrape.txt" || { ok=0; why+=" no throughput;"; }
  grep -q '^node_textfile_scrape_error 0$' "$WORK/scrape.txt" || { ok=0; why+=" textfile scrape error;"; }
  grep -q "^node_textfile_mtime_seconds{file=\".*rerail-$HOST-$WPID.prom\"}" "$WORK/scrape.txt" ||
    { ok=0; why+=" file not collected;"; }
  if [ $ok -eq 1 ]; then pass node_exporter "$(grep -c '^rerail_' "$WORK/scrape.txt") rerail_ samples on /metrics"
  else fail node_exporter "$why (see $WORK/scrape.txt)"; fi
else
  fail node_exporter "no /metrics on 127.0.0.1:$PORT: $(tail -3 "$WORK/node_exporter.log")"
fi
# ---- the Grafana dashboard's queries, on a Prometheus scraping that node_exporter
DASH="$(dirname "$0")/../../docs/grafana/rerail-dashboard.json"
PROMETHEUS=$(command -v prometheus || true)
if [ -z "$PROMETHEUS" ]; then
  fail grafana "needs prometheus (apt-get install -y prometheus)"
else
  PPORT=$(free_port)
  cat >"$WORK/prometheus.yml" <<CFG
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: node
    static_configs: [{targets: ['127.0.0.1:$PORT']}]
CFG
  "$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/prometheus-data" \
    --web.listen-address="127.0.0.1:$PPORT" >"$WORK/prometheus.log" 2>&1 &
  PPID_=$!
  BG+=("$PPID_")
  if wait_for 20 curl -sf --max-time 1 "http://127.0.0.1:$PPORT/-/ready" -o /dev/null; then
    if python3 - "$DASH" "$PPORT" >"$WORK/grafana.out" 2>&1 <<'PY'
import json, sys, time, urllib.parse, urllib.request
dash, port = json.load(open(sys.argv[1])), sys.argv[2]
def query(q):
    url = "http://127.0.0.1:%s/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
    return json.load(urllib.request.urlopen(url, timeout=5))
# A few scrapes first, so that rate() and increase() have points (Prometheus
# hands targets to the scraper in 5 s batches: the first scrape comes late).
deadline = time.time() + 40
while time.time() < deadline:
    r = query("count_over_time(up[1m])")["data"]["result"]
    if r and float(r[0]["value"][1]) >= 4:
        break
    time.sleep(0.5)
assert dash["templating"]["list"][0]["type"] == "datasource", "no datasource variable"
sub = {"$__rate_interval": "1m", "$__range": "1h", "$host": ".*", "$nic": ".*", "$direction": ".*"}
bad = []
n = 0
queries = [(p["title"], t["expr"], True) for p in dash["panels"] for t in p.get("targets", [])]
queries += [(a["name"], a["expr"], False) for a in dash["annotations"]["list"] if "expr" in a]
queries += [(v["name"], "count by (%s) (%s)" % (v["definition"].split(",")[-1].strip(" )"),
             v["definition"][len("label_values("):].rsplit(",", 1)[0]), True)
            for v in dash["templating"]["list"] if v["type"] == "query"]
for title, expr, want_data in queries:
    for k, v in sub.items():
        expr = expr.replace(k, v)
    r = query(expr)
    n += 1
    if r.get("status") != "success":
        bad.append("%s: %s" % (title, r))
    elif want_data and not r["data"]["result"]:
        bad.append("%s: no data for %s" % (title, expr))
print("%d queries" % n)
for b in bad:
    print(b)
if bad:  # what Prometheus holds, to tell a scrape problem from a query problem
    for q in ("count_over_time(up[1m])", "count_over_time(rerail_rail_bytes_total[1m])"):
        print(q, "->", json.dumps(query(q)["data"]["result"])[:300])
sys.exit(1 if bad else 0)
PY
    then pass grafana "every dashboard query answers with data ($(head -1 "$WORK/grafana.out"))"
    else fail grafana "$(cat "$WORK/grafana.out")"; fi
  else
    fail grafana "prometheus did not start: $(tail -3 "$WORK/prometheus.log")"
  fi
  kill "$PPID_" 2>/dev/null
  wait "$PPID_" 2>/dev/null
fi
kill "$NPID" 2>/dev/null
wait "$NPID" 2>/dev/null

# ---- rerail top
"$RERAIL" top --once --dir "$D1" >"$WORK/top.out" 2>&1
rc=$?
rows=$(grep -cE "^$HOST +$WPID +rail[01] +10\.77\.0\.2 +[01] (tx|rx) +(9[5-9]|10[0-5])\.[0-9] MB/s" "$WORK/top.out")
if [ $rc -eq 0 ] && [ "$rows" -eq 4 ]; then pass top "4 rails at ~100 MB/s"
else fail top "rc $rc, $rows matching rows: $(cat "$WORK/top.out")"; fi

# ---- rerail events
"$RERAIL" events --once --dir "$D1" >"$WORK/events.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "failover    rail0 -> rail1  peer 10.77.0.2  stalled 12.500 ms  (ev 2)" "$WORK/events.out" &&
   grep -q "nic_state   rail0 down  (ev 0)" "$WORK/events.out" &&
   [ "$(grep -c "$HOST\[$WPID\]" "$WORK/events.out")" -eq 6 ]; then
  pass events "6 events, readable"
else
  fail events "rc $rc: $(cat "$WORK/events.out")"
fi
if python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    assert set(e) >= {"time", "time_ns", "kind", "nic", "to_nic", "peer", "state", "reason", "stall_ms"}, e
    n += 1
assert n == 6, n
' "$EVENTS" 2>"$WORK/json.err"; then pass events_json "every line is JSON with every field"
else fail events_json "$(cat "$WORK/json.err")"; fi

# ---- the job exits: its metrics go, its log stays
kill -TERM "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
# SIGTERM kills the stand-in without running destructors: like a crash. The
# next job removes the file (the stale case above); here do what it would.
D2="$WORK/follow"
mkdir -p "$D2"
RERAIL_TELEMETRY_DIR="$D2" RERAIL_TELEMETRY_INTERVAL=200 RERAIL_TELEMETRY_EVENTS_MAX=2048 \
  "$WRITER" --seconds 4 --rails 1 --rate 10 --events 40 --event-interval-ms 60 >"$WORK/writer2.out" 2>&1 &
W2=$!
BG+=("$W2")
wait_for 10 sh -c "ls $D2/rerail-events-*.jsonl >/dev/null 2>&1"
"$RERAIL" events --follow --dir "$D2" >"$WORK/follow.out" 2>&1 &
FPID=$!
BG+=("$FPID")
wait "$W2"
w2rc=$?
sleep 0.6
kill -INT "$FPID" 2>/dev/null
wait "$FPID" 2>/dev/null
missing=""
for i in $(seq 0 39); do
  c=$(grep -c "(ev $i)\$" "$WORK/follow.out")
  [ "$c" -eq 1 ] || missing+=" ev$i:$c"
done
rotated=$(ls "$D2"/rerail-events-*.jsonl.1 2>/dev/null | wc -l)
if [ $w2rc -eq 0 ] && [ -z "$missing" ] && [ "$rotated" -eq 1 ]; then pass follow "40 events, each once, across rotations"
else fail follow "writer rc $w2rc, rotated $rotated, missing/dup:$missing"; fi
if [ -z "$(ls "$D2"/rerail-*.prom 2>/dev/null)" ] && [ -n "$(ls "$D2"/rerail-events-*.jsonl 2>/dev/null)" ]; then
  pass cleanup "a job that exits takes its .prom out, keeps its event log"
else
  fail cleanup "$(ls "$D2")"
fi

# ---- nothing there
mkdir -p "$WORK/empty"
o1=$("$RERAIL" top --once --dir "$WORK/empty"); r1=$?
o2=$("$RERAIL" events --dir "$WORK/empty"); r2=$?
o3=$("$RERAIL" top --dir "$WORK/no-such-dir"); r3=$?
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] && [[ $o1 == *"no rerail job with telemetry here"* ]] &&
   [[ $o2 == *"no rerail job with telemetry here"* ]] && [[ $o3 == *"no rerail job with telemetry here"* ]]; then
  pass none "says so, exit 0"
else
  fail none "rc $r1/$r2/$r3: $o1 / $o2 / $o3"
fi

# ---- the real plugin
D3="$WORK/plugin"
mkdir -p "$D3/rdv"
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
RERAIL_SOCKET_IFNAME=lo RERAIL_TELEMETRY_DIR="$D3/tel" RERAIL_TELEMETRY_INTERVAL=100 \
  timeout -k 5 120 "$HARNESS" --role server --rendezvous "$D3/rdv" --conns 2 --duration 4 --quiet \
  --min-size 1M --max-size 4M >"$D3/server.log" 2>&1 &
SP=$!
BG+=("$SP")
RERAIL_SOCKET_IFNAME=lo RERAIL_TELEMETRY_DIR="$D3/tel" RERAIL_TELEMETRY_INTERVAL=100 \
  timeout -k 5 120 "$HARNESS" --role client --rendezvous "$D3/rdv" --conns 2 --duration 4 --quiet \
  --min-size 1M --max-size 4M >"$D3/client.log" 2>&1 &
CP=$!
BG+=("$CP")
both_moving() {
  local f n=0
  for f in "$D3"/tel/rerail-*.prom; do
    [ -e "$f" ] || return 1
    grep -qE '^rerail_rail_bytes_total\{.*\} [1-9]' "$f" && n=$((n + 1))
  done
  [ $n -eq 2 ]
}
if wait_for 30 both_moving; then
  ok=1
  for f in "$D3"/tel/rerail-*.prom; do
    cp "$f" "$f.copy"
    "$PROMTOOL" check metrics <"$f.copy" >"$D3/promtool.out" 2>&1 || { ok=0; break; }
  done
  dirs=$(cat "$D3"/tel/*.copy | grep -oE '^rerail_rail_bytes_total\{[^}]*direction="(tx|rx)"' |
         grep -oE '"(tx|rx)"' | sort -u | tr -d '\n')
  wait "$SP"; src=$?
  wait "$CP"; crc=$?
  left=$(ls "$D3"/tel/rerail-*.prom 2>/dev/null | wc -l)
  # The process counters are in both files from the start; a clean run on
  # loopback refuses nothing and rolls nothing back.
  ctr=ok
  for f in "$D3"/tel/*.copy; do
    for c in protocol_violations rollbacks closes_owed parked_sends placed_sends placed_claims \
             rail_reconnects settings_refused; do
      grep -qE "^rerail_${c}_total\{[^}]*\} [0-9]+\$" "$f" || ctr="no rerail_${c}_total in $(basename "$f")"
    done
    grep -qE '^rerail_(protocol_violations|rollbacks)_total\{[^}]*\} [1-9]' "$f" &&
      ctr="violations or rollbacks on a clean loopback run in $(basename "$f")"
  done
  if [ $ok -eq 1 ] && [ "$dirs" = '"rx""tx"' ] && [ $src -eq 0 ] && [ $crc -eq 0 ] && [ "$left" -eq 0 ] &&
     [ "$ctr" = ok ]; then
    pass plugin "harness on loopback: tx and rx series, process counters at 0, promtool clean, files gone at exit"
  else
    fail plugin "promtool ok=$ok directions=$dirs counters: $ctr server=$src client=$crc .prom left=$left $(cat "$D3/promtool.out")"
  fi
else
  fail plugin "no .prom with traffic from both processes: $(ls "$D3/tel" 2>&1); $(tail -3 "$D3"/*.log)"
fi

[ "$FAILS" -eq 0 ]
