#!/bin/bash
# What the host does per message on rerail's verbs rail and on NCCL's own IB transport, on the same
# rxe pair (host A's rxe0 -> host B's rxe2, bench/rxe_nets.sh), through the same driver
# (rerail-net-bench, one connection, 8 in flight), at each size (default 64K 512K 4M):
#   (a) rerail's plugin counters per message, from each side's telemetry file (kept at exit:
#       RERAIL_TELEMETRY_KEEP): doorbells, work requests, completions per queue, and the plugin's
#       own message count checked against the driver's;
#   (b) system calls on each side's uverbs device per message, `strace -c -f -P /dev/infiniband/
#       uverbsN -e trace=write,ioctl`, for both transports. rxe's ibv_post_send rings its doorbell
#       with one write() of an empty POST_SEND command on the device's file (rdma-core
#       providers/rxe/rxe.c, post_send_db()); ibv_post_recv and ibv_poll_cq make no system call
#       (the queues are shared memory), and neither do writes the driver does not ring for;
#       ibv_req_notify_cq, if used, is a write() too;
#   (c) bandwidth (a run of its own, without strace; rerail with telemetry on), the 8-byte round trip, and
#       ib_write_bw at the same sizes (test/lab/rxe/bw_baseline.sh) for reference;
#   (d) send completion: isend to test()=done per send, 8 in flight (rerail-net-bench --send-lat),
#       from the same bandwidth run, and for rerail beside it its telemetry's post-to-completion
#       time of the chunk writes (rerail_rail_latency_seconds, tx, over the whole run: one export
#       interval), i.e. what a send would take with nothing but its writes on its path; and the
#       same with one send in flight (RERAIL_COSTLAB_SOLO, "64K 200": size and messages) and the
#       receiver 8 receives ahead (--send-depth 1), where no queue of earlier sends hides what
#       else is on a send's path (a receiver's ack would be), and every send finds its receive
#       posted: NCCL's isend() returns no request before the receiver's CTS, rerail's does, so
#       with the receiver behind, rerail's time would include waiting for it and NCCL's not.
# Per-message figures are differences between two runs of N1 and N2 messages (plus the driver's
# warm-up, max(2, N/8)) divided by the difference in messages, so that connection setup
# (registrations, the receive queue posted at connect, the first clear-to-sends) cancels out.
# Emulated (rdma_rxe in a TCG guest): the counts are exact, times are the emulator's.
# Figures and how to read them: bench/RESULTS.md section 17.
# Run inside the Soft-RoCE lab:
#   test/lab/rxe/rxelab.sh run --timeout 900 -- bench/verbs_cost_lab.sh BUILD_DIR
# From the environment: RERAIL_COSTLAB_SIZES ("64K 512K 4M"), RERAIL_COSTLAB_MSGS ("16 48"; at 4M and above
# RERAIL_COSTLAB_MSGS_LARGE, "8 24"), RERAIL_COSTLAB_LAT_ITERS (1000 after 100), RERAIL_COSTLAB_IB_ITERS (50),
# NCCL_LIB. Output: markdown tables on stdout; raw CSV, strace and .prom files in a directory
# under /tmp of the guest (named at the end; the lab's RAM layer: copy what you need in CMD).
set -uo pipefail
build=$(cd "${1:?usage: verbs_cost_lab.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=bench/rxe_nets.sh
source "$here/rxe_nets.sh"
# shellcheck source=bench/find_libnccl.sh
source "$here/find_libnccl.sh"
find_libnccl "$build"
[[ -n $NCCL_LIB ]] || { echo "verbs_cost_lab: no libnccl.so.2 found (set NCCL_LIB)" >&2; exit 2; }
command -v strace >/dev/null || { echo "verbs_cost_lab: strace is not installed (tools/install-deps.sh)" >&2; exit 2; }
read -r -a sizes <<<"${RERAIL_COSTLAB_SIZES:-64K 512K 4M}"
read -r n1 n2 <<<"${RERAIL_COSTLAB_MSGS:-16 48}"
read -r l1 l2 <<<"${RERAIL_COSTLAB_MSGS_LARGE:-8 24}"
lat_iters=${RERAIL_COSTLAB_LAT_ITERS:-1000}
read -r solo_size solo_n <<<"${RERAIL_COSTLAB_SOLO:-64K 200}"
work=$(mktemp -d /tmp/verbs-cost-lab.XXXXXX)
export LD_LIBRARY_PATH="$build/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0

# The uverbs character device of an rdma device (rxe0 -> /dev/infiniband/uverbs0).
uverbs_of() {
  local d
  for d in /sys/class/infiniband_verbs/uverbs*; do
    [[ $(cat "$d/ibdev" 2>/dev/null) == "$1" ]] && { echo "/dev/infiniband/${d##*/}"; return 0; }
  done
  return 1
}
if ! dev_A=$(uverbs_of rxe0) || ! dev_B=$(uverbs_of rxe2); then
  echo "verbs_cost_lab: no uverbs device for rxe0 or rxe2" >&2
  exit 2
fi

bytes_of() { numfmt --from=iec "$1"; }
# Messages the driver moves in a bandwidth run of N: the warm-up, max(2, N/8), then N.
driver_msgs() { local w=$(($1 / 8)); ((w < 2)) && w=2; echo $(($1 + w)); }

# run NET TAG MODE ARGS...: one rerail-net-bench pair A (rank 0, sends) -> B (rank 1).
# MODE: trace (strace each side; rerail with telemetry kept), tel (rerail with telemetry kept, one
# export interval for the whole run) or plain. Files: $work/TAG-{a,b}.*, $work/tel-TAG-{a,b}/
run_pair() {
  local net=$1 tag=$2 mode=$3 side plugin pids=() rc=0
  shift 3
  plugin=$(rxe_net_plugin "$net") || return 2
  rm -rf "$work/oob-$tag" && mkdir -p "$work/oob-$tag"
  for side in B A; do
    local rank=1 lc=b dev=$dev_B
    [[ $side == A ]] && rank=0 lc=a dev=$dev_A
    rxe_net_env "$net" "$side"
    local env_extra=() wrap=()
    [[ $mode == trace ]] && wrap=(strace -f --seccomp-bpf -c -e "trace=write,ioctl" -P "$dev" -o "$work/$tag-$lc.strace")
    if [[ $mode != plain && $net == rerail ]]; then
      mkdir -p "$work/tel-$tag-$lc"
      env_extra=("RERAIL_TELEMETRY_DIR=$work/tel-$tag-$lc" RERAIL_TELEMETRY_KEEP=1 RERAIL_TELEMETRY_INTERVAL=3600000)
    fi
    env "${rxe_env[@]}" "${env_extra[@]}" "${wrap[@]}" "$build/bench/rerail-net-bench" --rank "$rank" \
      --plugin "$plugin" --oob-dir "$work/oob-$tag" --no-multi --csv --timeout 120 "$@" \
      >"$work/$tag-$lc.csv" 2>"$work/$tag-$lc.err" &
    pids+=($!)
  done
  wait "${pids[1]}" || rc=$?
  wait "${pids[0]}" || rc=$?
  if ((rc)); then
    echo "verbs_cost_lab: $net $tag failed (exit $rc):" >&2
    tail -n 4 "$work/$tag-a.err" "$work/$tag-b.err" >&2
    fails=$((fails + 1))
  fi
  return "$rc"
}

# Calls of SYSCALL in an strace -c summary (0 when absent): the fourth column is always calls.
sys_calls() { awk -v s="$2" '$NF == s && $4 ~ /^[0-9]+$/ {n = $4} END {print n + 0}' "$1" 2>/dev/null; }
# A counter of one side's kept .prom: prom_sum DIR METRIC [QUEUE] (summed over its rails).
prom_sum() {
  cat "$1"/rerail-*.prom 2>/dev/null | awk -v m="$2{" -v q="${3:+queue=\"$3\"}" '
    index($0, m) == 1 && (q == "" || index($0, q)) {n += $NF} END {print n + 0}'
}
# A write latency quantile (µs) of one side's kept .prom, tx: prom_q DIR QUANTILE.
prom_q() {
  cat "$1"/rerail-*.prom 2>/dev/null | awk -v q="quantile=\"$2\"" '
    index($0, "rerail_rail_latency_seconds{") == 1 && index($0, "direction=\"tx\"") && index($0, q) {v = $NF * 1e6}
    END {if (v == "") print "-"; else printf "%.1f", v}'
}
per() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN {if (d > 0) printf "%.2f", (b - a) / d; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }
csv_field() { awk -F, -v t="$2" -v c="$3" '$1 == t {v = $c} END {print (v == "" ? "-" : v)}' "$1" 2>/dev/null; }

echo "verbs_cost_lab: rxe0 (A, sends) -> rxe2 (B, receives), MTU $(cat /sys/class/net/vethA0/mtu), $(nproc) vCPUs;" \
  "NCCL $(libnccl_version "$NCCL_LIB"); sizes ${sizes[*]}; messages $n1/$n2 ($l1/$l2 from 4M) + warm-up"
declare -A cost sys bw slat lat wlat placed
for size in "${sizes[@]}"; do
  b=$(bytes_of "$size") a=$n1 z=$n2
  ((b >= 4 << 20)) && a=$l1 z=$l2
  dm=$(($(driver_msgs "$z") - $(driver_msgs "$a")))
  for net in rerail nccl-ib; do
    for n in "$a" "$z"; do
      run_pair "$net" "$net-$size-$n" trace --sizes "$size" --min-msgs "$n" --max-msgs "$n" --bytes 1 --no-lat
    done
    for lc in a b; do
      for s in write ioctl; do
        sys[$net,$size,$lc,$s]=$(per "$(sys_calls "$work/$net-$size-$a-$lc.strace" $s)" \
                                     "$(sys_calls "$work/$net-$size-$z-$lc.strace" $s)" "$dm")
      done
    done
    if [[ $net == rerail ]]; then
      for lc in a b; do
        d1=$work/tel-$net-$size-$a-$lc d2=$work/tel-$net-$size-$z-$lc
        m=$(($(prom_sum "$d2" rerail_rail_messages_total) - $(prom_sum "$d1" rerail_rail_messages_total)))
        cost[$size,$lc,msgs]=$m
        for f in doorbells work_requests completions; do
          for q in send recv; do
            cost[$size,$lc,$f,$q]=$(per "$(prom_sum "$d1" "rerail_rail_${f}_total" $q)" \
                                        "$(prom_sum "$d2" "rerail_rail_${f}_total" $q)" "$m")
          done
        done
      done
    fi
    run_pair "$net" "$net-$size-bw" tel --sizes "$size" --min-msgs "$z" --max-msgs "$z" --bytes 1 --no-lat --send-lat
    bw[$net,$size]=$(csv_field "$work/$net-$size-bw-a.csv" bw 4)
    slat[$net,$size]="$(csv_field "$work/$net-$size-bw-a.csv" sendlat 5) $(csv_field "$work/$net-$size-bw-a.csv" sendlat 6)"
    if [[ $net == rerail ]]; then
      wlat[$size]="$(prom_q "$work/tel-$net-$size-bw-a" 0.5) $(prom_q "$work/tel-$net-$size-bw-a" 0.99)"
      placed[$size]="$(prom_sum "$work/tel-$net-$size-bw-a" rerail_placed_sends_total)/$(prom_sum "$work/tel-$net-$size-bw-a" rerail_rail_messages_total)"
    fi
  done
  cost[$size,dm]=$dm
done
for net in rerail nccl-ib; do
  run_pair "$net" "$net-solo" tel --sizes "$solo_size" --min-msgs "$solo_n" --max-msgs "$solo_n" --bytes 1 --no-lat \
    --send-lat --send-depth 1
  slat[$net,solo]="$(csv_field "$work/$net-solo-a.csv" sendlat 5) $(csv_field "$work/$net-solo-a.csv" sendlat 6)"
  run_pair "$net" "$net-lat" plain --no-bw --lat-iters "$lat_iters" --lat-warmup 100
  lat[$net]="$(csv_field "$work/$net-lat-a.csv" lat 5) $(csv_field "$work/$net-lat-a.csv" lat 6)"
done

echo
echo "(a) rerail's plugin counters per message (sender A: tx rail; receiver B: rx rail; each queue)"
echo "| size | msgs (plugin A/B, driver) | A doorbells send+recv | A WRs send+recv | A completions send+recv | B doorbells send+recv | B WRs send+recv | B completions send+recv |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for size in "${sizes[@]}"; do
  row="| $size | ${cost[$size,a,msgs]}/${cost[$size,b,msgs]}, ${cost[$size,dm]}"
  for lc in a b; do
    for f in doorbells work_requests completions; do row+=" | ${cost[$size,$lc,$f,send]} + ${cost[$size,$lc,$f,recv]}"; done
  done
  echo "$row |"
  [[ ${cost[$size,a,msgs]} == "${cost[$size,dm]}" && ${cost[$size,b,msgs]} == "${cost[$size,dm]}" ]] ||
    { echo "verbs_cost_lab: $size: the plugin counted ${cost[$size,a,msgs]}/${cost[$size,b,msgs]} messages, the driver sent ${cost[$size,dm]}" >&2
      fails=$((fails + 1)); }
done
echo
echo "(b) system calls on the uverbs device per message (strace -c, write = rxe's send doorbell)"
echo "| size | rerail A write | rerail A ioctl | rerail B write | rerail B ioctl | NCCL IB A write | NCCL IB A ioctl | NCCL IB B write | NCCL IB B ioctl |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in "${sizes[@]}"; do
  row="| $size"
  for net in rerail nccl-ib; do
    for lc in a b; do row+=" | ${sys[$net,$size,$lc,write]} | ${sys[$net,$size,$lc,ioctl]}"; done
  done
  echo "$row |"
done
echo
echo "(c, d) bandwidth and send completion (isend to test()=done, 8 in flight), one run each, no strace"
echo "| size | rerail GB/s | NCCL IB GB/s | rerail / NCCL | rerail send done p50 / p99 µs | NCCL IB send done p50 / p99 µs | p50 rerail / NCCL | rerail writes p50 / p99 µs (telemetry) | rerail sends done on placement / sends |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in "${sizes[@]}"; do
  read -r rp50 rp99 <<<"${slat[rerail,$size]}"
  read -r np50 np99 <<<"${slat[nccl-ib,$size]}"
  echo "| $size | ${bw[rerail,$size]} | ${bw[nccl-ib,$size]} | $(ratio "${bw[rerail,$size]}" "${bw[nccl-ib,$size]}") |" \
    "$rp50 / $rp99 | $np50 / $np99 | $(ratio "$rp50" "$np50") | ${wlat[$size]% *} / ${wlat[$size]#* } | ${placed[$size]} |"
done
read -r rp50 rp99 <<<"${slat[rerail,solo]}"
read -r np50 np99 <<<"${slat[nccl-ib,solo]}"
wsolo="$(prom_q "$work/tel-rerail-solo-a" 0.5) / $(prom_q "$work/tel-rerail-solo-a" 0.99)"
echo
echo "send completion with 1 in flight ($solo_size, $solo_n sends): rerail p50 / p99 $rp50 / $rp99 µs (its writes: $wsolo)," \
  "NCCL IB $np50 / $np99 µs, p50 ratio $(ratio "$rp50" "$np50"); rerail sends done on placement / sends:" \
  "$(prom_sum "$work/tel-rerail-solo-a" rerail_placed_sends_total)/$(prom_sum "$work/tel-rerail-solo-a" rerail_rail_messages_total)"
read -r rl50 rl99 <<<"${lat[rerail]}"
read -r nl50 nl99 <<<"${lat[nccl-ib]}"
echo
echo "8-byte round trip ($lat_iters after 100): rerail p50 $rl50 µs (p99 $rl99), NCCL IB p50 $nl50 µs (p99 $nl99), ratio $(ratio "$rl50" "$nl50")"
echo
echo "ib_write_bw rxe2 -> rxe0 (bytes, iterations, peak MB/s, average MB/s):"
ib_sizes=()
for size in "${sizes[@]}"; do ib_sizes+=("$(bytes_of "$size")"); done
ITERS=${RERAIL_COSTLAB_IB_ITERS:-50} "$here/../test/lab/rxe/bw_baseline.sh" "${ib_sizes[@]}" | sed 1d
echo "verbs_cost_lab: raw files in $work; $fails failure(s)"
exit $((fails != 0))
