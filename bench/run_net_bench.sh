#!/usr/bin/env bash
# Runs the kernel TCP baseline (rerail-raw-socket-bench) and rerail through
# rerail-net-bench on loopback, in the same run, and prints a markdown report
# (for bench/RESULTS.md): per size rerail GB/s, raw best GB/s and their ratio;
# 8-byte round trip p50/p99 of both; the many-connection figure; and NCCL's
# own socket transport (NCCL_NET=Socket) measured through the same driver in
# the same run (rerail-net-bench --plugin nccl-socket:LIB), when libnccl.so.2
# is found (NCCL_LIB, LD_LIBRARY_PATH, the ld.so cache, or the build's CMake).
# bench/socket_compare.sh is the fuller comparison (rounds, both congestion
# controls).
#
# usage: bench/run_net_bench.sh BUILD_DIR [--quick]
#   --quick            fewer sizes and bytes (a smoke run, about half a minute)
#   --report-only      no runs: print the report from OUT_DIR/raw.csv, net.csv
#                      (and nccl.csv if there)
# environment:
#   SIZES=4K,64K,...   sizes for both benchmarks (default 4K..64M by 2)
#   PLUGIN=NAME|PATH   the ncclNet plugin (default rerail, found through
#                      LD_LIBRARY_PATH=BUILD_DIR/net_plugin as NCCL finds it)
#   NET_REPS=N         rerail bandwidth: best of N timed runs per size (default
#                      3; the raw figure is already the best of 24 configurations)
#   CC=NAME            TCP congestion control of raw (--cc) and rerail
#                      (RERAIL_TCP_CONGESTION); default: the system's. NCCL's
#                      transport always runs with the system's
#   NCCL_LIB=PATH      libnccl.so.2 for the NCCL socket column
#   RAW_ARGS, NET_ARGS extra arguments for each benchmark
#   OUT_DIR            where the raw CSV files go (default: a fresh temp dir)
set -euo pipefail

# shellcheck source=bench/bench_cli.sh
. "$(dirname "$0")/bench_cli.sh"
bench_cli_parse run_net_bench.sh "$@"

RAW="$BUILD/bench/rerail-raw-socket-bench"
NET="$BUILD/bench/rerail-net-bench"
[[ $REPORT_ONLY == 1 && -z "${OUT_DIR:-}" ]] && { echo "run_net_bench.sh: --report-only needs OUT_DIR" >&2; exit 2; }
[[ $REPORT_ONLY == 1 ]] || for b in "$RAW" "$NET"; do
  [[ -x "$b" ]] || { echo "run_net_bench.sh: $b not built (rerail-net-bench needs RERAIL_BUILD_TESTS=ON)" >&2; exit 1; }
done

# shellcheck source=bench/find_libnccl.sh
. "$(dirname "$0")/find_libnccl.sh"
find_libnccl "$BUILD"

if [[ $QUICK == 1 ]]; then
  SIZES=${SIZES:-4K,64K,256K,1M,8M}
  RAW_Q=(--bytes 128M --lat-iters 3000 --lat-warmup 300)
  NET_Q=(--bytes 64M --lat-iters 3000 --lat-warmup 300 --multi-bytes 256M)
else
  SIZES=${SIZES:-}
  RAW_Q=()
  NET_Q=()
fi
SZ_ARGS=()
[[ -n "$SIZES" ]] && SZ_ARGS=(--sizes "$SIZES")

OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/rerail-net-bench.XXXXXX)}
mkdir -p "$OUT_DIR"
PLUGIN=${PLUGIN:-rerail}
NET_REPS=${NET_REPS:-3}

export RERAIL_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo
CC_ARGS=()
if [[ -n "${CC:-}" ]]; then export RERAIL_TCP_CONGESTION=$CC; CC_ARGS=(--cc "$CC"); else unset RERAIL_TCP_CONGESTION; fi
export LD_LIBRARY_PATH="$BUILD/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [[ $REPORT_ONLY == 0 ]]; then
  echo "run_net_bench.sh: raw TCP baseline ..." >&2
  # shellcheck disable=SC2086
  "$RAW" --fork --csv "${SZ_ARGS[@]}" "${RAW_Q[@]}" "${CC_ARGS[@]}" ${RAW_ARGS:-} >"$OUT_DIR/raw.csv"
  echo "run_net_bench.sh: rerail-net-bench --plugin $PLUGIN ..." >&2
  # shellcheck disable=SC2086
  "$NET" --fork --csv --plugin "$PLUGIN" --reps "$NET_REPS" "${SZ_ARGS[@]}" "${NET_Q[@]}" ${NET_ARGS:-} >"$OUT_DIR/net.csv"
  rm -f "$OUT_DIR/nccl.csv"
  if [[ -n "$NCCL_LIB" ]]; then
    echo "run_net_bench.sh: rerail-net-bench --plugin nccl-socket:$NCCL_LIB (NCCL's socket transport) ..." >&2
    # shellcheck disable=SC2086
    "$NET" --fork --csv --plugin "nccl-socket:$NCCL_LIB" --reps "$NET_REPS" --no-multi "${SZ_ARGS[@]}" "${NET_Q[@]}" \
      ${NET_ARGS:-} >"$OUT_DIR/nccl.csv"
  else
    echo "run_net_bench.sh: libnccl.so.2 not found (set NCCL_LIB): no NCCL socket column" >&2
  fi
  date -u +%Y-%m-%dT%H:%MZ >"$OUT_DIR/date"
  echo "$NET_REPS" >"$OUT_DIR/net_reps"
  SYS_CC=$(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo unknown)
  echo "${CC:-$SYS_CC (system default)}" >"$OUT_DIR/cc"
  echo "run_net_bench.sh: CSV in $OUT_DIR" >&2
