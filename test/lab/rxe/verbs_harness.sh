#!/bin/bash
# The verbs rail end to end, inside the Soft-RoCE lab (run by test_verbs_rail.sh through
# rxelab.sh): the NCCL-faithful harness as two "hosts" A (client, sends) and B (server,
# receives), each pooling its two NICs with RERAIL_TRANSPORT=verbs, every byte checked, while
# host A's rail-0 NIC goes down and comes back. Passes when
#  - both ends put both NICs on the verbs rail (not TCP),
#  - the traffic completes with zero errors across the failure (failover) and after it,
#  - the sender reports a failover, and no ibv_reg_mr happens after the first failover,
#  - rxe offers neither GPUDirect RDMA nor DMA-BUF: ptrSupport is host memory alone,
#  - with FLUSH=gpuflush, the receiver (RERAIL_TEST_FORCE_GPU_FLUSH=1) flushes every receive as
#    if it had landed in GPU memory: real RDMA reads on its loopback flush QPs, each flush
#    request done only when its read completed; without, no flush request at all.
#  - with RERAIL_IB_QPS_PER_RAIL=N > 1 in the environment: both ends report N QPs per rail.
#  - with RERAIL_IB_ADAPTIVE_ROUTING=1 in the environment, the sender sent writes split (a plain
#    RDMA WRITE of the bulk, then a write with immediate); without it (RoCE: NCCL's rule says
#    off), none.
#
# usage: verbs_harness.sh HARNESS PLUGIN_DIR [SECONDS [FAULT [FLUSH]]]
#   FAULT: link (default: ip link set vethA0 down, then up) or silent (RoCE on rail 0 dropped by
#   nftables while every link and port stays up: only rerail's own detection can see it)
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2 SECS=${3:-16} FAULT=${4:-link} FLUSH=${5:-}
server_env=()
[ "$FLUSH" = gpuflush ] && server_env=(RERAIL_TEST_FORCE_GPU_FLUSH=1)
work=$(mktemp -d /tmp/verbs-harness.XXXXXX)
fails=0
ok()  { echo "verbs_rail: ok   - $*"; }
bad() { echo "verbs_rail: FAIL - $*"; fails=$((fails + 1)); }

# Connection setup of the RDMA devices travels out of band (RERAIL_SOCKET_IFNAME): over lo,
# which both lab hosts share as their management network, so a data NIC going down never
# takes setup or reconnects with it.
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_PROGRESS_TIMEOUT=1000 RERAIL_FAILBACK_HOLD=500
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
mkdir -p "$work/rdv"
# hcount: the plugin's counters from a harness summary (verdicts never read log wording)
# shellcheck source=../../harness/harness_json.sh disable=SC1091
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../harness" && pwd)/harness_json.sh"
common=(--rendezvous "$work/rdv" --conns 2 --duration "$SECS" --max-size 256K --inflight 4
        --timeout 90 --no-peer-abort --stall-report)
env "${server_env[@]}" RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-health-B \
  "$HARNESS" --role server "${common[@]}" >"$work/server.log" 2>&1 &
server=$!
RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-health-A \
  "$HARNESS" --role client "${common[@]}" >"$work/client.log" 2>&1 &
client=$!

sleep $((SECS / 4))
if [ "$FAULT" = silent ]; then
  echo "verbs_rail: rail 0 goes silent (RoCE dropped, links up) ($(date +%s.%N))"
  rxefault drop 0 on
  sleep $((SECS / 4))
  echo "verbs_rail: rail 0 heard again ($(date +%s.%N))"
  rxefault drop 0 off
else
  echo "verbs_rail: host A's NIC vethA0 goes down ($(date +%s.%N))"
  ip link set vethA0 down
  sleep $((SECS / 4))
  echo "verbs_rail: vethA0 comes back ($(date +%s.%N))"
  ip link set vethA0 up
fi
wait "$client"; crc=$?
wait "$server"; src=$?

for side in client server; do
  n=$(grep -c 'on the verbs rail' "$work/$side.log")
  if [ "$n" -ge 2 ]; then ok "$side: both NICs on the verbs rail"; else bad "$side: $n NIC(s) on the verbs rail"; fi
