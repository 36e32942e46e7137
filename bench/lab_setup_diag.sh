# Sourced by benchmarks that set many connections up inside the Soft-RoCE lab: what the guest
# kernel's TCP stack says while out-of-band setup sockets wait for an answer. In the lab the
# setup of both "hosts" goes over `lo` in one kernel, so every SYN a connector sends and every
# SYN-ACK a listener returns is counted here.
#   setup_diag_counters          one line: the SYN and listen-queue counters (nstat, absolute),
#                                softnet drops and the conntrack count (where loaded)
#   setup_diag_full              everything the first line says, plus the sysctls that bound the
#                                queues, socket totals, and for every connector stuck in SYN-SENT
#                                with retransmissions its listener's queue (ss -lnt)
#   setup_diag_watch PID OUT     in the background while PID lives: every 2 s, the first time a
#                                connect has retransmitted its SYN twice (~3 s unanswered on a
#                                quiet stack), writes setup_diag_full to OUT once
# Both watchers hold OUT.busy while they write: a caller that stops them waits for it to go.
# shellcheck shell=bash

setup_diag_counters() {
  local c
  c=$(nstat -az 2>/dev/null | awk '
    $1 ~ /^TcpExt(ListenOverflows|ListenDrops|TCPReqQFullDrop|TCPReqQFullDoCookies|SyncookiesSent|SyncookiesRecv|SyncookiesFailed|TCPBacklogDrop|TCPTimeWaitOverflow|TCPOrphanQueued|TCPAbortOnMemory|TCPMemoryPressures|TCPSynRetrans)$/ ||
    $1 ~ /^Tcp(ActiveOpens|PassiveOpens|AttemptFails|RetransSegs)$/ {sub(/^TcpExt|^Tcp/, "", $1); printf "%s=%s ", $1, $2}')
  # softnet_stat: per CPU, the second column counts packets dropped because the CPU's input
  # backlog (net.core.netdev_max_backlog) was full; lo and veth deliver through it.
  local drops=0 d
  while read -r _ d _; do drops=$((drops + 16#$d)); done </proc/net/softnet_stat
  local ct=unloaded
  [ -r /proc/sys/net/netfilter/nf_conntrack_count ] && ct=$(cat /proc/sys/net/netfilter/nf_conntrack_count)
  echo "${c}softnet_dropped=$drops conntrack=$ct"
}

setup_diag_full() {
  echo "== $(cut -d' ' -f1 /proc/uptime) s: $(setup_diag_counters)"
  echo "== sysctl: $(sysctl -n net.core.somaxconn net.ipv4.tcp_max_syn_backlog net.ipv4.tcp_syncookies \
    net.core.netdev_max_backlog net.ipv4.tcp_syn_retries 2>/dev/null | tr '\n' ' ') \
    (somaxconn max_syn_backlog syncookies netdev_max_backlog syn_retries); ports $(sysctl -n net.ipv4.ip_local_port_range | tr '\t' -)"
  echo "== ss -s"; ss -s 2>/dev/null | head -8
  local stuck
  stuck=$(ss -Htno state syn-sent 2>/dev/null)
  echo "== SYN-SENT sockets: $(printf '%s' "$stuck" | grep -c .) (5 with the most retransmissions below)"
  printf '%s\n' "$stuck" | awk '{n = 0; if (match($0, /timer:\(on,[^,]*,[0-9]+\)/)) {t = substr($0, RSTART, RLENGTH); sub(/.*,/, "", t); n = t + 0} print n, $0}' |
    sort -rn | head -5
  local port
  for port in $(printf '%s\n' "$stuck" | awk '{print $4}' | sed -n 's/.*:\([0-9]*\)$/\1/p' | sort -u | head -5); do
    echo "== listener :$port (State Recv-Q Send-Q; Recv-Q = connections waiting for accept(2))"
    ss -Hltn "( sport = :$port )" 2>/dev/null || true
    echo "   sockets to :$port: $(ss -Htan "( dport = :$port )" 2>/dev/null | awk '{print $1}' | sort | uniq -c | tr '\n' ' ')"
  done
  echo "== listeners with a non-empty accept queue: $(ss -Hltn 2>/dev/null | awk '$2 > 0' | wc -l) of $(ss -Hltn 2>/dev/null | wc -l)"
}

setup_diag_watch() {
  local pid=$1 out=$2 worst
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    worst=$(ss -Htno state syn-sent 2>/dev/null |
      awk 'match($0, /timer:\(on,[^,]*,[0-9]+\)/) {t = substr($0, RSTART, RLENGTH); sub(/.*,/, "", t); sub(/\)/, "", t); if (t + 0 > m) m = t + 0} END {print m + 0}')
    if [ "${worst:-0}" -ge 2 ]; then
      : >"$out.busy"
      setup_diag_full >"$out" 2>&1
      rm -f "$out.busy"
      return 0
    fi
  done
}

# setup_diag_stuck_watch PID OUT: in the background while PID lives, every 3 s, the TCP
# sockets holding bytes nobody reads (established with a Recv-Q: a handshake message not
# taken) and the listeners holding connections nobody accepts (a listener's Recv-Q). The
# first time one stays so for four samples running (9-12 s; a healthy setup takes its
# messages within one sweep over the connections), writes to OUT: those sockets, every socket
# on their port with its owner, and setup_diag_full. This tells a connector whose listener
# never read its message from one whose message never arrived.
setup_diag_stuck_watch() {
  local pid=$1 out=$2 key cur stuck
  declare -A age=() next=()
  while kill -0 "$pid" 2>/dev/null; do
    sleep 3
    cur=$({ ss -Htn state established 2>/dev/null | awk '$1 > 0 {print "unread:" $3 ">" $4}'
            ss -Hltn 2>/dev/null | awk '$2 > 0 {print "unaccepted:" $4}'; })
    next=()
    for key in $cur; do next[$key]=$((${age[$key]:-0} + 1)); done
    age=()
    stuck=""
    for key in "${!next[@]}"; do
      age[$key]=${next[$key]}
      [ "${next[$key]}" -ge 4 ] && stuck="$stuck $key"
    done
    [ -z "$stuck" ] && continue
    : >"$out.busy" # the caller waits for the dump rather than cut it short
    {
      echo "== $(cut -d' ' -f1 /proc/uptime) s: left for four samples (9-12 s):$stuck"
      local port
      for port in $(tr ' ' '\n' <<<"$stuck" | grep . | head -5 | sed -E 's/^[a-z]+:[^>]*:([0-9]+)(>.*)?$/\1/' | sort -u); do
        echo "== every socket on :$port (State Recv-Q Send-Q Local Peer Process)"
        ss -Htanp "( sport = :$port or dport = :$port )" 2>/dev/null | sed -E 's/users:\(\("([^"]*)",pid=([0-9]+),fd=([0-9]+)\)\)/\1 pid \2 fd \3/'
      done
      setup_diag_full
    } >"$out" 2>&1
    rm -f "$out.busy"
    return 0
  done
}
