#!/bin/bash
# The traffic class on the wire (issue 23), inside the Soft-RoCE lab (run by
# test_verbs_rail.sh through rxelab.sh). rxe copies a QP's GRH traffic class into the IP
# header of its RoCE v2 packets (DSCP = TC >> 2), so what rerail puts in its QPs' address
# vectors shows on the NICs: for each case nftables counts the RoCE packets (UDP 4791)
# arriving on the lab's four NICs, those with DSCP 26 and those with any other, while the
# harness moves checked traffic over both verbs rails (data, control messages and acks alike).
# Both hosts get the same setting, as operators set it cluster-wide. Cases:
#   rerail-tc   RERAIL_IB_TC=106                 DSCP 26 on every RoCE packet, no other
#   nccl-tc     NCCL_IB_TC=106 only              the same (RERAIL_IB_TC defaults to it)
#   comm-class  the communicator's trafficClass 106 (HNET_TRAFFIC_CLASS: the harness's
#               ncclNetCommConfig at init, net v11+), no variable: the same
#   none        nothing set                      DSCP 0: no packet counted as 26, so the
#               counters do tell the classes apart
# usage: verbs_qos.sh HARNESS PLUGIN_DIR
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2
work=$(mktemp -d /tmp/verbs-qos.XXXXXX)
fails=0
ok()  { echo "verbs_qos: ok   - $*"; }
bad() { echo "verbs_qos: FAIL - $*"; fails=$((fails + 1)); }

export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 NCCL_DEBUG=WARN
unset RERAIL_IB_TC NCCL_IB_TC HNET_TRAFFIC_CLASS

nics='{ "vethA0", "vethA1", "vethB0", "vethB1" }'
counters_on() {
  nft -f - <<EOF
add table inet rrqos
add chain inet rrqos input { type filter hook input priority -10; policy accept; }
add rule inet rrqos input iifname $nics udp dport 4791 ip dscp 26 counter comment "dscp26"
add rule inet rrqos input iifname $nics udp dport 4791 ip dscp != 26 counter comment "other"
EOF
}
# packets NAME: what the counter named NAME (its rule's comment) saw.
packets() {
  nft list chain inet rrqos input |
    awk -v c="\"$1\"" 'index($0, c) { for (i = 1; i < NF; i++) if ($i == "packets") print $(i + 1) }'
}

# run NAME WANT_DSCP26 [VAR=VALUE...]: checked traffic A -> B with the variables on both hosts.
run() {
  local name=$1 want=$2 t0=$SECONDS
  shift 2
  mkdir -p "$work/$name/rdv"
  counters_on || { bad "$name: nftables counters could not be set up"; return; }
  local common=(--rendezvous "$work/$name/rdv" --conns 1 --inflight 2 --sizes 64,4096,65536,1M --iters 8
                --timeout 60)
  env "$@" RERAIL_SOCKET_IFNAME==vethB0,vethB1 RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-qos-B \
    "$HARNESS" --role server "${common[@]}" >"$work/$name/server.log" 2>&1 &
  local server=$!
  env "$@" RERAIL_SOCKET_IFNAME==vethA0,vethA1 RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-qos-A \
    "$HARNESS" --role client "${common[@]}" >"$work/$name/client.log" 2>&1
  local crc=$?
  wait "$server"; local src=$?
  local d26 other
  d26=$(packets dscp26) other=$(packets other)
  nft delete table inet rrqos
  local what="${*:-nothing set}: ${d26:-?} RoCE packet(s) with DSCP 26, ${other:-?} with another ($((SECONDS - t0)) s)"
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
    bad "$name: client exit $crc, server exit $src ($what)"
    for side in client server; do echo "---- $name $side.log (tail)"; tail -n 8 "$work/$name/$side.log"; done
  elif [ "$want" = 26 ] && [ "${d26:-0}" -gt 0 ] && [ "${other:-1}" -eq 0 ]; then ok "$name: $what"
  elif [ "$want" = 0 ] && [ "${other:-0}" -gt 0 ] && [ "${d26:-1}" -eq 0 ]; then ok "$name: $what"
  else bad "$name: $what (want every one with DSCP $want)"; fi
}

run rerail-tc 26 RERAIL_IB_TC=106
run nccl-tc 26 NCCL_IB_TC=106
run comm-class 26 HNET_TRAFFIC_CLASS=106
run none 0

echo "verbs_qos: $fails failure(s)"
exit $((fails != 0))
