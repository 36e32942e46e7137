#!/bin/bash
# Connections per process over the verbs rail, in the Soft-RoCE lab: for each count N, the
# harness as host A (client) and host B (server) with N connections over both NICs
# (RERAIL_BACKUPS=1: every connection an endpoint on each NIC), small checked messages for a
# few seconds. Reported per count: setup time (both ranks start to every connection up),
# each rank's resident memory (VmRSS) and pinned memory (VmPin: what ibv_reg_mr pinned), and
# the QPs, CQs and MRs the rxe devices of each host hold (rdma resource show). The per-
# connection figures are the differences between two counts divided by the difference in
# connections, so fixed costs (the plugin, the harness, libibverbs) drop out.
#
# usage (root):  bench/verbs_conns_bench.sh BUILD_DIR [COUNTS...]     default counts: 16 64
# It boots the lab itself (test/lab/rxe/rxelab.sh run) and prints one line per count.
#   RERAIL_BENCH_LAB_MEM  the lab guest's memory in MiB (default 3072; 2,048 connections need
#                         more: both ranks live in the one guest)
#   RERAIL_BENCH_LAB_TIMEOUT  the lab's time limit in s (default 580; every count runs in one
#                         boot, and 2,048 connections under TCG take minutes to set up)
set -uo pipefail
if [ "${RXELAB:-}" != 1 ]; then
  top="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  build=$(readlink -f "$1"); shift
  exec "$top/test/lab/rxe/rxelab.sh" run --timeout "${RERAIL_BENCH_LAB_TIMEOUT:-580}" --mem "${RERAIL_BENCH_LAB_MEM:-3072}" -- \
    "$top/bench/verbs_conns_bench.sh" "$build" "${@:-16 64}"
fi
build=$1; shift
harness=$build/test/harness/rerail-harness
export LD_LIBRARY_PATH="$build/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_BACKUPS=1
export NCCL_DEBUG=WARN
counts=$*
[ -n "$counts" ] || counts="16 64"

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
res() { # DEV KIND: how many the device holds
  rdma resource show 2>/dev/null | awk -v d="$1:" -v k="$2" '{for (i = 1; i < NF; i++) if ($2 == d && $i == k) print $(i + 1)}'
}

echo "conns  setup_s  A_rss_kib  A_pin_kib  B_rss_kib  B_pin_kib  rxe0_qp rxe0_cq rxe0_mr  rxe2_qp rxe2_cq rxe2_mr  A_fds B_fds"
for n in $counts; do
  # Per connection and rank: a listener (server), each endpoint's setup socket, and the verbs
  # objects' file descriptors; 8 per connection leaves room.
  ulimit -n $((n * 8 + 256))
  work=$(mktemp -d /tmp/verbs-conns.XXXXXX)
  mkdir -p "$work/rdv"
  common=(--rendezvous "$work/rdv" --conns "$n" --duration 4 --min-size 0 --max-size 4K --inflight 1
          --group 1 --timeout 400 --rdv-timeout 200 --quiet)
  t0=$(date +%s.%N)
  RERAIL_SOCKET_IFNAME==vethB0,vethB1 RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-conns-B \
    "$harness" --role server "${common[@]}" >"$work/server.log" 2>&1 &
  server=$!
  RERAIL_SOCKET_IFNAME==vethA0,vethA1 RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-conns-A \
    "$harness" --role client "${common[@]}" >"$work/client.log" 2>&1 &
  client=$!
  while [ ! -e "$work/rdv/client.traffic" ] && kill -0 "$client" 2>/dev/null; do sleep 0.05; done
  t_up=$(date +%s.%N)
  sleep 1 # both ranks registered and moving data
  line=$(printf '%5d  %7.1f  %9s  %9s  %9s  %9s  %7s %7s %7s  %7s %7s %7s  %5s %5s' "$n" \
    "$(awk -v a="$t0" -v b="$t_up" 'BEGIN {print b - a}')" \
    "$(kib "$client" VmRSS)" "$(kib "$client" VmPin)" "$(kib "$server" VmRSS)" "$(kib "$server" VmPin)" \
    "$(res rxe0 qp)" "$(res rxe0 cq)" "$(res rxe0 mr)" "$(res rxe2 qp)" "$(res rxe2 cq)" "$(res rxe2 mr)" \
    "$(ls "/proc/$client/fd" 2>/dev/null | wc -l)" "$(ls "/proc/$server/fd" 2>/dev/null | wc -l)")
  wait "$client"; crc=$?
  wait "$server"; src=$?
  [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] || line="$line  FAILED (client $crc, server $src)"
  echo "$line"
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then grep -h -m3 -E 'WARN|ERROR' "$work/client.log" "$work/server.log"; fi
  rm -rf "$work"
done
