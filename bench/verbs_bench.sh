#!/bin/bash
# The verbs rail against ib_write_bw on the same pair of rxe devices, in the same lab run: for
# each size, ib_write_bw (perftest, RC RDMA WRITE, one QP) from host A's rxe0 to host B's rxe2,
# then rerail-net-bench from host A to host B with RERAIL_TRANSPORT=verbs on one rail: the same
# devices in the same direction, alternating ROUNDS times. Both are emulated (rdma_rxe under
# QEMU/TCG): the ratio is rerail's own overhead over a verbs data path, not a speed.
# Units: perftest's "MB/sec" is MiB/s (2^20 bytes); it is converted to MB/s (10^6 bytes), the
# unit rerail-net-bench's GB/s (10^9) is in, before the ratio is taken.
# ib_send_bw runs too, as a second baseline: its receiver polls for completions, as rerail's (and
# NCCL's IB transport's) must to learn that a write-with-immediate landed, while ib_write_bw's
# passive side sleeps. In the emulated lab the NIC is the guest's CPU, so a polling receiver
# costs bandwidth that it would not on a real HCA.
# Run inside the Soft-RoCE lab:
#   test/lab/rxe/rxelab.sh run -- bench/verbs_bench.sh BUILD_DIR [SIZES...]
# Arguments: ROUNDS (default 3), BYTES (per rerail measurement, default 64M), ITERS
# (perftest iterations, default 100) come from the environment inside the lab, which passes on
# only RERAIL_* variables: set them as RERAIL_BENCH_ROUNDS / _BYTES / _ITERS from outside.
set -uo pipefail
build=$(cd "${1:?usage: verbs_bench.sh BUILD_DIR [SIZES...]}" && pwd)
shift
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1048576 4194304)
rounds=${ROUNDS:-${RERAIL_BENCH_ROUNDS:-3}} bytes=${BYTES:-${RERAIL_BENCH_BYTES:-64M}} iters=${ITERS:-${RERAIL_BENCH_ITERS:-100}}
work=$(mktemp -d /tmp/verbs-bench.XXXXXX)
port=18700
perftest() {  # TOOL SIZE -> average MB/s
  port=$((port + 1))
  "$1" -d rxe2 -x 1 -s "$2" -n "$iters" -F -p "$port" >/dev/null 2>&1 &
  local srv=$! i
  for ((i = 0; i < 100; i++)); do [[ -n $(ss -Hltn "sport = :$port") ]] && break; sleep 0.1; done
  timeout 300 "$1" -d rxe0 -x 1 -s "$2" -n "$iters" -F -p "$port" 10.55.0.2 |
    awk -v s="$2" '$1 == s {printf "%.1f\n", $4 * 1.048576}'
  wait "$srv"
}
rr() {  # SIZE -> GB/s of rerail's verbs rail
  rm -rf "$work/oob" && mkdir -p "$work/oob"
  local common=(--plugin rerail --oob-dir "$work/oob" --sizes "$1" --bytes "$bytes" --no-lat --no-multi --csv)
  env LD_LIBRARY_PATH="$build/net_plugin" RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_BACKUPS=0 \
    RERAIL_SOCKET_IFNAME==vethB0 RERAIL_IB_HCA==rxe2 RERAIL_HEALTH_PATH=/dev/shm/rr-bench-B \
    "$build/bench/rerail-net-bench" --rank 1 "${common[@]}" >"$work/b.csv" 2>"$work/b.err" &
  local b=$!
  env LD_LIBRARY_PATH="$build/net_plugin" RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_BACKUPS=0 \
    RERAIL_SOCKET_IFNAME==vethA0 RERAIL_IB_HCA==rxe0 RERAIL_HEALTH_PATH=/dev/shm/rr-bench-A \
    "$build/bench/rerail-net-bench" --rank 0 "${common[@]}" >"$work/a.csv" 2>"$work/a.err"
  wait "$b"
  awk -F, -v s="$1" '$1 == "bw" && $2 == s {print $4}' "$work/a.csv"
}
echo "verbs_bench: rxe0 <-> rxe2, MTU $(cat /sys/class/net/vethA0/mtu), $rounds rounds, $(nproc) vCPUs"
ratio() { awk -v a="$1" -v b="${2:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
echo "| size | round | ib_write_bw MB/s (10^6) | ib_send_bw MB/s | rerail verbs MB/s | rerail / ib_write_bw | rerail / ib_send_bw |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    base=$(perftest ib_write_bw "$s")
    sendbase=$(perftest ib_send_bw "$s")
    gbs=$(rr "$s")
    mbs=$(awk -v g="${gbs:-0}" 'BEGIN {printf "%.1f", g * 1000}')
    echo "| $s | $r | ${base:--} | ${sendbase:--} | $mbs | $(ratio "$mbs" "$base") | $(ratio "$mbs" "$sendbase") |"
    [[ -n $gbs ]] || { echo "verbs_bench: rerail run failed:"; tail -n 5 "$work/a.err" "$work/b.err"; }
  done
done
