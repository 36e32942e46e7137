#!/usr/bin/env bash
# Telemetry accuracy on a shaped rail: does the windowed throughput track the
# real rate, and how fast does it show a step?
#
# usage: telemetry_accuracy.sh PLUGIN_DIR HARNESS NETLAB
#   PLUGIN_DIR  directory of libnccl-net-rerail.so; HARNESS rerail-harness;
#   NETLAB      test/lab/netlab.sh (needs root: namespaces, tc)
#
# Two lab hosts, one rail. rail0 of host 0 is shaped to 200 Mbit/s (tbf,
# `netlab shape 0 0 200`); the harness client on host 0 streams 4 MiB
# messages to the server on host 1 in 256 KiB chunks (RERAIL_CHUNK_SIZE; W=8
# requests are 2 MiB, 84 ms at 200 Mbit/s, 168 ms at 100). Once 3.4 s of
# traffic went by, the rail is stepped down to 100 Mbit/s (the same tbf,
# changed in place). Both processes
# trace every sample with its window (RERAIL_TELEMETRY_TRACE=1) and write
# .prom files every 100 ms. Checks, for the receiver (rx) and the sender (tx):
#   track   in each phase (its first second left out: TCP and the socket
#           buffers settle) the median window is within 10% of the shaped
#           rate and at least 75% of the windows are (TCP/IP headers take
#           ~4%; typically 95-100% are, a loaded machine makes it less)
#   step    the window of the W requests after the first one completed past
#           the step reads the new rate (within 10%): the step shows no
#           later than one window after it
#   prom    the receiver's throughput gauge read mid-phase is within 20% of
#           the shaped rate in both phases
#   anomaly with RERAIL_TELEMETRY_ANOMALY=70 a snapshot of the drop is
#           written, its reference being the old rate (within 10%)
set -u
if [ "${1:-}" = --inner ]; then
  # ---------------------------------------------------------- inside the lab
  WORK=$2 HARNESS=$3
  export RERAIL_SOCKET_IFNAME=rail0 RERAIL_TELEMETRY_DIR="$WORK/tel" RERAIL_TELEMETRY_INTERVAL=100
  export RERAIL_TELEMETRY_TRACE=1 RERAIL_TELEMETRY_ANOMALY=70 RERAIL_TELEMETRY_WINDOW=8 RERAIL_CHUNK_SIZE=256K
  # One socket on the rail: two TCP flows competing in one tbf queue make the shaped rate itself
  # bursty (drops, retransmissions, ±15 % over a 170 ms window); this test measures the recorder.
  export RERAIL_TCP_STREAMS=1
  ARGS=(--rendezvous "$WORK/rdv" --conns 1 --group 1 --min-size 4M --max-size 4M --duration 7 --quiet
        --timeout 90)
  netlab shape 0 0 200 || exit 2
  netlab exec 1 "$HARNESS" --role server "${ARGS[@]}" >"$WORK/server.log" 2>&1 &
  SP=$!
  netlab exec 0 "$HARNESS" --role client "${ARGS[@]}" >"$WORK/client.log" 2>&1 &
  CP=$!
  # rx samples of the server: count the lines with bytes in its trace.
  rx_samples() { cat "$WORK"/tel/rerail-trace-*.csv 2>/dev/null | grep -c ',rx,[1-9]'; }
  prom_thr() {  # the receiver's current throughput gauge, Mbit/s
    grep -h '^rerail_rail_throughput_bytes_per_second{.*direction="rx"' "$WORK"/tel/rerail-*.prom 2>/dev/null |
      awk '{printf "%.1f\n", $2 * 8 / 1e6}' | head -1
  }
  n=0
  while [ "$(rx_samples)" -lt 320 ]; do   # 320 x 256 KiB: ~3.4 s at 200 Mbit/s
    sleep 0.1
    n=$((n + 1))
    if [ $n -gt 300 ] || ! kill -0 "$CP" 2>/dev/null; then
      echo "no traffic: $(tail -3 "$WORK"/*.log)"
      kill "$SP" "$CP" 2>/dev/null
      exit 2
    fi
  done
  prom_thr >"$WORK/prom_200"
  # The step changes the tbf in place (the same qdisc netlab made, new rate,
  # netlab's burst rule: max(128 KiB, 10 ms)). `netlab shape` deletes and
  # re-adds it: for the moment between, the rail is unshaped and what
  # crosses it then is read afterwards at memory speed, which is not the
  # step being measured here.
  date +%s%N >"$WORK/step_begin"
  netlab exec 0 tc qdisc change dev rail0 root tbf rate 100mbit burst 131072 latency 50ms || exit 2
  date +%s%N >"$WORK/step_end"
  sleep 2.5
  prom_thr >"$WORK/prom_100"
  wait "$SP"; echo "server exit $?" >"$WORK/server.rc"
  wait "$CP"; echo "client exit $?" >"$WORK/client.rc"
  exit 0
