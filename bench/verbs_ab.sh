#!/bin/bash
# Two builds of rerail's verbs rail on the same rxe pair (host A's rxe0 -> host B's rxe2,
# bench/rxe_nets.sh), in one lab run: rounds alternate A and B (which goes first alternates
# too), so the emulator's drift hits both alike. rerail-net-bench, one connection, 8 in
# flight: bandwidth per size and the 8-byte round trip. Prints a markdown table of the median
# per build and B/A. Emulated (rdma_rxe in a TCG guest): the ratio is what counts.
# Run inside the Soft-RoCE lab:
#   test/lab/rxe/rxelab.sh run --timeout 600 -- bench/verbs_ab.sh BUILD_A BUILD_B
# From the environment (the lab passes on RERAIL_* only): RERAIL_AB_SIZES (64K,512K,4M),
# RERAIL_AB_BYTES (32M per size), RERAIL_AB_ROUNDS (3), RERAIL_AB_LAT_ITERS (500).
set -uo pipefail
a=$(cd "${1:?usage: verbs_ab.sh BUILD_A BUILD_B}" && pwd)
b=$(cd "${2:?usage: verbs_ab.sh BUILD_A BUILD_B}" && pwd)
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=bench/rxe_nets.sh
source "$here/rxe_nets.sh"
sizes=${RERAIL_AB_SIZES:-64K,512K,4M} bytes=${RERAIL_AB_BYTES:-32M}
rounds=${RERAIL_AB_ROUNDS:-3} lat=${RERAIL_AB_LAT_ITERS:-500}
work=$(mktemp -d /tmp/verbs-ab.XXXXXX)

# run BUILD TAG: one pair, CSV of rank 0 (the sender) into $work/res.TAG.csv.
run() {
  local build=$1 tag=$2 side pids=() rc=0
  rm -rf "$work/oob" && mkdir -p "$work/oob"
  for side in B A; do
    local rank=1
    [[ $side == A ]] && rank=0
    rxe_net_env rerail "$side"
    env LD_LIBRARY_PATH="$build/net_plugin" "${rxe_env[@]}" "$build/bench/rerail-net-bench" --rank "$rank" \
      --plugin rerail --oob-dir "$work/oob" --sizes "$sizes" --bytes "$bytes" --lat-iters "$lat" \
      --lat-warmup 50 --no-multi --csv >"$work/$tag.$side.csv" 2>"$work/$tag.$side.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  ((rc == 0)) || { echo "verbs_ab: $tag failed:" >&2; tail -n 5 "$work/$tag.A.err" "$work/$tag.B.err" >&2; }
  cp "$work/$tag.A.csv" "$work/res.$tag.csv"
}

for ((r = 0; r < rounds; r++)); do
  if ((r % 2)); then order=(B A); else order=(A B); fi
  for w in "${order[@]}"; do
    d=$a
    [[ $w == B ]] && d=$b
    run "$d" "$w.$r"
  done
done

# The median over rounds of column COL (bw: GB/s, 4; lat: p50 in us, 5) of the rows KIND, SIZE.
median() {  # BUILD_TAG KIND SIZE COL
  cat "$work/res.$1".*.csv 2>/dev/null | awk -F, -v k="$2" -v s="$3" -v c="$4" '$1 == k && $2 == s {print $c}' |
    sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}
echo "verbs_ab: A=$a B=$b, $rounds rounds each, $bytes per size, $(nproc) vCPUs"
echo "| measure | A | B | B/A |"
echo "|---|---:|---:|---:|"
for s in $(awk -F, '$1 == "bw" {print $2}' "$work/res.A.0.csv" | sort -un); do
  x=$(median A bw "$s" 4) y=$(median B bw "$s" 4)
  echo "| bw $s B (GB/s) | $x | $y | $(awk -v x="${x:-0}" -v y="${y:-0}" 'BEGIN {if (x > 0) printf "%.2f", y / x; else print "-"}') |"
done
x=$(median A lat 8 5) y=$(median B lat 8 5)
echo "| 8 B round trip p50 (us) | $x | $y | $(awk -v x="${x:-0}" -v y="${y:-0}" 'BEGIN {if (x > 0) printf "%.2f", y / x; else print "-"}') |"
echo
echo "Each round (GB/s per size, then the round trip's p50 in us), in the order run:"
for ((r = 0; r < rounds; r++)); do
  for w in A B; do
    echo "round $r $w: $(awk -F, '$1 == "bw" {printf "%s ", $4} $1 == "lat" {printf "| %s", $5}' "$work/res.$w.$r.csv")"
  done
done
echo "verbs_ab: raw CSV in $work"
