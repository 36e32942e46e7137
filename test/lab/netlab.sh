#!/usr/bin/env bash
# shellcheck disable=SC2015
# netlab.sh -- the rerail network lab (design.md section 8).
#
# Hosts and rails out of network namespaces and veth pairs, so the socket transport can be
# tested against real NIC failures, slow rails and packet loss on one machine, as root.
#
# Topology for lab NAME (default $RERAIL_LAB, else "rr"), H hosts, R rails:
#   namespaces   NAME-h0 .. NAME-h{H-1}   one per host
#                NAME-sw                  the "switches": one bridge per rail (br0, br1, ..., brm)
#   host h, rail r   interface  railR  in NAME-hH   10.77.R.(h+1)/24   MAC 02:77:RR:00:00:HH
#                    its peer   hH-rR  in NAME-sw   (switch port, enslaved to brR)
#   --mgmt           interface  mgmt   in NAME-hH   10.77.250.(h+1)/24 MAC 02:77:fa:00:00:HH
#                    its peer   hH-m   in NAME-sw   (enslaved to brm)
# Each rail is its own L2 segment and its own /24; there is no default route and no forwarding,
# so a socket bound to a rail address can only ever reach peers over that rail.
#
# Failures:
#   link H R down            NIC failure: `ip -n NAME-hH link set railR down` (address kept,
#                            connected route withdrawn: sends fail fast with ENETUNREACH)
#   link H R down --switch   switch port / cable failure: `ip -n NAME-sw link set hH-rR down`
#                            (railR stays admin-up but NO-CARRIER: packets silently vanish)
#   drop H R 100             silent black hole, link up (nftables table inet rerail_lab)
#   shape H R MBIT           slow rail (tbf on railR egress)
#
# Run `netlab.sh help` for the full usage.
set -Eeuo pipefail

NETLAB_SELF="$(readlink -f "${BASH_SOURCE[0]}")"
STATE_DIR=/run/rerail-lab
ADDR_PREFIX=10.77
MGMT_NET=250
NFT_TABLE=rerail_lab
MAX_HOSTS=200
MAX_RAILS=16

LAB="${RERAIL_LAB:-rr}"
UP_IN_PROGRESS=0

usage() {
  cat <<'EOF'
usage: netlab.sh [--name NAME] SUBCOMMAND [ARGS]     (NAME defaults to $RERAIL_LAB, else "rr")

  up   [--hosts H] [--rails R] [--mgmt] [--name NAME]   create the lab (cleans a stale one first)
  down [--name NAME]                                    remove everything (idempotent)
  run  [--hosts H] [--rails R] [--mgmt] [--name NAME] -- CMD...
        bring a lab up, run CMD in the root namespace, tear the lab down on any exit and
        return CMD's exit status. CMD sees RERAIL_LAB LAB_HOSTS LAB_RAILS LAB_MGMT
        LAB_ADDR_PREFIX NETLAB (path of this script), and `netlab` on its PATH.
  exec HOST CMD...                  run CMD inside host HOST's namespace (HOST = 0..H-1, or "sw")
  link HOST RAIL up|down [--switch] NIC failure/recovery of railRAIL on host HOST;
                                    --switch acts on the switch-side port hH-rR in NAME-sw instead
  shape HOST RAIL MBIT|off [--both] tbf rate limit on railRAIL egress of HOST
                                    (--both: also the switch port, i.e. traffic towards HOST)
  drop HOST RAIL PERCENT|off        drop PERCENT% of IPv4/IPv6 packets in each direction on
                                    railRAIL of HOST (100 = silent black hole, link stays up)
  addr HOST RAIL                    print the address of HOST on RAIL
  port HOST RAIL                    print "NAME-sw hH-rR": namespace and device of the switch port
  ns HOST                           print the namespace name of HOST
  status                            show namespaces, links, addresses, qdiscs and drop rules

  RAIL is a rail index 0..R-1, or "mgmt" (when the lab has --mgmt).
  Addresses: host h on rail r = 10.77.r.(h+1)/24; mgmt = 10.77.250.(h+1)/24.
EOF
}

