#!/usr/bin/env bash
# A/B comparison of two builds of an ncclNet plugin through rerail-net-bench
# on loopback, in one run: rounds alternate A and B (and which goes first
# alternates with the round), so the machine's drift hits both alike. Prints
# a markdown table of per-size median GB/s, the 8-byte round trip's median
# p50, and B/A ratios (for bench/RESULTS.md).
#
# usage: bench/ab_compare.sh NET_BENCH PLUGIN_A PLUGIN_B [ROUNDS]
#   NET_BENCH  the rerail-net-bench executable
#   PLUGIN_A/B plugin paths (libnccl-net-*.so), e.g. a build of the previous commit and this one
#   ROUNDS     alternating rounds (default 6)
# environment: SIZES (default 64K,256K,1M,4M,16M,64M), CC (TCP congestion control
# of the rails, default cubic; "system" keeps the host's), BYTES (per size, default 256M)
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
NET=$1 A=$2 B=$3 ROUNDS=${4:-6}
SIZES=${SIZES:-64K,256K,1M,4M,16M,64M}
CC=${CC:-cubic}
BYTES=${BYTES:-256M}
export RERAIL_SOCKET_IFNAME=lo
if [[ $CC != system ]]; then export RERAIL_TCP_CONGESTION=$CC; fi
out=$(mktemp -d /tmp/rerail-ab.XXXXXX)
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2)); then order=(B A); else order=(A B); fi
  for w in "${order[@]}"; do
    p=$A; [[ $w == B ]] && p=$B
    "$NET" --fork --csv --plugin "$p" --sizes "$SIZES" --bytes "$BYTES" --lat-iters 5000 --lat-warmup 500 \
      --no-multi >"$out/$w.$r.csv" 2>/dev/null || { echo "ab_compare.sh: run $w round $r failed" >&2; exit 1; }
  done
done
python3 - "$out" "$ROUNDS" "$A" "$B" "$CC" <<'PY'
import csv, statistics, sys, os
out, rounds, a, b, cc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def load(w):
    bw, lat = {}, []
    for f in [os.path.join(out, f"{w}.{r}.csv") for r in range(rounds)]:
        for row in csv.reader(open(f)):
            if row and row[0] == "bw": bw.setdefault(int(row[1]), []).append(float(row[3]))
            if row and row[0] == "lat": lat.append(float(row[4]))
    return bw, lat
(abw, alat), (bbw, blat) = load("A"), load("B")
def human(n):
    for u, s in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= u and n % u == 0: return f"{n // u} {s}"
    return f"{n} B"
print(f"{rounds} alternating rounds, congestion control {cc}; A = `{a}`, B = `{b}`\n")
print("| size | A GB/s (median) | B GB/s (median) | B / A | B / A, paired median |")
print("|---:|---:|---:|---:|---:|")
for s in sorted(abw):
    ma, mb = statistics.median(abw[s]), statistics.median(bbw.get(s, [0]))
    pairs = [y / x for x, y in zip(abw[s], bbw.get(s, [])) if x > 0]
    print(f"| {human(s)} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} | {statistics.median(pairs):.3f} |")
if alat and blat:
    la, lb = statistics.median(alat), statistics.median(blat)
    print(f"\n8-byte round trip p50 (median of rounds): A {la:.2f} µs, B {lb:.2f} µs, B / A {lb / la:.3f}")
PY
