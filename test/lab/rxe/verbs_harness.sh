#!/bin/bash
# The verbs rail end to end, inside the Soft-RoCE lab (run by test_verbs_rail.sh through
# rxelab.sh): the NCCL-faithful harness as two "hosts" A (client, sends) and B (server,
# receives), each pooling its two NICs with RERAIL_TRANSPORT=verbs, every byte checked, while
# host A's rail-0 NIC goes down and comes back. Every verdict is on the plugin's counters (the
# harness's "plugin counters" line) or on `rerail devices --json`, never on log wording. Passes when
#  - both ends put both NICs on the verbs rail (not TCP): verbs_devices_opened_total,
#  - the traffic completes with zero errors across the failure (failover) and after it,
#  - the sender counts a failover and a fail-back, and no buffer is registered from the first
#    NIC or rail down on (verbs_registrations_after_down_total 0, verbs_registrations_total > 0),
#  - rxe offers neither GPUDirect RDMA nor DMA-BUF: ptrSupport is host memory alone (the
#    ptr_support of every verbs device in `rerail devices --json`, the plugin's own discovery),
#  - with FLUSH=gpuflush, the receiver (RERAIL_TEST_FORCE_GPU_FLUSH=1) flushes every receive as
#    if it had landed in GPU memory: real RDMA reads on its loopback flush QPs, each flush
#    request done only when its read completed (verbs_flush_reads_total >= flush_requests_total
#    > 0); without, no flush request at all,
#  - both ends connect RERAIL_IB_QPS_PER_RAIL (default 1) queue pairs per verbs endpoint
#    (verbs_queue_pairs_connected_total = N x verbs_endpoints_connected_total),
#  - with RERAIL_IB_ADAPTIVE_ROUTING=1 in the environment, the sender sent writes split (a plain
#    RDMA WRITE of the bulk, then a write with immediate); without it (RoCE: NCCL's rule says
#    off), none.
#
# usage: verbs_harness.sh HARNESS PLUGIN_DIR [SECONDS [FAULT [FLUSH]]], with RERAIL_CLI naming the
#   rerail tool (for `rerail devices --json`)
#   FAULT: link (default: ip link set vethA0 down, then up) or silent (RoCE on rail 0 dropped by
#   nftables while every link and port stays up: only rerail's own detection can see it)
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2 SECS=${3:-16} FAULT=${4:-link} FLUSH=${5:-}
CLI=${RERAIL_CLI:-}
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
# Each host's devices (also for `rerail devices` below): NAME=VALUE words.
declare -A side_env=([client]="RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe0,rxe1"
                     [server]="RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe2,rxe3")
# shellcheck disable=SC2086
env "${server_env[@]}" ${side_env[server]} RERAIL_HEALTH_PATH=/dev/shm/rr-health-B \
  "$HARNESS" --role server "${common[@]}" >"$work/server.log" 2>&1 &
server=$!
# shellcheck disable=SC2086
env ${side_env[client]} RERAIL_HEALTH_PATH=/dev/shm/rr-health-A \
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
  n=$(hcount "$work/$side.log" verbs_devices_opened_total)
  if [ "$n" -ge 2 ] 2>/dev/null; then ok "$side: both NICs on the verbs rail"; else bad "$side: $n NIC(s) on the verbs rail"; fi
done
qps=${RERAIL_IB_QPS_PER_RAIL:-1}
for side in client server; do
  eps=$(hcount "$work/$side.log" verbs_endpoints_connected_total) q=$(hcount "$work/$side.log" verbs_queue_pairs_connected_total)
  if [ "$eps" -gt 0 ] 2>/dev/null && [ "$q" -eq $((qps * eps)) ] 2>/dev/null; then ok "$side: $qps QP(s) per rail ($eps endpoints, $q QPs)"
  else bad "$side: RERAIL_IB_QPS_PER_RAIL=$qps not in use ($eps endpoints, $q QPs)"; fi
