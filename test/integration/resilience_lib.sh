# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are read by the scripts that source it
# Shared by resilience_chaos.sh, resilience_edges.sh and bench/failover_bench.sh
# (sourced, not run): a network lab (test/lab/netlab.sh) with the NCCL-faithful
# harness running as two "hosts" in it, faults injected with timestamps, and
# helpers that read the harness's JSON summary (--stall-report, --timeline).
#
# Expects PLUGIN_DIR and HARNESS set. Uses test/harness/harness_lib.sh for the
# PASS/FAIL bookkeeping ($WORK, pass, fail, finish). Needs root (network
# namespaces): without it, it fails (exit 1), as every lab test does.
#
#   RERAIL_TEST_SCALE   multiplies every duration (default 1; CI's sanitizer pass
#                       sets 0.25)
#   KEEP_LOGS=1         keep the work directory (logs) even when everything passed

RES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RES_TOP="$(cd "$RES_DIR/../.." && pwd)"
NETLAB_SH="$RES_TOP/test/lab/netlab.sh"

# Lab tests must run (CI is root) and fail loudly where they cannot.
if [ "$(id -u)" -ne 0 ]; then
  echo "FAIL: the network lab needs root (network namespaces)" >&2
  exit 1
fi
for tool in ip nft tc python3; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (tools/install-deps.sh)" >&2; exit 1; }
done

# shellcheck source=../harness/harness_lib.sh disable=SC1091
. "$RES_TOP/test/harness/harness_lib.sh"
# The lab's rails, not loopback.
export RERAIL_SOCKET_IFNAME=rail RERAIL_LOG_LEVEL=warn
unset NCCL_DEBUG RERAIL_PROGRESS_TIMEOUT RERAIL_FAILBACK_HOLD RERAIL_BACKUPS RERAIL_FAILOVER \
  RERAIL_DEGRADED_PCT RERAIL_DEGRADED_MS RERAIL_DEGRADED_RESTORE_PCT RERAIL_DEGRADED_RETRANS_PCT \
  RERAIL_TCP_STREAMS RERAIL_CHUNK_SIZE

SCALE=${RERAIL_TEST_SCALE:-1}
awk -v s="$SCALE" 'BEGIN { exit !(s + 0 > 0) }' || { echo "bad RERAIL_TEST_SCALE '$SCALE'" >&2; exit 2; }

# scaled SECONDS [MIN]: SECONDS x scale, at least MIN
scaled() { awk -v v="$1" -v s="$SCALE" -v m="${2:-0}" 'BEGIN { x = v * s; if (x < m) x = m; printf "%.3f", x }'; }
# calc EXPR: floating-point arithmetic (awk)
calc() { awk "BEGIN { printf \"%.3f\", $* }"; }
# is_true EXPR: awk condition
is_true() { awk "BEGIN { exit !($*) }"; }
wall() { echo "$EPOCHREALTIME"; }
# us: wall-clock microseconds (integer), without a fork
us() { echo "${EPOCHREALTIME/./}"; }
# nap SECONDS: sleep without forking (read on a pipe that never has data)
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" _ || true; }

# ---- the lab -------------------------------------------------------------------

LAB=""
declare -A ANCHOR=()   # a process in each host namespace: its /proc/PID/net/dev has the counters
lab_cleanup() {
  local p
  for p in "${ANCHOR[@]}"; do kill "$p" 2>/dev/null; done
  ANCHOR=()
  [ -n "$LAB" ] && "$NETLAB_SH" --name "$LAB" down >/dev/null 2>&1
  LAB=""
}
trap 'lab_cleanup' EXIT
trap 'lab_cleanup; exit 143' TERM
trap 'lab_cleanup; exit 130' INT

