#!/bin/bash
# The verbs rail end to end, inside the Soft-RoCE lab (run by test_verbs_rail.sh through
# rxelab.sh): the NCCL-faithful harness as two "hosts" A (client, sends) and B (server,
# receives), each pooling its two NICs with RERAIL_TRANSPORT=verbs, every byte checked, while
# host A's rail-0 NIC goes down and comes back. Passes when
#  - both ends put both NICs on the verbs rail (not TCP),
#  - the traffic completes with zero errors across the failure (failover) and after it,
#  - the sender reports a failover, and no ibv_reg_mr happens after the first failover.
#
# usage: verbs_harness.sh HARNESS PLUGIN_DIR [SECONDS]
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2 SECS=${3:-16}
work=$(mktemp -d /tmp/verbs-harness.XXXXXX)
fails=0
ok()  { echo "verbs_rail: ok   - $*"; }
bad() { echo "verbs_rail: FAIL - $*"; fails=$((fails + 1)); }

export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_PROGRESS_TIMEOUT=1000 RERAIL_FAILBACK_HOLD=500
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
mkdir -p "$work/rdv"
common=(--rendezvous "$work/rdv" --conns 2 --duration "$SECS" --max-size 256K --inflight 4
        --timeout 90 --no-peer-abort --stall-report)
RERAIL_SOCKET_IFNAME==vethB0,vethB1 RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-health-B \
  "$HARNESS" --role server "${common[@]}" >"$work/server.log" 2>&1 &
server=$!
RERAIL_SOCKET_IFNAME==vethA0,vethA1 RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-health-A \
  "$HARNESS" --role client "${common[@]}" >"$work/client.log" 2>&1 &
client=$!

sleep $((SECS / 4))
echo "verbs_rail: host A's NIC vethA0 goes down ($(date +%s.%N))"
ip link set vethA0 down
sleep $((SECS / 4))
echo "verbs_rail: vethA0 comes back ($(date +%s.%N))"
ip link set vethA0 up
wait "$client"; crc=$?
wait "$server"; src=$?

for side in client server; do
  n=$(grep -c 'on the verbs rail' "$work/$side.log")
  if [ "$n" -ge 2 ]; then ok "$side: both NICs on the verbs rail"; else bad "$side: $n NIC(s) on the verbs rail"; fi
done
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then ok "traffic completed, every byte checked ($(grep -ho 'received: .*GB/s' "$work/server.log" | head -1))"
else bad "client exit $crc, server exit $src"; fi
if grep -q 'health: failover' "$work/client.log"; then ok "the sender failed over: $(grep -m1 -o 'failover .*' "$work/client.log" | cut -c1-110)"
else bad "no failover reported by the sender"; fi
# Registrations: none after the first failover (every buffer is registered on every NIC at
# regMr). Plugin log lines carry "@<epoch seconds>".
t_fail=$(grep -m1 'health: failover' "$work/client.log" | sed -n 's/.*@\([0-9.]*\) .*/\1/p')
regs=$(cat "$work/client.log" "$work/server.log" | grep -c 'ibv_reg_mr #')
late=$(cat "$work/client.log" "$work/server.log" | grep 'ibv_reg_mr #' |
  sed -n 's/.*@\([0-9.]*\) .*/\1/p' | awk -v t="${t_fail:-0}" '$1 > t' | wc -l)
if [ -n "$t_fail" ] && [ "$late" -eq 0 ] && [ "$regs" -gt 0 ]; then
  ok "$regs ibv_reg_mr call(s), none after the first failover"
else bad "ibv_reg_mr calls after the failover: $late (in all: $regs; failover at ${t_fail:-never})"; fi

if [ "$fails" -ne 0 ]; then
  for side in client server; do echo "---- $side.log (tail)"; tail -n 30 "$work/$side.log"; done
fi
echo "verbs_rail: $fails failure(s)"
exit $((fails != 0))