done
splits=$(hcount "$work/client.log" split_writes_total)
if [ "${RERAIL_IB_ADAPTIVE_ROUTING:-}" = 1 ]; then
  if [ "$splits" -ge 1 ] 2>/dev/null; then ok "adaptive routing: $splits write(s) sent split"
  else bad "adaptive routing forced on, but no write sent split ($splits)"; fi
elif [ "$splits" = 0 ]; then ok "RoCE: no write sent split"
else bad "RoCE without adaptive routing, yet $splits write(s) sent split"; fi
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then ok "traffic completed, every byte checked ($(grep -ho 'received: .*GB/s' "$work/server.log" | head -1))"
else bad "client exit $crc, server exit $src"; fi
fo=$(hcount "$work/client.log" failovers_total) fb=$(hcount "$work/client.log" failbacks_total)
if [ "$fo" -ge 1 ] 2>/dev/null; then ok "the sender failed over ($fo)"
else bad "no failover counted by the sender ($fo)"; fi
if [ "$fb" -ge 1 ] 2>/dev/null; then ok "traffic failed back to the healed NIC ($fb)"
else bad "no fail-back counted after the NIC came back ($fb)"; fi
# Registrations of NCCL's buffers: none from the failure on (every buffer was registered on
# every NIC at regMr). Each process counts those it makes after it first sees a NIC or rail
# down (the failure as that process saw it) apart from the others.
regs=0 late=0
for side in client server; do
  n=$(hcount "$work/$side.log" verbs_registrations_total) m=$(hcount "$work/$side.log" verbs_registrations_after_down_total)
  regs=$((regs + ${n//\?/0})) late=$((late + ${m//\?/1}))
done
if [ "$fo" -ge 1 ] 2>/dev/null && [ "$late" -eq 0 ] && [ "$regs" -gt 0 ]; then
  ok "$regs buffer registration(s) (ibv_reg_mr) at setup, none from the failure on"
else bad "buffer registrations from the failure on: $late (before it: $regs)"; fi

# rxe has no GPUDirect RDMA and no DMA-BUF MRs (its probe registration says EOPNOTSUPP):
# host memory alone, on every verbs device of both ends, as the plugin's own discovery
# (`rerail devices --json`, the code behind getProperties' ptrSupport) decides it.
ptrs=""
for side in client server; do
  # shellcheck disable=SC2086
  ptrs+=$( [ -n "$CLI" ] && env ${side_env[$side]} "$CLI" devices --json 2>/dev/null |
    python3 -c 'import json, sys
print(" ".join(str(d["ptr_support"]) for d in json.load(sys.stdin)["devices"] if d["transport"] == "verbs"), end=" ")')
done
n=$(wc -w <<<"$ptrs") other=$(tr ' ' '\n' <<<"$ptrs" | grep -cv '^1$\|^$')
if [ "$n" -ge 4 ] && [ "$other" -eq 0 ]; then
  ok "ptrSupport is host memory alone on all $n devices (no CUDA, no DMA-BUF on rxe)"
elif [ -z "$CLI" ]; then bad "ptrSupport: RERAIL_CLI does not name the rerail tool"
else bad "ptrSupport of the verbs devices (rerail devices --json): '$ptrs'"; fi
freqs=$(hcount "$work/server.log" flush_requests_total)
if [ "$FLUSH" = gpuflush ]; then
  reads=$(hcount "$work/server.log" verbs_flush_reads_total)
  if [ "$freqs" -gt 0 ] 2>/dev/null && [ "$reads" -ge "$freqs" ] 2>/dev/null && [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
    ok "$freqs flush requests, each done after its RDMA read completed ($reads reads)"
  else bad "GPU flush: $freqs flush requests, $reads flush reads completed"; fi
elif [ "$freqs" != 0 ]; then bad "host memory got $freqs flush requests (want none)"
else ok "host memory: no flush request"; fi

echo "---- plugin events (client)"; grep -E 'health: |ibv_reg_mr' "$work/client.log" | head -20
if [ "$fails" -ne 0 ]; then
  for side in client server; do echo "---- $side.log (tail)"; tail -n 30 "$work/$side.log"; done
fi
echo "verbs_rail: $fails failure(s)"
exit $((fails != 0))