# lab_start NAME HOSTS RAILS: a fresh lab, every rail able to carry a packet.
lab_start() {
  lab_cleanup
  LAB=$1
  LAB_HOSTS=$2
  LAB_RAILS=$3
  "$NETLAB_SH" --name "$LAB" up --hosts "$LAB_HOSTS" --rails "$LAB_RAILS" >"$WORK/lab-$LAB.log" 2>&1 || {
    cat "$WORK/lab-$LAB.log"
    echo "cannot bring the lab up" >&2
    exit 2
  }
  local h tries=0
  until lab_ready; do
    tries=$((tries + 1))
    [ $tries -lt 50 ] || { echo "the lab's rails did not come up" >&2; exit 2; }
    sleep 0.1
  done
  for ((h = 0; h < LAB_HOSTS; h++)); do
    ip netns exec "$(ns "$h")" sleep 1000000 &
    ANCHOR[$h]=$!
  done
}

# lab_ready: every host's rails are up with carrier and every switch port forwards.
lab_ready() {
  local h r
  for ((h = 0; h < LAB_HOSTS; h++)); do
    for ((r = 0; r < LAB_RAILS; r++)); do
      ip -n "$(ns "$h")" link show "rail$r" | grep -q 'LOWER_UP' || return 1
      ip -n "$LAB-sw" -d link show "h$h-r$r" | grep -q 'state forwarding' || return 1
    done
  done
}

ns() { echo "$LAB-h$1"; }

# Faults. Each sets T_BEFORE and T_AFTER (wall-clock seconds) around the change, and
# T_FAULT = T_AFTER (the change is in effect: the last thing each does is apply it).
# link H R up|down [switch]: the host's NIC (ip link set railR) or the switch port.
link() {
  local h=$1 r=$2 st=$3 where=${4:-host}
  T_BEFORE=$EPOCHREALTIME
  if [ "$where" = switch ]; then ip -n "$LAB-sw" link set "h$h-r$r" "$st"
  else ip -n "$(ns "$h")" link set "rail$r" "$st"; fi
  T_AFTER=$EPOCHREALTIME
  T_FAULT=$T_AFTER
}
# drop H R PCT|off [in]: drop PCT% of host H's packets on railR, both directions (100 = a
# silent black hole, link up); with `in`, only those arriving: lost in flight, as on a
# lossy cable, where a drop on the way out is a local transmit error that TCP just
# tries again, without a retransmission. The same table, chains and rules as `netlab.sh drop`
# (test/lab/README.md), loaded with one nft call so that T_BEFORE..T_AFTER brackets
# the moment they take effect (netlab.sh's own bookkeeping can take a second on a
# loaded machine); `off` goes through netlab.sh.
drop() {
  local h=$1 r=$2 pct=$3 dir=${4:-both}
  if [ "$pct" = off ] || [ "$pct" = 0 ]; then
    T_BEFORE=$EPOCHREALTIME
    "$NETLAB_SH" --name "$LAB" drop "$h" "$r" off
    T_AFTER=$EPOCHREALTIME
    T_FAULT=$T_AFTER
    return
  fi
  local cond="< $pct" t=rerail_lab d="rail$r"
  [ "$pct" -ge 100 ] && cond="<= 99"
  local rules="add table inet $t
add chain inet $t ${d}_in { type filter hook input priority 0; policy accept; }
flush chain inet $t ${d}_in
add rule inet $t ${d}_in iifname \"$d\" numgen random mod 100 $cond counter drop"
  [ "$dir" = in ] || rules+="
add chain inet $t ${d}_out { type filter hook output priority 0; policy accept; }
flush chain inet $t ${d}_out
add rule inet $t ${d}_out oifname \"$d\" numgen random mod 100 $cond counter drop"
  T_BEFORE=$EPOCHREALTIME
  ip netns exec "$(ns "$h")" nft -f - <<<"$rules"
  T_AFTER=$EPOCHREALTIME
  T_FAULT=$T_AFTER
}
# shape H R MBIT|off [--both]
shape() { "$NETLAB_SH" --name "$LAB" shape "$@"; }
# txbytes H R / rxbytes H R: bytes host H has sent / received on railR (read from
# /proc/PID/net/dev of the host's anchor process: no fork, cheap enough to poll)
dev_bytes() {
  local ifc rb tb x
  while read -r ifc rb x x x x x x x tb x; do
    [ "$ifc" = "rail$2:" ] && { [ "$3" = tx ] && echo "$tb" || echo "$rb"; return 0; }
  done <"/proc/${ANCHOR[$1]}/net/dev"
  echo 0
}
# dev_read H R tx|rx: the same into DEV_BYTES, without a subshell (for tight polling)
dev_read() {
  local ifc rb tb x
  DEV_BYTES=0
  while read -r ifc rb x x x x x x x tb x; do
    if [ "$ifc" = "rail$2:" ]; then
      if [ "$3" = tx ]; then DEV_BYTES=$tb; else DEV_BYTES=$rb; fi
      return 0
    fi
  done <"/proc/${ANCHOR[$1]}/net/dev"
}
txbytes() { dev_bytes "$1" "$2" tx; }
rxbytes() { dev_bytes "$1" "$2" rx; }

