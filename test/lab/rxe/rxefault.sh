#!/bin/bash
# rxefault -- faults for the rxe lab, run inside the guest (installed on PATH by guest_lab.sh).
#   rxefault link RAIL down|up [A|B]   NIC failure/recovery: ip link set vethXR down|up
#                                      (X = A by default). rxe's port goes DOWN (IBV_EVENT_PORT_ERR
#                                      ~0.1 s later) on that NIC only; addresses and pinned
#                                      neighbours stay.
#   rxefault cable RAIL down|up [A|B]  the cable/switch port: ip link set swXR down|up; vethXR
#                                      stays admin-up with NO-CARRIER (its rxe port goes DOWN).
#   rxefault drop RAIL on|off          silent rail: nftables drops RoCE v2 (UDP 4791) arriving on
#                                      either end of rail RAIL; links and ports stay ACTIVE.
set -euo pipefail
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 3 && $2 =~ ^[01]$ ]] || usage
rail=$2
case $1 in
  link|cable)
    side=${4:-A}; [[ $side == A || $side == B ]] || usage
    [[ $3 == up || $3 == down ]] || usage
    if [[ $1 == link ]]; then ip link set "veth$side$rail" "$3"; else ip link set "sw$side$rail" "$3"; fi
    # Routes and pinned neighbours back at once (the lab's link watcher would, a moment later).
    if [[ $3 == up ]]; then
      for s in A B; do ip -b "/run/rxelab-restore/veth$s$rail" >/dev/null 2>&1 || true; done
    fi ;;
  drop)
    case $3 in
      on)
        nft add table inet rxelab
        nft add chain inet rxelab input '{ type filter hook input priority 0; policy accept; }'
        nft add rule inet rxelab input iifname "{ vethA$rail, vethB$rail }" udp dport 4791 drop \
          comment "\"rail$rail\"" ;;
      off)
        nft -a list chain inet rxelab input 2>/dev/null |
          awk -v c="\"rail$rail\"" '$0 ~ c {print $NF}' |
          while read -r h; do nft delete rule inet rxelab input handle "$h"; done ;;
      *) usage ;;
    esac ;;
  *) usage ;;
esac
