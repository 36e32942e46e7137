#!/usr/bin/env bash
# What telemetry costs the data path: rerail-net-bench over loopback with
# telemetry off and on. Every measurement is its own short process pair (one
# message size, or the round trip), and the two modes alternate size by size
# (off, on, off, on, ...; round after round, odd rounds "off" first and even
# rounds "on" first), so both see the same machine and a slow stretch of it
# hits both. Prints a markdown table: per message
# size the GB/s of each mode (median, min..max), the on/off ratio of the
# medians with a 90 % bootstrap interval, and the median of the paired
# ratios (each "on" run over the "off" run next to it); then the 8-byte
# round trip p50/p99 of each mode with the delta. A benchmark, not a test: it
# asserts nothing (only that telemetry really was on in the "on" runs).
#
# usage: bench/telemetry_overhead.sh BUILD_DIR [--quick] [--reps N] [--report-only]
#   --quick        fewer sizes, fewer bytes, 5 rounds (about a minute)
#   --reps N       rounds: runs per mode and size (default 15)
#   --report-only  no runs: print the report from OUT_DIR's CSV files
# environment:
#   SIZES=4K,64K,...   message sizes (default 4K,16K,64K,256K,1M,4M,16M,64M)
#   BYTES=S            bytes per bandwidth run (default 1G; --quick 256M)
#   CC=NAME            RERAIL_TCP_CONGESTION of both modes (default cubic; CC=system
#                      keeps the host's). With BBR on loopback (no pacing qdisc)
#                      one process runs at 2.5-3 GB/s and the next at 6-7 at
#                      the same size (bench/RESULTS.md), which drowns a 2 % effect.
#   TEL_INTERVAL=MS    RERAIL_TELEMETRY_INTERVAL of the "on" runs (default 1000, the
#                      plugin's default; 100 is a stress setting: ten exports a second)
#   NET_ARGS           extra rerail-net-bench arguments
#   OUT_DIR            where the raw CSV files go (default: a fresh temp dir)
set -euo pipefail

usage() { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
BUILD=$(cd "$1" && pwd)
shift
QUICK=0
REPORT_ONLY=0
REPS=15
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; REPS=5 ;;
    --report-only) REPORT_ONLY=1 ;;
    --reps) REPS=${2:?--reps needs a number}; shift ;;
    *) echo "telemetry_overhead.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

NET="$BUILD/bench/rerail-net-bench"
[[ -x "$NET" ]] || { echo "telemetry_overhead.sh: $NET not built" >&2; exit 1; }
export LD_LIBRARY_PATH="$BUILD/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_SOCKET_IFNAME=lo
unset RERAIL_TELEMETRY_DIR RERAIL_TELEMETRY_TRACE
TEL_INTERVAL=${TEL_INTERVAL:-1000}
CC=${CC:-cubic}
if [[ $CC == system ]]; then unset RERAIL_TCP_CONGESTION; else export RERAIL_TCP_CONGESTION=$CC; fi

if [[ $QUICK == 1 ]]; then
  SIZES=${SIZES:-64K,1M,8M}
  BYTES=${BYTES:-256M}
  LAT_ARGS=(--lat-iters 5000 --lat-warmup 500)
else
  SIZES=${SIZES:-4K,16K,64K,256K,1M,4M,16M,64M}
  BYTES=${BYTES:-1G}
  LAT_ARGS=(--lat-iters 20000 --lat-warmup 2000)
fi
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/rerail-tel-overhead.XXXXXX)}
mkdir -p "$OUT_DIR"
# shellcheck disable=SC2206
EXTRA=(${NET_ARGS:-})

# One measurement: MODE (off|on) ROUND WHAT (a size, or "lat"); CSV rows are
# appended to $OUT_DIR/MODE.csv with the round in front.
run_one() {
  local mode=$1 round=$2 what=$3 tel="$OUT_DIR/tel" out="$OUT_DIR/run.csv" log="$OUT_DIR/run.log"
  local args=(--plugin rerail --no-multi --csv "${EXTRA[@]}")
  if [[ $what == lat ]]; then args+=(--no-bw "${LAT_ARGS[@]}"); else args+=(--no-lat --sizes "$what" --bytes "$BYTES"); fi
  # INFO logging in both modes (it logs at setup only): the "on" runs must
  # show that each rank's exporter started, the "off" runs that none did.
  local t0
  t0=$(date +%s%N)
  if [[ $mode == on ]]; then
    rm -rf "$tel" && mkdir -p "$tel"
    NCCL_DEBUG=INFO RERAIL_TELEMETRY_DIR="$tel" RERAIL_TELEMETRY_INTERVAL="$TEL_INTERVAL" "$NET" "${args[@]}" >"$out" 2>"$log"
  else
    NCCL_DEBUG=INFO "$NET" "${args[@]}" >"$out" 2>"$log"
  fi
  echo "$mode $round $what $(( ($(date +%s%N) - t0) / 1000000 )) ms" >>"$OUT_DIR/times"
  local started
  started=$(grep -c 'telemetry: writing to' "$log" || true)
  if [[ $mode == on && $started -lt 2 ]] || [[ $mode == off && $started -ne 0 ]]; then
    echo "telemetry_overhead.sh: telemetry started in $started rank(s) of an '$mode' run ($log)" >&2
    exit 1
  fi
  grep -v '^test,' "$out" | sed "s/^/$round,/" >>"$OUT_DIR/$mode.csv"
}