fi

# -------------------------------------------------------------- outside
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS NETLAB}
HARNESS=${2:?}
NETLAB=${3:?}
if [ "$(id -u)" -ne 0 ]; then
  echo "telemetry_accuracy: needs root (network namespaces and tc through $NETLAB)" >&2
  exit 1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rerail-telacc.XXXXXX")
mkdir -p "$WORK/rdv" "$WORK/tel"
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$NETLAB" run --name rrtelacc --hosts 2 --rails 1 -- "$0" --inner "$WORK" "$HARNESS" >"$WORK/lab.log" 2>&1
lab=$?
if [ $lab -ne 0 ]; then
  echo "FAIL  lab run exited $lab"
  tail -20 "$WORK/lab.log" "$WORK"/*.log
  echo "files kept in $WORK"
  exit 1
fi

python3 - "$WORK" <<'EOF'
import csv, glob, json, statistics, sys

work = sys.argv[1]
W = 8
step_begin = int(open(work + "/step_begin").read())
step_end = int(open(work + "/step_end").read())
fails = []
def check(ok, what):
    print(("PASS  " if ok else "FAIL  ") + what)
    if not ok:
        fails.append(what)

for f in ("server.rc", "client.rc"):
    rc = open(work + "/" + f).read().strip()
    check(rc.endswith(" 0"), "harness " + rc)

mbit = lambda bps: float(bps) * 8 / 1e6
for path in sorted(glob.glob(work + "/tel/rerail-trace-*.csv")):
    rows = [r for r in csv.DictReader(open(path)) if int(r["bytes"]) > 0]
    d = rows[0]["direction"]
    off = int(rows[0]["wall_ns"]) - int(rows[0]["done_ns"])   # wall - monotonic
    wall = lambda r, k="done_ns": int(r[k]) + off
    start = wall(rows[0])
    tail = len(rows) - 2 * W                 # the end of the run drains: left out
    phases = {200: [], 100: []}
    for i in range(W, tail):
        first_post = wall(rows[i - W + 1], "post_ns")
        thr = mbit(rows[i]["window_bytes_per_s"])
        if first_post > start + 1e9 and wall(rows[i]) < step_begin:
            phases[200].append(thr)
        elif first_post > step_end + 0.3e9:
            phases[100].append(thr)
    for rate, v in phases.items():
        if len(v) < 40:
            check(False, "%s %d Mbit/s: only %d windows" % (d, rate, len(v)))
            continue
        med = statistics.median(v)
        share = sum(1 for x in v if abs(x - rate) <= 0.1 * rate) / len(v)
        p5, p95 = sorted(v)[len(v) // 20], sorted(v)[len(v) * 19 // 20]
        check(abs(med - rate) <= 0.1 * rate and share >= 0.75,
              "track %s %3d Mbit/s: %d windows, median %.1f, %.0f%% within 10%%, p5..p95 %.1f..%.1f"
              % (d, rate, len(v), med, share * 100, p5, p95))
    k0 = next(i for i, r in enumerate(rows) if wall(r) >= step_end)
    k = k0 + W
    seq = " ".join("%.0f" % mbit(rows[j]["window_bytes_per_s"]) for j in range(k0, min(k + 4, len(rows))))
    after = mbit(rows[k]["window_bytes_per_s"])
    check(abs(after - 100) <= 10,
          "step %s: window %d requests after the step reads %.1f Mbit/s (windows from the step on: %s)"
          % (d, W, after, seq))

for name, rate in (("prom_200", 200), ("prom_100", 100)):
    txt = open(work + "/" + name).read().strip()
    v = float(txt) if txt else -1
    check(abs(v - rate) <= 0.2 * rate, "prom rx gauge in the %d Mbit/s phase: %.1f" % (rate, v))

snaps = [json.load(open(p)) for p in glob.glob(work + "/tel/rerail-anomaly-*.json")]
hit = [s for s in snaps if s["direction"] == "rx" and step_begin - 0.5e9 <= s["time_ns"] <= step_end + 3e9]
ok = any(abs(mbit(s["recent_average_bytes_per_second"]) - 200) <= 20 and
         mbit(s["throughput_bytes_per_second"]) < 140 and s["samples_before"] > 0 for s in hit)
check(ok, "anomaly snapshot of the step: %s" % (
    ", ".join("%.0f -> %.0f Mbit/s, %d+%d samples" % (mbit(s["recent_average_bytes_per_second"]),
              mbit(s["throughput_bytes_per_second"]), s["samples_before"], s["samples_after"]) for s in hit)
    or "none"))
sys.exit(1 if fails else 0)
EOF
rc=$?
if [ $rc -eq 0 ]; then
  rm -rf "$WORK"
  echo "all passed"
else
  echo "files kept in $WORK"
fi
exit $rc