die() { echo "netlab: error: $*" >&2; exit 1; }
note() { echo "netlab: $*" >&2; }

on_err() {
  local rc=$1 line=$2 cmd=$3
  trap - ERR
  echo "netlab: error: command failed (rc=$rc, line $line): $cmd" >&2
  if (( UP_IN_PROGRESS )); then
    UP_IN_PROGRESS=0
    note "cleaning up partially created lab '$LAB'"
    lab_down >/dev/null 2>&1 || true
  fi
  exit "$rc"
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

need_root() {
  [[ ${EUID:-$(id -u)} -eq 0 ]] ||
    die "netlab.sh needs root (it creates network namespaces, veth pairs, qdiscs and nftables rules); run it with sudo or as root"
}

check_name() {
  [[ $1 =~ ^[A-Za-z][A-Za-z0-9_]{0,15}$ ]] ||
    die "bad lab name '$1' (letters, digits, '_', starting with a letter, at most 16 characters)"
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

host_ns() { echo "$LAB-h$1"; }
sw_ns() { echo "$LAB-sw"; }
state_file() { echo "$STATE_DIR/$LAB.env"; }

# Namespaces belonging to lab $LAB (whether or not a state file exists).
lab_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${LAB}-(h[0-9]+|sw)\$" || true
}

# Load H/R/MGMT of the current lab from its state file (or from the namespaces present).
load_state() {
  LAB_HOSTS="" LAB_RAILS="" LAB_MGMT=0
  local f; f=$(state_file)
  if [[ -r $f ]]; then
    # shellcheck disable=SC1090
    . "$f"
  fi
  if [[ -z $LAB_HOSTS ]]; then
    die "lab '$LAB' is not up (no $f); run: netlab.sh up --name $LAB"
  fi
  grep -qx "$(host_ns 0)" <<<"$(ip netns list 2>/dev/null | awk '{print $1}')" ||
    die "lab '$LAB' is not up (namespace $(host_ns 0) missing); run: netlab.sh up --name $LAB"
}

check_host() {
  is_uint "$1" && (( $1 < LAB_HOSTS )) || die "bad host '$1' (lab '$LAB' has hosts 0..$((LAB_HOSTS - 1)))"
}

# Sets RAIL_DEV (host side device) and PORT_DEV (switch side device).
resolve_rail() {
  local h=$1 r=$2
  if [[ $r == mgmt || $r == m ]]; then
    (( LAB_MGMT )) || die "lab '$LAB' has no mgmt network (bring it up with --mgmt)"
    RAIL_DEV=mgmt PORT_DEV="h$h-m"
  else
    is_uint "$r" && (( r < LAB_RAILS )) || die "bad rail '$r' (lab '$LAB' has rails 0..$((LAB_RAILS - 1)) and maybe 'mgmt')"
    RAIL_DEV="rail$r" PORT_DEV="h$h-r$r"
  fi
}

# ---------------------------------------------------------------- down
kill_ns_pids() {
  local ns=$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
  [[ -z ${pids// /} ]] && return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  local _
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
    [[ -z ${pids// /} ]] && return 0
    sleep 0.05
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

lab_down() {
  local ns
  for ns in $(lab_namespaces); do kill_ns_pids "$ns"; done
  for ns in $(lab_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -f "$(state_file)"
  rm -rf "${STATE_DIR:?}/$LAB.bin"
  if [[ -n $(lab_namespaces) ]]; then
    note "warning: could not remove: $(lab_namespaces | tr '\n' ' ')"
    return 1
  fi
  return 0
}

# ---------------------------------------------------------------- up
ns_sysctls() {
  # Host namespaces: no reverse-path filtering (a socket bound to one rail must not be second-
  # guessed), each interface answers ARP only for its own address and announces only it, no
  # forwarding between rails, IPv6 off (IPv4-only lab: no DAD/RS noise, no link-local routes).
  ip netns exec "$1" sysctl -qw \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.default.arp_ignore=1 \
    net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.default.arp_announce=2 \
    net.ipv4.ip_forward=0 \
    net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null
}

mac_for() { printf '02:77:%02x:00:%02x:%02x' "$1" $(( ($2 + 1) >> 8 )) $(( ($2 + 1) & 255 )); }

# add_port HOST NET_OCTET HOSTDEV PORTDEV BRIDGE
add_port() {
  local h=$1 net=$2 dev=$3 port=$4 br=$5 hns sw
  hns=$(host_ns "$h") sw=$(sw_ns)
  ip -n "$sw" link add "$port" type veth peer name "$dev" netns "$hns"
  ip -n "$sw" link set "$port" master "$br"
  ip -n "$sw" link set "$port" up
  ip -n "$hns" link set "$dev" address "$(mac_for "$net" "$h")"
  ip -n "$hns" addr add "$ADDR_PREFIX.$net.$((h + 1))/24" dev "$dev"
  # ARP retries every 100 ms instead of the kernel's 1 s: a neighbour that failed to resolve
  # while its link was down resolves within ~100 ms of the heal, as on a fabric tuned for fast
  # recovery (with the 1 s default, a healed rail can stay unreachable for up to a second).
  ip netns exec "$hns" sysctl -qw "net.ipv4.neigh.$dev.retrans_time_ms=100" >/dev/null
  ip -n "$hns" link set "$dev" up
}

add_bridge() {
  local sw; sw=$(sw_ns)
  ip -n "$sw" link add "$1" type bridge stp_state 0 forward_delay 0 mcast_snooping 0
  ip -n "$sw" link set "$1" up
}

lab_up() {
  local hosts=$1 rails=$2 mgmt=$3 h r sw
  is_uint "$hosts" && (( hosts >= 1 && hosts <= MAX_HOSTS )) || die "--hosts must be 1..$MAX_HOSTS"
  is_uint "$rails" && (( rails >= 1 && rails <= MAX_RAILS )) || die "--rails must be 1..$MAX_RAILS"
  if [[ -n $(lab_namespaces) || -e $(state_file) ]]; then
    note "removing stale lab '$LAB'"
    lab_down >/dev/null || die "could not remove stale lab '$LAB'"
  fi
  UP_IN_PROGRESS=1
  sw=$(sw_ns)
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip netns exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null
  for (( h = 0; h < hosts; h++ )); do
    ip netns add "$(host_ns "$h")"
    ip -n "$(host_ns "$h")" link set lo up
    ns_sysctls "$(host_ns "$h")"
  done
  for (( r = 0; r < rails; r++ )); do
    add_bridge "br$r"
    for (( h = 0; h < hosts; h++ )); do add_port "$h" "$r" "rail$r" "h$h-r$r" "br$r"; done
  done
  if (( mgmt )); then
    add_bridge brm
    for (( h = 0; h < hosts; h++ )); do add_port "$h" "$MGMT_NET" mgmt "h$h-m" brm; done
  fi
  mkdir -p "$STATE_DIR"
  cat >"$(state_file)" <<EOF
LAB_HOSTS=$hosts
LAB_RAILS=$rails
LAB_MGMT=$mgmt
EOF
  UP_IN_PROGRESS=0
  echo "netlab: lab '$LAB' up: $hosts hosts x $rails rails$( (( mgmt )) && echo " + mgmt")"
  for (( h = 0; h < hosts; h++ )); do
    local line
    line="  host $h  ns $(host_ns "$h"):"
    for (( r = 0; r < rails; r++ )); do line+="  rail$r=$ADDR_PREFIX.$r.$((h + 1))"; done
    (( mgmt )) && line+="  mgmt=$ADDR_PREFIX.$MGMT_NET.$((h + 1))"
    echo "$line"
  done
  echo "  switch ns $sw: bridges br0..br$((rails - 1))$( (( mgmt )) && echo ", brm"); port of host h rail r = hH-rR (mgmt: hH-m)"
}

# ---------------------------------------------------------------- run
RUN_CHILD="" RUN_SIGNAL=""
# PID and all its descendants (parents first).
proc_tree() {
  local p
  echo "$1"
  for p in $(pgrep -P "$1" 2>/dev/null || true); do proc_tree "$p"; done
}
run_on_signal() {
  RUN_SIGNAL=$1
  if [[ -n $RUN_CHILD ]]; then
    # shellcheck disable=SC2046
    kill -TERM $(proc_tree "$RUN_CHILD") 2>/dev/null || true
  fi
}

lab_run() {
  local hosts=$1 rails=$2 mgmt=$3; shift 3
  (( $# > 0 )) || die "run: no command given (usage: netlab.sh run [options] -- CMD...)"
  trap 'trap - ERR; lab_down >/dev/null 2>&1 || true' EXIT
  trap 'run_on_signal INT' INT
  trap 'run_on_signal TERM' TERM
  lab_up "$hosts" "$rails" "$mgmt"
  mkdir -p "$STATE_DIR/$LAB.bin"
  ln -sf "$NETLAB_SELF" "$STATE_DIR/$LAB.bin/netlab"
  ln -sf "$NETLAB_SELF" "$STATE_DIR/$LAB.bin/netlab.sh"
  export RERAIL_LAB="$LAB" LAB_HOSTS="$hosts" LAB_RAILS="$rails" LAB_MGMT="$mgmt"
  export LAB_ADDR_PREFIX="$ADDR_PREFIX" NETLAB="$NETLAB_SELF"
  export PATH="$STATE_DIR/$LAB.bin:$PATH"
  # Background + wait so that TERM/INT reach us (and are forwarded) while CMD runs; stdin is
  # passed on explicitly (a non-interactive shell would otherwise give a background job /dev/null).
  local rc=0
  "$@" <&0 &
  RUN_CHILD=$!
  while :; do
    rc=0
    wait "$RUN_CHILD" || rc=$?
    if (( rc > 128 )) && kill -0 "$RUN_CHILD" 2>/dev/null; then continue; fi
    break
  done
  RUN_CHILD=""
  if [[ -n $RUN_SIGNAL ]]; then
    note "got SIG$RUN_SIGNAL; tearing lab '$LAB' down"
    [[ $RUN_SIGNAL == INT ]] && rc=130 || rc=143
  fi
  exit "$rc"
}

# ---------------------------------------------------------------- link / shape / drop
lab_link() {
  local h=$1 r=$2 state=$3 where=$4
  [[ $state == up || $state == down ]] || die "link: state must be up or down"
  check_host "$h"; resolve_rail "$h" "$r"
  if [[ $where == switch ]]; then
    ip -n "$(sw_ns)" link set "$PORT_DEV" "$state"
  else
    ip -n "$(host_ns "$h")" link set "$RAIL_DEV" "$state"
  fi
}

shape_dev() {
  local ns=$1 dev=$2 rate=$3 burst
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  [[ $rate == off ]] && return 0
  # burst: 10 ms worth of tokens, but at least 128 KiB so that a 64 KiB GSO/TSO super-packet
  # from the veth never waits for a second refill (a single TCP stream then reaches ~RATE);
  # latency 50 ms bounds the queue (limit = rate * 50 ms + burst).
  burst=$(( rate * 1000000 / 8 / 100 ))
  (( burst < 131072 )) && burst=131072
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "${rate}mbit" burst "$burst" latency 50ms
}

lab_shape() {
  local h=$1 r=$2 rate=$3 both=$4
  check_host "$h"; resolve_rail "$h" "$r"
  [[ $rate == off ]] || { is_uint "$rate" && (( rate >= 1 && rate <= 100000 )); } ||
    die "shape: rate must be 1..100000 (Mbit/s) or off"
  shape_dev "$(host_ns "$h")" "$RAIL_DEV" "$rate"
  if (( both )) || [[ $rate == off ]]; then shape_dev "$(sw_ns)" "$PORT_DEV" "$rate"; fi
}

lab_drop() {
  local h=$1 r=$2 pct=$3 ns
  check_host "$h"; resolve_rail "$h" "$r"
  ns=$(host_ns "$h")
  [[ $pct == off ]] || { is_uint "$pct" && (( pct <= 100 )); } || die "drop: percent must be 0..100 or off"
  [[ $pct == 0 ]] && pct=off
  local cin="${RAIL_DEV}_in" cout="${RAIL_DEV}_out"
  if [[ $pct == off ]]; then
    local c
    for c in "$cin" "$cout"; do
      if ip netns exec "$ns" nft list chain inet "$NFT_TABLE" "$c" >/dev/null 2>&1; then
        ip netns exec "$ns" nft delete chain inet "$NFT_TABLE" "$c"
      fi
    done
    if ip netns exec "$ns" nft list table inet "$NFT_TABLE" >/dev/null 2>&1 &&
       ! grep -q 'chain ' <<<"$(ip netns exec "$ns" nft list table inet "$NFT_TABLE")"; then
      ip netns exec "$ns" nft delete table inet "$NFT_TABLE"
    fi
    return 0
  fi
  # One input and one output base chain per rail, replaced atomically. IP-level only: ARP still
  # works, so at 100% the neighbour stays REACHABLE and the failure is truly silent.
  # numgen random mod 100 yields 0..99; nft refuses "< 100", so 100% is written "<= 99".
  local cond="< $pct"
  (( pct == 100 )) && cond="<= 99"
  ip netns exec "$ns" nft -f - <<EOF
add table inet $NFT_TABLE
add chain inet $NFT_TABLE $cin { type filter hook input priority 0; policy accept; }
add chain inet $NFT_TABLE $cout { type filter hook output priority 0; policy accept; }
flush chain inet $NFT_TABLE $cin
flush chain inet $NFT_TABLE $cout
add rule inet $NFT_TABLE $cin iifname "$RAIL_DEV" numgen random mod 100 $cond counter drop
add rule inet $NFT_TABLE $cout oifname "$RAIL_DEV" numgen random mod 100 $cond counter drop
EOF
}

# ---------------------------------------------------------------- status
lab_status() {
  local nss ns f
  nss=$(lab_namespaces)
  if [[ -z $nss ]]; then echo "netlab: lab '$LAB' is down"; return 0; fi
  f=$(state_file)
  if [[ -r $f ]]; then
    # shellcheck disable=SC1090
    . "$f"
    echo "netlab: lab '$LAB': $LAB_HOSTS hosts x $LAB_RAILS rails, mgmt=$LAB_MGMT"
  else
    echo "netlab: lab '$LAB': (no state file $f)"
  fi
  for ns in $nss; do
    echo "== $ns"
    ip -n "$ns" -br link show | sed 's/^/  link  /'
    ip -n "$ns" -br -4 addr show | grep -v '^lo ' | sed 's/^/  addr  /' || true
    ip netns exec "$ns" tc qdisc show | grep -E ' (tbf|htb|netem) ' | sed 's/^/  tc    /' || true
    if ip netns exec "$ns" nft list table inet "$NFT_TABLE" >/dev/null 2>&1; then
      ip netns exec "$ns" nft list table inet "$NFT_TABLE" | grep -E 'numgen' | sed 's/^[[:space:]]*/  drop  /' || true
    fi
  done
}

# ---------------------------------------------------------------- main
main() {
  # Global --name before the subcommand.
  while [[ $# -gt 0 && $1 == --name ]]; do
    [[ $# -ge 2 ]] || die "--name needs a value"
    LAB=$2; shift 2
  done
  local cmd=${1:-help}; [[ $# -gt 0 ]] && shift

  case $cmd in
    help|-h|--help) usage; return 0 ;;
  esac

  local hosts=2 rails=2 mgmt=0 switch=0 both=0
  local -a pos=()
  case $cmd in
    up|run|down|status)
      while [[ $# -gt 0 ]]; do
        case $1 in
          --hosts) [[ $# -ge 2 ]] || die "--hosts needs a value"; hosts=$2; shift 2 ;;
          --rails) [[ $# -ge 2 ]] || die "--rails needs a value"; rails=$2; shift 2 ;;
          --mgmt) mgmt=1; shift ;;
          --name) [[ $# -ge 2 ]] || die "--name needs a value"; LAB=$2; shift 2 ;;
          --) shift; break ;;
          *) [[ $cmd == run ]] && die "run: unknown option '$1' (put the command after --)"
             die "$cmd: unknown argument '$1'" ;;
        esac
      done
      if [[ $cmd != run && $# -gt 0 ]]; then die "$cmd: unexpected arguments: $*"; fi
      if [[ $cmd != up && $cmd != run ]] && [[ $hosts != 2 || $rails != 2 || $mgmt != 0 ]]; then
        die "$cmd: --hosts/--rails/--mgmt only apply to up and run"
      fi
      ;;
    exec|ns)
      while [[ $# -gt 0 && $1 == --name ]]; do LAB=${2:?--name needs a value}; shift 2; done
      ;;
    link|shape|drop|addr|port)
      while [[ $# -gt 0 ]]; do
        case $1 in
          --name) [[ $# -ge 2 ]] || die "--name needs a value"; LAB=$2; shift 2 ;;
          --switch|--peer) switch=1; shift ;;
          --both) both=1; shift ;;
          -*) die "$cmd: unknown option '$1'" ;;
          *) pos+=("$1"); shift ;;
        esac
      done
      ;;
    *) usage >&2; die "unknown subcommand '$cmd'" ;;
  esac
  check_name "$LAB"

  case $cmd in
    addr|port|ns)
      # Pure naming helpers: no root, no running lab needed.
      local h=${pos[0]:-${1:-}} r=${pos[1]:-}
      is_uint "$h" || die "$cmd: HOST must be a number"
      case $cmd in
        ns) host_ns "$h" ;;
        addr|port)
          [[ -n $r ]] || die "usage: netlab.sh $cmd HOST RAIL"
          local net port
          if [[ $r == mgmt || $r == m ]]; then net=$MGMT_NET port="h$h-m"
          else is_uint "$r" || die "$cmd: RAIL must be a number or mgmt"; net=$r port="h$h-r$r"; fi
          if [[ $cmd == addr ]]; then echo "$ADDR_PREFIX.$net.$((h + 1))"; else echo "$(sw_ns) $port"; fi ;;
      esac
      return 0 ;;
  esac

  need_root
  case $cmd in
    up) lab_up "$hosts" "$rails" "$mgmt" ;;
    down) lab_down; echo "netlab: lab '$LAB' down" ;;
    run) lab_run "$hosts" "$rails" "$mgmt" "$@" ;;
    status) lab_status ;;
    exec)
      [[ $# -ge 2 ]] || die "usage: netlab.sh exec HOST CMD..."
      local h=$1; shift
      if [[ $h == sw ]]; then exec ip netns exec "$(sw_ns)" "$@"; fi
      load_state; check_host "$h"
      exec ip netns exec "$(host_ns "$h")" "$@" ;;
    link)
      [[ ${#pos[@]} -eq 3 ]] || die "usage: netlab.sh link HOST RAIL up|down [--switch]"
      load_state
      lab_link "${pos[0]}" "${pos[1]}" "${pos[2]}" "$( (( switch )) && echo switch || echo host)" ;;
    shape)
      [[ ${#pos[@]} -eq 3 ]] || die "usage: netlab.sh shape HOST RAIL MBIT|off [--both]"
      load_state
      lab_shape "${pos[0]}" "${pos[1]}" "${pos[2]}" "$both" ;;
    drop)
      [[ ${#pos[@]} -eq 3 ]] || die "usage: netlab.sh drop HOST RAIL PERCENT|off"
      load_state
      lab_drop "${pos[0]}" "${pos[1]}" "${pos[2]}" ;;
  esac
}

main "$@"