if [[ $REPORT_ONLY == 1 ]]; then
  [[ -s "${OUT_DIR}/off.csv" && -s "${OUT_DIR}/header" ]] || { echo "telemetry_overhead.sh: --report-only needs OUT_DIR of a run" >&2; exit 2; }
  REPS=$(cut -d, -f1 "$OUT_DIR/off.csv" | sort -n | tail -1)
  CC=$(cat "$OUT_DIR/cc" 2>/dev/null || echo "$CC") # the run's, not this shell's
else
  IFS=, read -r -a SIZE_LIST <<<"$SIZES"
  echo "rerail-net-bench: sizes $SIZES, $REPS round(s), one process pair per size and mode; raw CSV in $OUT_DIR" >&2
  : >"$OUT_DIR/off.csv"
  echo "$CC" >"$OUT_DIR/cc"
  : >"$OUT_DIR/on.csv"
  head -1 < <("$NET" --plugin rerail --no-multi --no-lat --csv --sizes 4K --bytes 4K "${EXTRA[@]}") >"$OUT_DIR/header"
  for round in $(seq 1 "$REPS"); do
    echo "  round $round/$REPS" >&2
    for what in "${SIZE_LIST[@]}" lat; do
      # Odd rounds run "off" first, even rounds "on" first: a process leaves
      # the machine changed for the next one (memory to fault back in, sockets
      # in TIME_WAIT), and a fixed order would hand that to one mode only.
      if (( round % 2 )); then
        run_one off "$round" "$what"
        run_one on "$round" "$what"
      else
        run_one on "$round" "$what"
        run_one off "$round" "$what"
      fi
    done
  done
fi

python3 - "$OUT_DIR" "$REPS" "$(uname -n)" "$(nproc)" "$CC" <<'EOF'
import csv, random, statistics, sys
out, reps, host, cpus, cc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
fields = ["round"] + open(out + "/header").read().strip().split(",")
data = {}
for mode in ("off", "on"):
    for r in csv.DictReader(open("%s/%s.csv" % (out, mode)), fieldnames=fields):
        data.setdefault((r["test"], int(r["size"])), {}).setdefault(mode, {})[int(r["round"])] = r
med = statistics.median
rng = random.Random(1)

def interval(off, on):
    """90 % bootstrap interval of median(on) / median(off)."""
    est = []
    for _ in range(2000):
        a = [rng.choice(off) for _ in off]
        b = [rng.choice(on) for _ in on]
        est.append(med(b) / med(a))
    est.sort()
    return est[int(0.05 * len(est))], est[int(0.95 * len(est)) - 1]

print("### Telemetry overhead (rerail-net-bench, loopback, %s, %s CPUs, %d rounds, congestion control %s)\n"
      % (host, cpus, reps, cc))
print("Each figure is its own process pair; the modes alternate size by size, round after round, "
      "and which mode goes first alternates with the round.\n")
print("| size | off GB/s median (min..max) | on GB/s median (min..max) | on/off of medians | 90 % interval | median of paired ratios | on/off of means |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for key in sorted(k for k in data if k[0] == "bw"):
    o, n = data[key].get("off", {}), data[key].get("on", {})
    rounds = sorted(set(o) & set(n))
    if not rounds:
        continue
    off = [float(o[r]["gbps"]) for r in rounds]
    on = [float(n[r]["gbps"]) for r in rounds]
    lo, hi = interval(off, on)
    pair = med(b / a for a, b in zip(off, on))
    size = key[1]
    name = "%d MiB" % (size >> 20) if size >= 1 << 20 else "%d KiB" % (size >> 10)
    print("| %s | %.3f (%.3f..%.3f) | %.3f (%.3f..%.3f) | %.3f | %.3f..%.3f | %.3f | %.3f |" % (
        name, med(off), min(off), max(off), med(on), min(on), max(on), med(on) / med(off), lo, hi, pair,
        statistics.mean(on) / statistics.mean(off)))
lat = [k for k in data if k[0] == "lat"]
if lat:
    d = data[lat[0]]
    col = lambda mode, c: [float(r[c]) for r in d[mode].values()]
    o50, n50 = med(col("off", "p50_us")), med(col("on", "p50_us"))
    o99, n99 = med(col("off", "p99_us")), med(col("on", "p99_us"))
    ob, nb = min(col("off", "p50_us")), min(col("on", "p50_us"))
    print("\n| 8-byte round trip | p50 µs (median of runs) | p50 µs (best run) | p99 µs (median of runs) |")
    print("|---|---:|---:|---:|")
    print("| telemetry off | %.2f | %.2f | %.2f |" % (o50, ob, o99))
    print("| telemetry on | %.2f | %.2f | %.2f |" % (n50, nb, n99))
    print("| delta (on - off) | %+.2f | %+.2f | %+.2f |" % (n50 - o50, nb - ob, n99 - o99))
EOF