fi
WHEN=$(cat "$OUT_DIR/date" 2>/dev/null || date -u +%Y-%m-%dT%H:%MZ)
REPS_USED=$(cat "$OUT_DIR/net_reps" 2>/dev/null || echo "$NET_REPS")
CC_USED=$(cat "$OUT_DIR/cc" 2>/dev/null || echo unknown)

CPU=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || echo unknown)

awk -F, -v raw="$OUT_DIR/raw.csv" -v net="$OUT_DIR/net.csv" -v nccl="$OUT_DIR/nccl.csv" \
    -v plugin="$PLUGIN" -v host="$(hostname)" -v date="$WHEN" -v reps="$REPS_USED" \
    -v kernel="$(uname -r)" -v ncpu="$(nproc)" -v cpu="$CPU" -v cc="$CC_USED" \
    -v ncclv="$( [[ -n "$NCCL_LIB" ]] && libnccl_version "$NCCL_LIB")" '
function human(b) {
  if (b >= 1073741824 && b % 1073741824 == 0) return (b / 1073741824) " GiB"
  if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
  if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
  return b " B"
}
function sb(v) { return v == 0 ? "default" : human(v) }
BEGIN {
  # raw: test,size,streams,sockbuf,window,gbps,p50_us,p99_us,min_us,mean_us,msgs
  while ((getline line < raw) > 0) {
    split(line, f, ",")
    if (f[1] == "bw" && f[3] == 1 && f[6] > r1[f[2]]) r1[f[2]] = f[6]
    if (f[1] == "bw_best") { rbw[f[2]] = f[6]; rcfg[f[2]] = f[3] " str, " sb(f[4]) ", win " f[5] }
    if (f[1] == "lat_best") { rp50 = f[7]; rp99 = f[8]; rcfgl = sb(f[4]) }
  }
  # net: test,size,conns,gbps,p50_us,p99_us,min_us,mean_us,msgs,verified
  while ((getline line < net) > 0) {
    split(line, f, ",")
    if (f[1] == "bw") { nbw[f[2]] = f[4]; order[++n] = f[2] }
    if (f[1] == "lat") { np50 = f[5]; np99 = f[6] }
    if (f[1] == "multi") { msize = f[2]; mconns = f[3]; mgbps = f[4] }
  }
  # nccl (same columns as net; absent when libnccl.so.2 was not found)
  while ((getline line < nccl) > 0) {
    split(line, f, ",")
    if (f[1] == "bw") cbw[f[2]] = f[4]
    if (f[1] == "lat") { cp50 = f[5]; cp99 = f[6] }
  }
  printf "## ncclNet benchmarks on loopback: %s vs kernel TCP\n\n", plugin
  printf "Measured %s on `%s` (%s, %s cores, Linux %s), RERAIL_SOCKET_IFNAME=lo, two processes, TCP congestion control %s. ", date, host, cpu, ncpu, kernel, cc
  printf "GB/s = 1e9 B/s. %s: `rerail-net-bench` (1 connection, 8 requests in flight, receives posted ahead, payloads verified, best of %s runs per size). ", plugin, reps
  printf "Raw: `rerail-raw-socket-bench`, best of 1–4 TCP streams (a thread each), kernel-default vs 4 MiB socket buffers "
  printf "and windows of 2, 4 or 16 messages in flight per stream; its round trip busy-polls.\n\n"
  printf "### Bandwidth\n\n"
  printf "| size | %s GB/s | raw TCP best GB/s | %s / raw | raw best config | raw 1 stream GB/s | NCCL socket GB/s | %s / NCCL |\n", plugin, plugin, plugin
  printf "|---:|---:|---:|---:|:---|---:|---:|---:|\n"
  for (i = 1; i <= n; i++) {
    s = order[i]
    r = (s in rbw) ? sprintf("%.2f", rbw[s]) : "—"
    ratio = (s in rbw && rbw[s] > 0) ? sprintf("%.2f", nbw[s] / rbw[s]) : "—"
    one = (s in r1) ? sprintf("%.2f", r1[s]) : "—"
    c = (s in cbw) ? sprintf("%.2f", cbw[s]) : "—"
    cr = (s in cbw && cbw[s] > 0) ? sprintf("%.2f", nbw[s] / cbw[s]) : "—"
    printf "| %s | %.2f | %s | %s | %s | %s | %s | %s |\n", human(s), nbw[s], r, ratio, (s in rcfg) ? rcfg[s] : "—", one, c, cr
  }
  printf "\n### 8-byte round trip (µs)\n\n"
  printf "| | p50 | p99 |\n|:---|---:|---:|\n"
  if (np50 != "") printf "| %s (ping-pong on two connections) | %.2f | %.2f |\n", plugin, np50, np99
  if (rp50 != "") printf "| raw TCP, busy-poll, TCP_NODELAY (sockbuf %s) | %.2f | %.2f |\n", rcfgl, rp50, rp99
  if (np50 != "" && rp50 > 0) printf "| ratio %s / raw | %.2f | %.2f |\n", plugin, np50 / rp50, np99 / rp99
  if (cp50 != "") printf "| NCCL %s socket transport, same driver | %.2f | %.2f |\n", ncclv, cp50, cp99
  else printf "| NCCL socket transport | not measured (libnccl.so.2 not found) | |\n"
  if (mgbps != "") {
    printf "\n### Many connections\n\n"
    printf "%s connections at once, %s messages, 8 in flight each: **%.2f GB/s** aggregate.\n", mconns, human(msize), mgbps
  }
  if (cp50 != "") printf "\nNCCL socket: NCCL %s'"'"'s own transport from libnccl.so.2, through `rerail-net-bench --plugin nccl-socket` in the same run (best of %s runs per size, the system'"'"'s congestion control).\n", ncclv, reps
}'
