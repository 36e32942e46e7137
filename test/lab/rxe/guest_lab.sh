#!/bin/bash
# Second stage of the rxe lab, inside the guest (PID 1, chrooted into the overlay of the host's
# root): build the two rails, run the job's command, report its status, power off.
#
#   rail R (0, 1):  vethAR 10.55.R.1 MAC 02:55:0R:00:00:0a  (rdma device rxeR,   "host" A)
#                   vethBR 10.55.R.2 MAC 02:55:0R:00:00:0b  (rdma device rxe(R+2), "host" B)
#   each NIC's cable ends in a switch port: vethAR <-> swAR and vethBR <-> swBR, both ports in
#   bridge brR, so one NIC going down leaves the other end's link (and rxe port) up, as on a
#   switched fabric.
#
# Everything is in one network namespace (rxe binds its UDP socket in the initial namespace
# only), so three things keep RoCE traffic on the wire between A and B:
#  - per-interface policy routes (`ip rule oif DEV`, the `local` table demoted to pref 500):
#    rxe looks its routes up bound to its netdev, so they leave through the veth, not `lo`;
#  - rp_filter off and accept_local on: packets from a local address arrive on the other veth;
#  - permanent neighbour entries, the peer's and each interface's own address: no ARP, so a
#    link that goes down and up has nothing to re-learn, and a QP whose destination is its own
#    device does not time out ARPing for itself.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
JOB=/run/rxelab
finish() { echo "$1" >"$JOB/rc"; sync; echo b >/proc/sysrq-trigger; sleep 10; }
trap 'finish 125' EXIT

MTU=$(cat "$JOB/mtu" 2>/dev/null || echo 1500)
ulimit -l unlimited
hostname rxelab

sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
  net.ipv4.conf.all.accept_local=1 net.ipv4.conf.default.accept_local=1 \
  net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null ||
  { echo "rxelab: sysctl failed"; exit 125; }

# One batch for ip and one for rdma: each program start costs ~0.1 s under TCG.
ipb=/run/rxelab-ip.batch rdb=/run/rxelab-rdma.batch restore=/run/rxelab-restore
mkdir -p "$restore"
{
  echo "link set lo up"
  echo "rule del pref 0 lookup local"
  echo "rule add pref 500 lookup local"
  for r in 0 1; do
    echo "link add br$r mtu $MTU type bridge stp_state 0 forward_delay 0"
    echo "link set br$r up"
    for s in A B; do
      if [[ $s == A ]]; then h=1 mac=02:55:0$r:00:00:0a pmac=02:55:0$r:00:00:0b ph=2
      else h=2 mac=02:55:0$r:00:00:0b pmac=02:55:0$r:00:00:0a ph=1; fi
      t=$((100 + r * 2 + h))
      echo "link add veth$s$r address $mac mtu $MTU type veth peer name sw$s$r mtu $MTU"
      echo "link set sw$s$r master br$r"
      echo "link set sw$s$r up"
      echo "addr add 10.55.$r.$h/24 dev veth$s$r"
      echo "link set veth$s$r up"
      echo "rule add pref 10 oif veth$s$r lookup $t"
      # What an admin down deletes (routes and neighbours, permanent ones included): kept per
      # interface so the link watcher below can put it back when the link comes up.
      {
        echo "route replace 10.55.$r.0/24 dev veth$s$r src 10.55.$r.$h table $t"
        echo "neigh replace 10.55.$r.$ph lladdr $pmac dev veth$s$r nud permanent"
        echo "neigh replace 10.55.$r.$h lladdr $mac dev veth$s$r nud permanent"
      } >"$restore/veth$s$r"
      cat "$restore/veth$s$r"
    done
  done
} >"$ipb"
for r in 0 1; do
  echo "link add rxe$r type rxe netdev vethA$r"
  echo "link add rxe$((r + 2)) type rxe netdev vethB$r"
done >"$rdb"
ip -b "$ipb" || { echo "rxelab: network setup failed"; exit 125; }
for d in /proc/sys/net/ipv4/conf/veth*; do echo 0 >"$d/rp_filter"; echo 1 >"$d/accept_local"; done
rdma -b "$rdb" || { echo "rxelab: rdma link add failed"; exit 125; }

# `ip link set vethXR down` flushes the rail's policy route and pinned neighbours; when the
# link is up again (admin up and carrier) they are restored, so a plain `ip link set ... up`
# brings the rail back as a real NIC would. `rxefault link ... up` restores synchronously.
ip -o monitor link | while read -r _ dev rest; do
  dev=${dev%%@*}; dev=${dev%:}
  [[ -f "$restore/$dev" && $rest == *LOWER_UP* ]] && ip -b "$restore/$dev" >/dev/null 2>&1
done &
install -m 755 "$JOB/rxefault.sh" /usr/local/sbin/rxefault
export RXELAB=1 RXELAB_MTU=$MTU RXELAB_A_DEVS="rxe0 rxe1" RXELAB_B_DEVS="rxe2 rxe3" \
  RXELAB_A_ADDRS="10.55.0.1 10.55.1.1" RXELAB_B_ADDRS="10.55.0.2 10.55.1.2" \
  RXELAB_A_IFS="vethA0 vethA1" RXELAB_B_IFS="vethB0 vethB1" RXELAB_GID_INDEX=1
echo "rxelab: lab up after $(cut -d' ' -f1 /proc/uptime) s (rxe0 rxe1 = A, rxe2 rxe3 = B, MTU $MTU)"
bash "$JOB/cmd.sh" </dev/null
rc=$?
trap - EXIT
finish "$rc"
