#!/usr/bin/env bash
# What telemetry costs the data path: rerail-net-bench over loopback with
# telemetry off and on, alternating in one run (off, on, off, on, ...), so
# both see the same machine. Prints a markdown table: per message size the
# GB/s of each mode (median, min..max, best) and their ratio (on/off), and
# the 8-byte round trip p50/p99 of each mode with the delta. A benchmark, not
# a test: it asserts nothing (only that telemetry really was on in the "on"
# runs). On a shared or small machine run it with --reps 7 or more and read
# the "best" columns: other load only ever makes a run slower.
#
# usage: bench/telemetry_overhead.sh BUILD_DIR [--quick] [--reps N]
#   --quick      fewer sizes and bytes (about a minute)
#   --reps N     runs per mode (default 3; medians are reported)
# environment:
#   SIZES=4K,64K,...   message sizes (default 4K,16K,64K,256K,1M,4M,16M)
#   NET_ARGS           extra rerail-net-bench arguments
#   TEL_INTERVAL=MS    RERAIL_TELEMETRY_INTERVAL of the "on" runs (default 1000, the
#                      plugin's default; 100 is a stress setting: ten exports a second)
#   OUT_DIR            where the raw CSV files go (default: a fresh temp dir)
set -euo pipefail

usage() { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
BUILD=$(cd "$1" && pwd)
shift
QUICK=0
REPS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
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

if [[ $QUICK == 1 ]]; then
  SIZES=${SIZES:-4K,64K,1M,8M}
  ARGS=(--bytes 256M --lat-iters 5000 --lat-warmup 500)
else
  SIZES=${SIZES:-4K,16K,64K,256K,1M,4M,16M}
  ARGS=(--bytes 1G --lat-iters 20000 --lat-warmup 2000)
fi
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/rerail-tel-overhead.XXXXXX)}
mkdir -p "$OUT_DIR"
# shellcheck disable=SC2206
EXTRA=(${NET_ARGS:-})

run_one() {  # MODE REP
  local mode=$1 rep=$2 out="$OUT_DIR/$1-$2.csv" tel="$OUT_DIR/tel-$2"
  if [[ $mode == on ]]; then
    mkdir -p "$tel"
    # The .prom file exists only while the job runs: watch for it until it
    # appears, then leave the machine to the benchmark (the watcher's own
    # processes would otherwise be counted as telemetry's cost).
    RERAIL_TELEMETRY_DIR="$tel" RERAIL_TELEMETRY_INTERVAL="$TEL_INTERVAL" "$NET" --plugin rerail --sizes "$SIZES" --no-multi --csv "${ARGS[@]}" \
      "${EXTRA[@]}" >"$out" &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null && [[ ! -e "$OUT_DIR/on-seen-$rep" ]]; do
      compgen -G "$tel/rerail-*.prom" >/dev/null && touch "$OUT_DIR/on-seen-$rep"
      sleep 0.2
    done
    wait "$pid"
    [[ -e "$OUT_DIR/on-seen-$rep" ]] || { echo "telemetry_overhead.sh: no .prom file appeared in the 'on' run" >&2; exit 1; }
  else
    "$NET" --plugin rerail --sizes "$SIZES" --no-multi --csv "${ARGS[@]}" "${EXTRA[@]}" >"$out"
  fi
}

echo "running rerail-net-bench: sizes $SIZES, $REPS run(s) per mode, alternating; raw CSV in $OUT_DIR" >&2
for rep in $(seq 1 "$REPS"); do
  echo "  run $rep: telemetry off" >&2
  run_one off "$rep"
  echo "  run $rep: telemetry on" >&2
  run_one on "$rep"
done

python3 - "$OUT_DIR" "$REPS" "$(uname -n)" "$(nproc)" <<'EOF'
import csv, statistics, sys
out, reps, host, cpus = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = {"off": {}, "on": {}}
for mode in data:
    for rep in range(1, reps + 1):
        for r in csv.DictReader(open("%s/%s-%d.csv" % (out, mode, rep))):
            key = (r["test"], int(r["size"]))
            data[mode].setdefault(key, []).append(r)
med = lambda rows, k: statistics.median(float(r[k]) for r in rows)
best = lambda rows, k: max(float(r[k]) for r in rows)
low = lambda rows, k: min(float(r[k]) for r in rows)
print("### Telemetry overhead (rerail-net-bench, loopback, %s, %s CPUs, %d runs per mode, alternating)\n"
      % (host, cpus, reps))
print("Median and best of the runs; min..max shows how noisy the machine was.\n")
print("| size | off GB/s median (min..max) | on GB/s median (min..max) | on/off median | on/off best |")
print("|---:|---:|---:|---:|---:|")
for key in sorted(k for k in data["off"] if k[0] == "bw"):
    o, n = data["off"][key], data["on"].get(key, data["off"][key])
    size = key[1]
    name = "%d MiB" % (size >> 20) if size >= 1 << 20 else "%d KiB" % (size >> 10)
    print("| %s | %.3f (%.3f..%.3f) | %.3f (%.3f..%.3f) | %.3f | %.3f |" % (
        name, med(o, "gbps"), low(o, "gbps"), best(o, "gbps"), med(n, "gbps"), low(n, "gbps"), best(n, "gbps"),
        med(n, "gbps") / med(o, "gbps"), best(n, "gbps") / best(o, "gbps")))
lat = [k for k in data["off"] if k[0] == "lat"]
if lat:
    k = lat[0]
    o50, o99 = med(data["off"][k], "p50_us"), med(data["off"][k], "p99_us")
    n50, n99 = med(data["on"][k], "p50_us"), med(data["on"][k], "p99_us")
    ob, nb = low(data["off"][k], "p50_us"), low(data["on"][k], "p50_us")
    print("\n| 8-byte round trip | p50 µs (median of runs) | p50 µs (best run) | p99 µs (median of runs) |")
    print("|---|---:|---:|---:|")
    print("| telemetry off | %.2f | %.2f | %.2f |" % (o50, ob, o99))
    print("| telemetry on | %.2f | %.2f | %.2f |" % (n50, nb, n99))
    print("| delta (on - off) | %+.2f | %+.2f | %+.2f |" % (n50 - o50, nb - ob, n99 - o99))
EOF