done
qps=${RERAIL_IB_QPS_PER_RAIL:-1}
if [ "$qps" -gt 1 ]; then
  for side in client server; do
    if grep -q "$qps queue pair(s) per rail" "$work/$side.log"; then ok "$side: $qps QPs per rail"
    else bad "$side: RERAIL_IB_QPS_PER_RAIL=$qps not in use"; fi
  done
fi
splits=$(hcount "$work/client.log" split_writes_total)
if [ "${RERAIL_IB_ADAPTIVE_ROUTING:-}" = 1 ]; then
  if [ "$splits" -ge 1 ] 2>/dev/null; then ok "adaptive routing: $splits write(s) sent split"
  else bad "adaptive routing forced on, but no write sent split ($splits)"; fi
elif [ "$splits" = 0 ]; then ok "RoCE: no write sent split"
else bad "RoCE without adaptive routing, yet $splits write(s) sent split"; fi
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then ok "traffic completed, every byte checked ($(grep -ho 'received: .*GB/s' "$work/server.log" | head -1))"
else bad "client exit $crc, server exit $src"; fi
fo=$(hcount "$work/client.log" failovers_total) fb=$(hcount "$work/client.log" failbacks_total)
if [ "$fo" -ge 1 ] 2>/dev/null; then ok "the sender failed over ($fo): $(grep -m1 -o 'health: failover .*' "$work/client.log" | cut -c1-120)"
else bad "no failover counted by the sender ($fo)"; fi
if [ "$fb" -ge 1 ] 2>/dev/null; then ok "traffic failed back to the healed NIC ($fb)"
else bad "no fail-back counted after the NIC came back ($fb)"; fi
# Registrations of NCCL's buffers: none from the failure on (every buffer was registered on
# every NIC at regMr). Counted in each process's log from its first report of a rail going
# down (the failure as that process saw it).
regs=0 late=0
for side in client server; do
  n=$(grep -c 'ibv_reg_mr #' "$work/$side.log")
  m=$(awk '/health: .*(rail_state|nic_state).* down/ {seen = 1} seen && /ibv_reg_mr #/ {n++} END {print n + 0}' "$work/$side.log")
  regs=$((regs + n)) late=$((late + m))
done
if [ "$fo" -ge 1 ] 2>/dev/null && [ "$late" -eq 0 ] && [ "$regs" -gt 0 ]; then
  ok "$regs buffer registration(s) (ibv_reg_mr) at setup, none from the failure on"
else bad "buffer registrations from the failure on: $late (in all: $regs)"; fi

# rxe has no GPUDirect RDMA and no DMA-BUF MRs (its probe registration says EOPNOTSUPP):
# host memory alone, on every device of both ends.
n=$(cat "$work/client.log" "$work/server.log" | grep -c 'ptrSupport 0x1 ')
if [ "$n" -ge 4 ] && ! grep -hq 'ptrSupport 0x[^1] ' "$work/client.log" "$work/server.log"; then
  ok "ptrSupport is host memory alone on all $n devices (no CUDA, no DMA-BUF on rxe)"
else bad "ptrSupport: $(grep -ho 'ptrSupport 0x[0-9a-f]*' "$work/client.log" "$work/server.log" | sort | uniq -c | tr '\n' ' ')"; fi
freqs=$(grep -o 'flush requests [0-9]*' "$work/server.log" | awk '{print $3}' | tail -1)
if [ "$FLUSH" = gpuflush ]; then
  reads=$(grep -c 'first flush read completed' "$work/server.log")
  if [ "${freqs:-0}" -gt 0 ] && [ "$reads" -ge 1 ] && [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
    ok "$freqs flush requests, each done after its RDMA read completed ($reads flush QP(s) used)"
  else bad "GPU flush: ${freqs:-no} flush requests, $reads flush QP(s) with a completed read"; fi
elif [ "${freqs:-0}" -ne 0 ]; then bad "host memory got $freqs flush requests (want none)"
else ok "host memory: no flush request"; fi

echo "---- plugin events (client)"; grep -E 'health: |ibv_reg_mr' "$work/client.log" | head -20
if [ "$fails" -ne 0 ]; then
  for side in client server; do echo "---- $side.log (tail)"; tail -n 30 "$work/$side.log"; done
fi
echo "verbs_rail: $fails failure(s)"
exit $((fails != 0))
