#!/bin/bash
# rerail's verbs rail against NCCL's own IB transport on the same pair of rxe devices (host A's
# rxe0 -> host B's rxe2, one NIC each, bench/rxe_nets.sh), in the same lab run, through the same
# driver (rerail-net-bench, NCCL's transport bound from libnccl.so.2 with --plugin nccl-ib):
# bandwidth at SIZE (one connection, 8 in flight) and the 8-byte round trip (two connections,
# one each way), alternating the two ROUNDS times. Both are emulated (rdma_rxe under QEMU/TCG,
# the NIC is the guest's CPU): the ratios are what carry over, not the figures.
# Run inside the Soft-RoCE lab:
#   test/lab/rxe/rxelab.sh run -- bench/nccl_ib_compare.sh BUILD_DIR
# From the environment (the lab passes RERAIL_* and NCCL_* on): RERAIL_BENCH_ROUNDS (3),
# RERAIL_BENCH_SIZE (1M), RERAIL_BENCH_BYTES (64M per bandwidth run), RERAIL_BENCH_LAT_ITERS
# (2000 round trips after 200), NCCL_LIB (the libnccl.so.2; default: the loader's search).
set -uo pipefail
build=$(cd "${1:?usage: nccl_ib_compare.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=bench/rxe_nets.sh
source "$here/rxe_nets.sh"
# shellcheck source=bench/find_libnccl.sh
source "$here/find_libnccl.sh"
find_libnccl "$build"
[[ -n $NCCL_LIB ]] || { echo "nccl_ib_compare: no libnccl.so.2 found (set NCCL_LIB)" >&2; exit 2; }
rounds=${RERAIL_BENCH_ROUNDS:-3} size=${RERAIL_BENCH_SIZE:-1M} bytes=${RERAIL_BENCH_BYTES:-64M}
lat_iters=${RERAIL_BENCH_LAT_ITERS:-2000}
work=$(mktemp -d /tmp/nccl-ib-compare.XXXXXX)
export LD_LIBRARY_PATH="$build/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# one NET ROUND: sets bw, p50 and p99 (GB/s, µs) of rerail-net-bench between A and B, or "-"
one() {
  bw=- p50=- p99=-
  local net=$1 r=$2 plugin
  plugin=$(rxe_net_plugin "$net") || return 2
  rm -rf "$work/oob" && mkdir -p "$work/oob"
  local common=(--plugin "$plugin" --oob-dir "$work/oob" --sizes "$size" --bytes "$bytes" --no-multi
                --lat-iters "$lat_iters" --lat-warmup 200 --csv --timeout 120)
  rxe_net_env "$net" B
  env "${rxe_env[@]}" "$build/bench/rerail-net-bench" --rank 1 "${common[@]}" >"$work/$net-$r-b.csv" 2>"$work/$net-$r-b.err" &
  local b=$!
  rxe_net_env "$net" A
  env "${rxe_env[@]}" "$build/bench/rerail-net-bench" --rank 0 "${common[@]}" >"$work/$net-$r-a.csv" 2>"$work/$net-$r-a.err"
  local arc=$?
  wait "$b"; local brc=$?
  if [[ $arc -ne 0 || $brc -ne 0 ]]; then
    echo "nccl_ib_compare: $net round $r failed (A exit $arc, B exit $brc):" >&2
    tail -n 4 "$work/$net-$r-a.err" "$work/$net-$r-b.err" >&2
    return 1
  fi
  read -r bw p50 p99 < <(awk -F, '$1 == "bw" {bw = $4} $1 == "lat" {p50 = $5; p99 = $6}
                                  END {print (bw == "" ? "-" : bw), (p50 == "" ? "-" : p50), (p99 == "" ? "-" : p99)}' \
                         "$work/$net-$r-a.csv")
}

echo "nccl_ib_compare: rxe0 (A) -> rxe2 (B), MTU $(cat /sys/class/net/vethA0/mtu), $(nproc) vCPUs," \
  "$rounds alternating rounds, bandwidth at $size ($bytes per run), 8-byte round trip ($lat_iters)"
echo "| round | rerail GB/s | NCCL IB GB/s | rerail / NCCL | rerail RTT p50 µs | NCCL IB RTT p50 µs | rerail / NCCL | rerail p99 | NCCL IB p99 |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }
fails=0 rows=()
for ((r = 1; r <= rounds; r++)); do
  one rerail "$r" || fails=$((fails + 1))
  rbw=$bw rp50=$p50 rp99=$p99
  one nccl-ib "$r" || fails=$((fails + 1))
  nbw=$bw np50=$p50 np99=$p99
  echo "| $r | $rbw | $nbw | $(ratio "$rbw" "$nbw") | $rp50 | $np50 | $(ratio "$rp50" "$np50") | $rp99 | $np99 |"
  rows+=("$rbw $nbw $rp50 $np50")
done
# Best of the rounds (highest bandwidth, lowest p50, each on its own): on a shared host the
# emulated guest loses whole scheduler ticks now and then, to either transport.
read -r brbw bnbw brp50 bnp50 < <(printf '%s\n' "${rows[@]}" | awk '
  function best(v, cur, hi) { if (v == "-") return cur; if (cur == "-" || (hi ? v + 0 > cur + 0 : v + 0 < cur + 0)) return v; return cur }
  BEGIN {a = b = c = d = "-"} {a = best($1, a, 1); b = best($2, b, 1); c = best($3, c, 0); d = best($4, d, 0)}
  END {print a, b, c, d}')
echo "| best | $brbw | $bnbw | $(ratio "$brbw" "$bnbw") | $brp50 | $bnp50 | $(ratio "$brp50" "$bnp50") | | |"
echo "nccl_ib_compare: NCCL $(libnccl_version "$NCCL_LIB") ($NCCL_LIB); CSV and logs in $work"
exit $((fails != 0))
