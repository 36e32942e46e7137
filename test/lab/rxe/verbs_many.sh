#!/bin/bash
# Many connections per rank pair over the verbs rail, inside the Soft-RoCE lab (run by
# test_verbs_many.sh through rxelab.sh): the harness as host A (client, sends) and host B
# (server, receives) with CONNS connections, both NICs on the verbs rail, one warm backup each
# (RERAIL_BACKUPS=1), small checked messages on every connection; once traffic runs, host A's
# rail-0 NIC goes down for good. Passes when
#  - every connection was set up (no per-NIC endpoint cap: one CQ per endpoint),
#  - every connection whose traffic was on the failed NIC failed over (the sender counts one
#    failover per such connection), and every connection completed its traffic with every
#    byte checked (both exit 0),
#  - no completion was dropped: verbs_stray_completions_total is 0 on both hosts.
# Verdicts are on the plugin's counters (the harness's "plugin counters" line), never on log
# wording.
#
# usage: verbs_many.sh HARNESS PLUGIN_DIR [CONNS [SECONDS]]
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2 CONNS=${3:-256} SECS=${4:-6}
work=$(mktemp -d /tmp/verbs-many.XXXXXX)
fails=0
ok()  { echo "verbs_many: ok   - $*"; }
bad() { echo "verbs_many: FAIL - $*"; fails=$((fails + 1)); }
# hcount: the plugin's counters from a harness summary
# shellcheck source=../../harness/harness_json.sh disable=SC1091
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../harness" && pwd)/harness_json.sh"

# Each endpoint keeps its setup socket (to learn of a dead peer): two per connection.
ulimit -n $((CONNS * 4 + 256))
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The default silence limit δ (1 s): a rail is not blamed while no rail of its connection has
# heard the peer, which has not accepted it yet (engine_rails.c).
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 RERAIL_BACKUPS=1
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
mkdir -p "$work/rdv"
# Small messages, one in flight per connection: the emulated NICs carry CONNS connections'
# worth of work requests, not bandwidth.
common=(--rendezvous "$work/rdv" --conns "$CONNS" --duration "$SECS" --min-size 0 --max-size 4K
        --inflight 1 --group 1 --timeout 240 --rdv-timeout 120 --no-peer-abort)
t0=$(date +%s.%N)
RERAIL_SOCKET_IFNAME==vethB0,vethB1 RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-many-B \
  "$HARNESS" --role server "${common[@]}" >"$work/server.log" 2>&1 &
server=$!
RERAIL_SOCKET_IFNAME==vethA0,vethA1 RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-many-A \
  "$HARNESS" --role client "${common[@]}" >"$work/client.log" 2>&1 &
client=$!

# Traffic starts once every connection is up: the failure comes a second into it.
for _ in $(seq 1 1200); do
  [ -e "$work/rdv/client.traffic" ] && break
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
t_up=$(date +%s.%N)
if [ -e "$work/rdv/client.traffic" ]; then
  ok "$CONNS connections set up in $(awk -v a="$t0" -v b="$t_up" 'BEGIN {printf "%.1f", b - a}') s (both NICs, one backup each)"
  sleep 1
  echo "verbs_many: host A's NIC vethA0 goes down ($(date +%s.%N))"
  ip link set vethA0 down
else
  bad "the connections were never all set up"
fi
wait "$client"; crc=$?
wait "$server"; src=$?
ip link set vethA0 up

for side in client server; do
  n=$(hcount "$work/$side.log" verbs_devices_opened_total)
  if [ "$n" -ge 2 ] 2>/dev/null; then ok "$side: both NICs on the verbs rail"; else bad "$side: $n NIC(s) on the verbs rail"; fi
done
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then ok "traffic completed on all $CONNS connections, every byte checked"
else bad "client exit $crc, server exit $src"; fi
# One failover per connection that had its traffic on the failed NIC; the chain puts every
# connection's traffic on the first NIC, so that is every connection. vethA0 is the one NIC
# that fails: the process's failovers are all from it.
fo=$(hcount "$work/client.log" failovers_total)
if [ "$fo" -eq "$CONNS" ]; then ok "every connection failed over ($fo failovers from vethA0)"
else bad "$fo connection(s) of $CONNS failed over from vethA0"; fi
for side in client server; do
  n=$(hcount "$work/$side.log" verbs_stray_completions_total)
  if [ "$n" = 0 ]; then ok "$side: no completion dropped (0 stray)"; else bad "$side: $n stray completion(s)"; fi
done
if [ "$fails" -ne 0 ]; then
  for side in client server; do
    echo "---- $side.log (warnings)"; grep -E 'WARN|ERROR' "$work/$side.log" | head -n 25
    echo "---- $side.log (tail)"; tail -n 15 "$work/$side.log"
  done
fi
[ "$fails" -eq 0 ] && rm -rf "$work"
echo "verbs_many: $fails failure(s)"
exit $((fails != 0))