# ---- random hard faults (resilience_chaos.sh, connect_nic_down.sh) --------------
# F[kind,h,r] = 1 while that fault is in place; kinds: nic (the host's NIC down), sw
# (its switch port down), drop (a silent black hole, drop 100). Every change is logged
# to $PAIR_DIR/faults.log as "+SECONDS KIND hH railR on|off (clean rails: N)", seconds
# from $T0; NCHANGES and COUNT[kind] count them. PINNED names a fault (kind,h,r) that
# fault_step and heal_random never heal (heal_all does).
declare -A F=() COUNT=()
KINDS=(nic sw drop)
NCHANGES=0
PINNED=""
# rail_clean R: no fault of any kind on either host
rail_clean() {
  local k h
  for k in "${KINDS[@]}"; do
    for h in 0 1; do [ "${F[$k,$h,$1]:-0}" = 1 ] && return 1; done
  done
  return 0
}
clean_rails() {
  local r n=0
  for ((r = 0; r < LAB_RAILS; r++)); do rail_clean $r && n=$((n + 1)); done
  echo $n
}
# apply KIND H R on|off
apply() {
  local k=$1 h=$2 r=$3 v=$4
  case $k in
    nic) link "$h" "$r" "$([ "$v" = on ] && echo down || echo up)" ;;
    sw) link "$h" "$r" "$([ "$v" = on ] && echo down || echo up)" switch ;;
    drop) drop "$h" "$r" "$([ "$v" = on ] && echo 100 || echo off)" >/dev/null ;;
  esac
  if [ "$v" = on ]; then F[$k,$h,$r]=1; else unset "F[$k,$h,$r]"; fi
  printf '+%.3f %-4s h%d rail%d %s  (clean rails: %d)\n' "$(calc "$T_AFTER - $T0")" "$k" "$h" "$r" "$v" \
    "$(clean_rails)" >>"$PAIR_DIR/faults.log"
  NCHANGES=$((NCHANGES + 1))
  COUNT[$k]=$((${COUNT[$k]:-0} + 1))
}
# heal_random: heal one fault in place (not PINNED); 1 when there is none
heal_random() {
  local keys=() key k h r
  for key in "${!F[@]}"; do [ "$key" = "$PINNED" ] || keys+=("$key"); done
  [ ${#keys[@]} -gt 0 ] || return 1
  key=${keys[RANDOM % ${#keys[@]}]}
  IFS=, read -r k h r <<<"$key"
  apply "$k" "$h" "$r" off
}
heal_all() {
  local key k h r
  for key in "${!F[@]}"; do
    IFS=, read -r k h r <<<"$key"
    apply "$k" "$h" "$r" off
  done
}
# fault_step: one random change, 7 in 10 an injection, at most 6 faults at once, and
# never one that takes the last clean rail (at least one rail always has both hosts'
# NICs and switch ports up and drops nothing)
fault_step() {
  local k h r want
  [ $((RANDOM % 10)) -lt 7 ] || [ ${#F[@]} -eq 0 ] && want=inject || want=heal
  if [ "$want" = heal ] || [ ${#F[@]} -ge 6 ]; then heal_random && return; fi
  k=${KINDS[RANDOM % 3]} h=$((RANDOM % 2)) r=$((RANDOM % LAB_RAILS))
  if [ "$k,$h,$r" = "$PINNED" ]; then return
  elif [ "${F[$k,$h,$r]:-0}" = 1 ]; then apply "$k" "$h" "$r" off
  elif rail_clean "$r" && [ "$(clean_rails)" -le 1 ]; then heal_random
  else apply "$k" "$h" "$r" on; fi
}

# ---- the harness pair ----------------------------------------------------------

# pair_start NAME ARGS...: server (receiver) on host 1, client (sender) on host 0,
# same ARGS plus $S_EXTRA / $C_EXTRA, environment from the PAIR_ENV array.
# Logs: $WORK/NAME/{server,client}.{json,log}; sets PAIR_DIR SPID CPID.
PAIR_ENV=()
export HNET_LOG_TIME=1   # plugin log lines carry "@EPOCH.USEC" (test/harness/plugin_loader.c)
pair_start() {
  local name=$1
  shift
  PAIR_DIR="$WORK/$name"
  mkdir -p "$PAIR_DIR/rdv"
  # shellcheck disable=SC2086
  ip netns exec "$(ns 1)" env LD_LIBRARY_PATH="$PLUGIN_DIR" "${PAIR_ENV[@]}" \
    "$HARNESS" --role server --rendezvous "$PAIR_DIR/rdv" --json "$@" ${S_EXTRA:-} \
    >"$PAIR_DIR/server.json" 2>"$PAIR_DIR/server.log" &
  SPID=$!
  # shellcheck disable=SC2086
  ip netns exec "$(ns 0)" env LD_LIBRARY_PATH="$PLUGIN_DIR" "${PAIR_ENV[@]}" \
    "$HARNESS" --role client --rendezvous "$PAIR_DIR/rdv" --json "$@" ${C_EXTRA:-} \
    >"$PAIR_DIR/client.json" 2>"$PAIR_DIR/client.log" &
  CPID=$!
}

# pair_wait_traffic [TIMEOUT_S]: until both sides have started traffic (their
# "<role>.traffic" flags), then WARMUP seconds more (default 0.5). 1 on timeout or death.
pair_wait_traffic() {
  local limit=${1:-30} t0=$SECONDS
  while [ ! -e "$PAIR_DIR/rdv/server.traffic" ] || [ ! -e "$PAIR_DIR/rdv/client.traffic" ]; do
    kill -0 "$SPID" 2>/dev/null && kill -0 "$CPID" 2>/dev/null || return 1
    [ $((SECONDS - t0)) -lt "$limit" ] || return 1
    sleep 0.05
  done
  sleep "${WARMUP:-0.5}"
}

# wait_pid PID DEADLINE_S: exit status of PID, or 137 after killing it at the deadline.
wait_pid() {
  local pid=$1 end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge "$end" ]; then
      echo "backstop: process $pid still running after $2 s: killed" >&2
      kill -9 "$pid" 2>/dev/null
      break
    fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null
}

# pair_wait [DEADLINE_S]: sets CRC SRC (exit codes).
pair_wait() {
  local limit=${1:-300}
  wait_pid "$CPID" "$limit"
  CRC=$?
  wait_pid "$SPID" 30
  SRC=$?
}

# shellcheck source=../harness/harness_json.sh disable=SC1091
. "$RES_TOP/test/harness/harness_json.sh"

# clog_stall FILE T_FAULT: from a --completion-log, the stall a fault caused: the longest
# gap between consecutive completions (all connections) that starts between 50 ms before
# and 300 ms after T_FAULT (what was already on its way still completes, then the flow
# stops until the failover). Prints "STALL_MS RESUME_MS" (RESUME = the gap's end -
# T_FAULT: when traffic resumed), "? ?" when there is none.
clog_stall() {
  python3 - "$1" "$2" <<'EOF' 2>/dev/null || echo "? ?"
import sys
tf = float(sys.argv[2])
ts = sorted(float(l.split()[0]) for l in open(sys.argv[1]) if l[0] != "#")
best = None
for a, b in zip(ts, ts[1:]):
    if tf - 0.05 <= a <= tf + 0.3 and b > tf and (best is None or b - a > best[1] - best[0]):
        best = (a, b)
print("? ?" if best is None else "%.1f %.1f" % ((best[1] - best[0]) * 1e3, (best[1] - tf) * 1e3))
EOF
}

# clog_rate FILE FROM TO: received MB/s between two wall-clock times (completions in [FROM, TO))
clog_rate() {
  awk -v a="$2" -v b="$3" '!/^#/ && $1 >= a && $1 < b { s += $2 } END { printf "%.2f", s / (b - a) / 1e6 }' "$1"
}

# prom_sum DIR METRIC [LABEL-ERE]: the sum of METRIC's samples in DIR's .prom files
# (label set matching LABEL-ERE when given); "?" when no file has the metric
prom_sum() {
  cat "$1"/rerail-*.prom 2>/dev/null |
    awk -v m="$2" -v f="${3:-}" '$1 ~ "^"m"[{]" && (f == "" || $1 ~ f) { s += $NF; n++ } END { print (n ? s + 0 : "?") }'
}

# ok_pair: both harness processes exited 0 and report zero errors.
ok_pair() {
  [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ] &&
    [ "$(jget "$PAIR_DIR/server.json" 'd["errors"]')" = 0 ] &&
    [ "$(jget "$PAIR_DIR/client.json" 'd["errors"]')" = 0 ]
}

# what_moved: "recv N msgs, X GB/s" for the summary
what_moved() {
  echo "$(jget "$PAIR_DIR/server.json" 'd["recv"]["msgs"]') msgs checked, $(jget "$PAIR_DIR/server.json" 'd["recv"]["gbps"]') GB/s"
}

# run_cases TITLE CASE...: run each case (a function case_NAME that ends with
# ok/bad/slow), once more when it missed only a timing or rate bound (slow;
# $RETRIES more tries, the machine running CI is shared and a regression fails
# twice), report each as PASS/FAIL with what the earlier tries saw, and finish.
run_cases() {
  local title=$1 c attempt note
  shift
  echo "$title: $*"
  for c in "$@"; do
    declare -f "case_$c" >/dev/null || {
      echo "unknown case '$c' (cases: $(declare -F | sed -n 's/^declare -f case_//p' | tr '\n' ' '))" >&2
      exit 2
    }
  done
  for c in "$@"; do
    echo "---- $c"
    attempt=0 note=""
    while :; do
      CASE_DIR=$c
      [ $attempt -gt 0 ] && CASE_DIR=$c.retry$attempt
      VERDICT="" VMSG="" VFIG=""
      "case_$c"
      lab_cleanup
      if [ "$VERDICT" = slow ] && [ $attempt -lt "${RETRIES:-1}" ]; then
        attempt=$((attempt + 1))
        note+=" [attempt $attempt: $VMSG: $VFIG]"
        echo "  bound missed ($VMSG: $VFIG); running it once more"
        continue
      fi
      break
    done
    if [ -n "$note" ]; then
      if [ "$VERDICT" = pass ]; then note="; passed on a retry, first:$note"; else note="; earlier:$note"; fi
    fi
    # pass/fail (harness_lib.sh) tail the logs of $WORK/NAME
    if [ "$VERDICT" = pass ]; then pass "$CASE_DIR" "$VMSG: $VFIG$note"
    else fail "$CASE_DIR" "$VMSG: $VFIG$note"; fi
  done
  finish
}
