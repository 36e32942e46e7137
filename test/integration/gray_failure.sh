#!/usr/bin/env bash
# Gray failures in the network lab: a rail that stays up but is slow or lossy is
# demoted, traffic returns when it heals, and every fault says where it is.
# 2 hosts x 2 rails, TCP, the NCCL-faithful harness (sender host 0, receiver host
# 1; 4 connections, sizes 0..4M, every byte checked). Counters come from the
# plugin's .prom files (RERAIL_TELEMETRY_DIR), read while the processes run.
#
# usage: gray_failure.sh PLUGIN_DIR HARNESS [CASE...]
#   slow    rail0 of host 0 shaped (tbf) to 5 % of the rate it carried; from 3 s on the
#           connection moves >= 70 % of what it moves with rail0 down instead (the
#           control run, right after; each run's rate taken against its own in the
#           1.5 s before the fault, on rail0 healthy: the machine's speed drifts
#           between the runs; the control's own at most 1); then the shape is
#           removed and traffic is back
#           on rail0 (>= 95 % of host 0's bytes) within hold + probe + 1.5 s
#   lossy   the same with 10 % of rail0's packets lost in flight instead of tbf (nftables
#           on the input of both hosts' rail0: a drop on a sender's own output is a local
#           transmit error TCP tries again, not a loss it retransmits); demoted for its
#           retransmissions, or failed over when TCP stalls past δ
#   latency rail0 of host 0 delayed 40 ms (netem; LAT_DELAY_MS) under light traffic
#           (2 connections, one op in flight each: LAT_TRAFFIC): demoted for its latency
#           (rerail_rail_demotions_total, rerail_rail_degraded), rail1 carries >= 95 %
#           of host 0's bytes, back on rail0 within hold + probe + 1.5 s once the delay
#           goes. Needs sch_netem: fails where the kernel has none
#   where   a link down on host 0's NIC reads local at host 0 and peer at host 1; a
#           silent drop of rail0 both ways reads path at both (rerail_rail_faults_total
#           {where}); a killed sender reads process at the receiver (its event log's where:
#           the receiver ends, and removes its .prom, when its peer dies)
# Default: slow, lossy and where, with the plugin's default demotion settings (lossy
# was out of the set for a while after a CI run left a connection behind; once a
# demoted rail's reopen was bounded and the control's own ratio capped at 1, 19 of 20
# first tries passed, the miss the ratio on a machine-wide slowdown: bench/RESULTS.md
# 16d "lossy5"). By name: latency (not yet run where netem exists). A case that fails
# only on a timing or rate bound is run once more (RES_RETRIES, default 1).
# RERAIL_TEST_SCALE scales the durations.
# shellcheck disable=SC2034,SC1091,SC2317,SC2119
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS [CASE...]}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS [CASE...]}
shift 2
. "$(dirname "$0")/resilience_lib.sh"

ALL_CASES=(slow lossy where)   # latency: by name (docs/failover.md, "Latency")
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=("${ALL_CASES[@]}")
LABNAME=rrg$$
HOLD_MS=500
RETRIES=${RES_RETRIES:-1}
TRAFFIC=(--conns 4 --max-size 4M --stall-report --quiet)
VERDICT="" VMSG="" VFIG=""
ok() { VERDICT=pass VMSG=$1; }
bad() { VERDICT=fail VMSG=$1; }
slow() { VERDICT=slow VMSG=$1; }

started() {
  pair_wait_traffic && return 0
  pair_wait 60
  bad "traffic never started (server exit $SRC, client exit $CRC)"
  return 1
}

# rail0_rate_mbit: host 0's rail0 tx rate over 1 s, in Mbit/s
rail0_rate_mbit() {
  local a b
  a=$(txbytes 0 0)
  nap 1
  b=$(txbytes 0 0)
  echo $(((b - a) * 8 / 1000000))
}

# run_fault KIND DIR: traffic, then KIND (shape|drop|down) on host 0's rail0 at +2 s;
# T_F: when the fault took effect (the receiver's completions in [T_F + 3 s,
# T_F + 5 s) are read once the pair has ended: pair_rate); leaves the fault in
# place and the pair running (the caller heals and waits).
run_fault() {
  local kind=$1 dir=$2 mbit
  # A case run again by name reads only its own run's files, and its harness pair
  # no stale rendezvous (a client that read the last server's handle failed)
  rm -rf "$WORK/$dir/tel" "$WORK/$dir/rdv"
  mkdir -p "$WORK/$dir/tel"
  # KEEP: the sender's last .prom stays once it ends, for its totals after the heal
  # shellcheck disable=SC2206 # GRAY_DEBUG_ENV: a word list on purpose
  PAIR_ENV=("RERAIL_TELEMETRY_DIR=$WORK/$dir/tel" "RERAIL_FAILBACK_HOLD=$HOLD_MS" "RERAIL_TELEMETRY_KEEP=1"
    ${GRAY_DEBUG_ENV:-})
  pair_start "$dir" "${TRAFFIC[@]}" --completion-log="$WORK/$dir/completions.log" \
    --duration "$(scaled 12 12)" --timeout 90
  started || return 1
  nap 0.5
  mbit=$(rail0_rate_mbit)
  RAIL0_MBIT=$mbit
  case $kind in
    shape) shape 0 0 "$(((mbit * 5 + 99) / 100))" >/dev/null ;;
    drop) drop 0 0 10 in && drop 1 0 10 in ;;
    down) link 0 0 down ;;
  esac
  T_F=$EPOCHREALTIME
  nap 5.2
  DEMOTIONS=$(prom_sum "$WORK/$dir/tel" rerail_rail_demotions_total)
  FAULTS=$(prom_sum "$WORK/$dir/tel" rerail_rail_faults_total)
  RAIL0_AT_FAULT=$(rail0_counts "$WORK/$dir/tel")
  return 0
}

# rail0_counts DIR: the sender's (host 0's) rail0 counters in its .prom file:
# "demotions D, failovers F, failbacks B, faults N" (faults: failures and
# demotions; a fail-back onto rail0 before the heal puts traffic back on the fault)
rail0_counts() {
  local f="" g m v out=""
  for g in "$1"/rerail-*-"$CPID".prom; do [ -e "$g" ] && f=$g; done
  [ -n "$f" ] || { echo "no sender .prom"; return; }
  for m in rail_demotions failovers failbacks rail_faults; do
    v=$(awk -v m="rerail_${m}_total" '$1 ~ "^"m"[{]" && index($1, "nic=\"rail0\"") { s += $NF; n++ } END { print (n ? s + 0 : "?") }' "$f")
    out+="${m#rail_} $v, "
  done
  echo "${out%, }"
}

# sender_events DIR FROM TO: the sender's rail events in its event log between two
# wall-clock times, "+seconds kind nic[>to_nic] [state]" from FROM (state changes,
# failovers, fail-backs; not the telemetry's anomalies), for the figures only
sender_events() {
  cat "$1"/rerail-events-*-"$CPID".jsonl 2>/dev/null | awk -v a="$2" -v b="$3" '
    function field(k,   v) {
      if (!match($0, "\"" k "\":\"?[^,\"]*")) return ""
      v = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); sub(/^"/, "", v); return v }
    { t = field("time_ns") / 1e9; k = field("kind"); s = field("state"); to = field("to_nic")
      if (t < a || t > b || (k != "rail_state" && k != "failover" && k != "failback")) next
      printf "%s+%.2f %s %s%s%s", (n++ ? "; " : ""), t - a, k, field("nic"), (to == "null" ? "" : ">" to),
        (s == "null" ? "" : " " s) }'
}

# probe_counts DIR: the sender's probes of its demoted rails so far, by verdict
# (rerail_rail_probes_total{result}), and its rails reopened:
# "healthy H, between B, slow S, timed_out T, reopened R"
probe_counts() {
  local f="" g
  for g in "$1"/rerail-*-"$CPID".prom; do [ -e "$g" ] && f=$g; done
  [ -n "$f" ] || { echo "no sender .prom"; return; }
  awk '$1 ~ /^rerail_rail_probes_total[{]/ { match($1, /result="[a-z_]+"/); r = substr($1, RSTART + 8, RLENGTH - 9)
         out = out (out ? ", " : "") r " " $NF }
       $1 ~ /^rerail_rail_reconnects_total[{]/ { rc = $NF } END { print out ", reopened " rc + 0 }' "$f"
}

# rail0_sockets: the sender's TCP sockets on rail0 that hold bytes (host 0's kernel,
# ss): "N of M: backoff B rto R ms unacked U notsent N; ..." (a socket in
# retransmission backoff at the heal sends nothing until its timer fires)
rail0_sockets() {
  ip netns exec "$(ns 0)" ss -tinH state established src "$("$NETLAB_SH" --name "$LAB" addr 0 0)" 2>/dev/null |
    awk '/^[0-9]/ { n++; next }
      { b = 0; r = 0; u = 0; ns = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^backoff:/) b = substr($i, 9); if ($i ~ /^rto:/) r = substr($i, 5)
          if ($i ~ /^unacked:/) u = substr($i, 9); if ($i ~ /^notsent:/) ns = substr($i, 9) }
        if (u || ns) { k++; out = out (out ? "; " : "") "backoff " b " rto " r " ms unacked " u " notsent " ns } }
      END { print (k + 0) " of " (n + 0) (out ? ": " out : "") }'
}

# failback_times DIR T: when the sender's connections failed back onto rail0, in ms
# from T (one per connection; the traffic is back only once the last did)
failback_times() {
  cat "$1"/rerail-events-*-"$CPID".jsonl 2>/dev/null | awk -v a="$2" '
    /"kind":"failback"/ && /"to_nic":"rail0"/ { match($0, /"time_ns":[0-9]+/); t = substr($0, RSTART + 10, RLENGTH - 10) / 1e9
      out = out (out ? " " : "") sprintf("%+d", (t - a) * 1000) } END { print (out ? out : "none") }'
}

# pair_rate: MB/s the receiver completed from 3 s to 5 s after the fault
pair_rate() { clog_rate "$PAIR_DIR/completions.log" "$(calc "$T_F + 3")" "$(calc "$T_F + 5")"; }
# pre_rate: MB/s in the 1.5 s before the fault (rail0 alone, healthy), the same run's
# own yardstick: the machine's speed when two runs differ (figures only)
pre_rate() { clog_rate "$PAIR_DIR/completions.log" "$(calc "$T_F - 1.5")" "$T_F"; }

# back_on_rail0 LIMIT_MS: ms until host 0's rail0 carries >= 95 % of its bytes
# (50 ms windows, > 1 MB), or "" when not within LIMIT_MS
back_on_rail0() {
  local t0 a0 a1 b0 b1 d0 d1
  t0=$(us)
  a0=$(txbytes 0 0) a1=$(txbytes 0 1)
  while [ $(($(us) - t0)) -lt $(($1 * 1000)) ]; do
    nap 0.05
    b0=$(txbytes 0 0) b1=$(txbytes 0 1)
    d0=$((b0 - a0)) d1=$((b1 - a1))
    if [ "$d0" -gt 1000000 ] && [ $((d0 * 100)) -ge $(((d0 + d1) * 95)) ]; then
      echo $((($(us) - t0) / 1000))
      return
    fi
    a0=$b0 a1=$b1
  done
}

# gray KIND: slow (shape) or lossy (drop), then its heal, then the control run
gray() {
  local kind=$1 rate demo mbit back limit heal_ms down_rate ratio pre down_pre raw down_own
  limit=$((HOLD_MS + 100 + 1500))
  lab_start "$LABNAME" 2 2
  run_fault "$kind" "$CASE_DIR" || return
  demo=$DEMOTIONS mbit=$RAIL0_MBIT faults=$FAULTS
  local r0_fault=$RAIL0_AT_FAULT t_f=$T_F tel=$WORK/$CASE_DIR/tel r0_end events
  local socks probes_heal t_heal
  socks=$(rail0_sockets) probes_heal=$(probe_counts "$tel")
  if [ "$kind" = shape ]; then shape 0 0 off >/dev/null; else drop 0 0 off && drop 1 0 off; fi
  t_heal=$EPOCHREALTIME
  back=$(back_on_rail0 $((limit + 2000)))
  pair_wait 120
  rate=$(pair_rate) pre=$(pre_rate)
  r0_end=$(rail0_counts "$tel")
  events=$(sender_events "$tel" "$t_f" "$(calc "$t_f + 5.2")")
  HEAL_FIG="at the heal: sender's rail0 sockets with bytes in flight $socks; probes $probes_heal (at the end: $(probe_counts "$tel")); fail-backs onto rail0 at $(failback_times "$tel" "$t_heal") ms from the heal"
  local okf=1
  ok_pair || okf=0
  lab_cleanup
  lab_start "$LABNAME" 2 2
  run_fault down "$CASE_DIR.control" || return
  link 0 0 up
  pair_wait 120
  down_rate=$(pair_rate) down_pre=$(pre_rate)
  ok_pair || okf=0
  # Each run against its own healthy rate first: the two runs are half a minute
  # apart, and a shared machine's speed changes by more than the bar in that time
  # (bench/RESULTS.md 16c: the lossy run's raw ratio 0.53-1.90, its runs' pre-fault
  # rates apart by as much; each against its own, 0.76-1.12). The control's own
  # figure is taken at 1 at most: with rail0 down chain mode carries everything on
  # one rail, as it did on rail0 before the fault, and a control that moved more
  # after its fault than before measured the machine speeding up in between (a
  # build beside it ending), which the bar must not demand of the fault run (CI,
  # 16d: 1,611 against 1,388 before, and the lossy run, at 0.78 of its own, failed;
  # 16d lossy5: 1,556 against 1,055). A failover that costs still lowers it.
  raw=$(calc "$rate / ($down_rate > 0 ? $down_rate : 1)")
  down_own=$(calc "($down_rate > 0 ? $down_rate : 1) / ($down_pre > 0 ? $down_pre : 1)")
  ratio=$(calc "($rate / ($pre > 0 ? $pre : 1)) / ($down_own < 1 ? $down_own : 1)")
  VFIG="rail0 carried $mbit Mbit/s; with the fault the receiver completed $rate MB/s from 3 s to 5 s after it (healthy, before it: $pre), with rail0 down $down_rate MB/s (before: $down_pre); ratio $ratio, each run against its own rate before the fault (the control's at most 1: $down_own), need >= 0.7 (raw $raw); $demo demotions, $faults faults; sender's rail0 at +5.2 s: $r0_fault, at the end: $r0_end; sender's rail events to +5.2 s: ${events:-none}; healed: traffic back on rail0 after ${back:-never} ms (limit $limit ms); $HEAL_FIG"
  if [ "$okf" = 0 ]; then bad "a run ended with errors (server exit $SRC, client exit $CRC)"
  elif [ "$demo" = "?" ] || [ "$faults" = "?" ]; then bad "no telemetry file to read the counters from"
  # A 10 % loss can stall TCP past δ (retransmission timeouts): failed over rather
  # than demoted is as good. A rate limit never stalls: it must be demoted.
  elif [ "$kind" = shape ] && [ "$demo" -lt 1 ]; then bad "the rail was never demoted"
  elif [ "$faults" -lt 1 ]; then bad "the rail was neither demoted nor failed over"
  elif ! is_true "$ratio >= 0.7"; then slow "the connection moved too little with the rail degraded"
  elif [ -z "$back" ]; then bad "traffic never returned to the healed rail"
  elif [ "$back" -gt "$limit" ]; then slow "traffic returned too late"
  else ok "demoted, and back once healed"; fi
}
case_slow() { gray shape; }
case_lossy() { gray drop; }

# delay H R MS|off: netem adds MS ms to every packet host H sends on railR (a
# longer path, a deep buffer in the fabric); its queue holds far more than the
# rail has in flight, so it delays and never drops
delay() {
  local d
  d=$(ns "$1")
  ip netns exec "$d" tc qdisc del dev "rail$2" root 2>/dev/null
  [ "$3" = off ] || ip netns exec "$d" tc qdisc add dev "rail$2" root netem delay "${3}ms" limit 100000
}
# netem_ok: can this kernel add a delay (sch_netem)? Tried on the lab's switch
# loopback, which carries nothing.
netem_ok() {
  ip netns exec "$LAB-sw" tc qdisc add dev lo root netem delay 1ms 2>/dev/null || return 1
  ip netns exec "$LAB-sw" tc qdisc del dev lo root 2>/dev/null
  return 0
}

# rail_share SECONDS: host 0's rail1 share of its rail bytes (percent) over the next
# SECONDS, and the bytes: "PCT BYTES"
rail_share() {
  local a0 a1 b0 b1 d
  a0=$(txbytes 0 0) a1=$(txbytes 0 1)
  nap "$1"
  b0=$(txbytes 0 0) b1=$(txbytes 0 1)
  d=$((b0 - a0 + b1 - a1))
  echo "$((d > 0 ? (b1 - a1) * 100 / d : 0)) $d"
}

# latency: every packet of host 0's rail0 delayed by LAT_DELAY_MS mid-run (the
# veths' round trip is tens of microseconds): the latency criterion demotes it
# (requests from an idle rail take many times its sibling's), traffic moves to
# rail1, and once the delay goes traffic is back on rail0 within the hold
case_latency() {
  local dms=${LAT_DELAY_MS:-40} tel=$WORK/$CASE_DIR/tel limit share back demo deg r0 events t_f
  limit=$((HOLD_MS + 100 + 1500))
  lab_start "$LABNAME" 2 2
  # Without netem the delay is never added and the case would test nothing
  netem_ok || { bad "this kernel has no netem (sch_netem): no delay can be added"; return; }
  rm -rf "$tel" "$WORK/$CASE_DIR/rdv" # as in run_fault
  mkdir -p "$tel"
  # shellcheck disable=SC2206,SC2086 # word lists on purpose
  PAIR_ENV=("RERAIL_TELEMETRY_DIR=$tel" "RERAIL_FAILBACK_HOLD=$HOLD_MS" "RERAIL_TELEMETRY_KEEP=1" ${GRAY_DEBUG_ENV:-})
  # shellcheck disable=SC2086
  pair_start "$CASE_DIR" ${LAT_TRAFFIC:---conns 2 --inflight 1 --max-size 1M} --stall-report --quiet \
    --duration "$(scaled 10 10)" --timeout 90
  started || return
  nap 1.5
  delay 0 0 "$dms" || { bad "tc could not add the delay"; pair_wait 60; return; }
  t_f=$EPOCHREALTIME
  nap 3
  share=$(rail_share 1)
  nap 0.2
  demo=$(prom_sum "$tel" rerail_rail_demotions_total 'nic="rail0"')
  deg=$(prom_sum "$tel" rerail_rail_degraded 'nic="rail0"')
  r0=$(rail0_counts "$tel")
  delay 0 0 off
  back=$(back_on_rail0 $((limit + 2000)))
  pair_wait 120
  events=$(sender_events "$tel" "$t_f" "$(calc "$t_f + 4.2")")
  VFIG="rail0 delayed ${dms} ms: at +4.2 s rail0 demotions $demo (both ends), degraded $deg; sender's rail0: $r0; rail1 carried ${share% *} % of host 0's ${share#* } rail bytes from +3 s to +4 s; sender's rail events: ${events:-none}; delay removed: traffic back on rail0 after ${back:-never} ms (limit $limit ms)"
  if ! ok_pair; then bad "the run ended with errors (server exit $SRC, client exit $CRC)"
  elif [ "$demo" = "?" ] || [ "$deg" = "?" ]; then bad "no telemetry file to read the counters from"
  elif [ "$demo" -lt 1 ] || [ "$deg" -lt 1 ]; then bad "the delayed rail was not demoted"
  elif [ "${share% *}" -lt 95 ]; then slow "traffic did not move off the delayed rail"
  elif [ -z "$back" ]; then bad "traffic never returned to rail0 once the delay went"
  elif [ "$back" -gt "$limit" ]; then slow "traffic returned too late"
  else ok "demoted, and back once the delay went"; fi
}

case_where() {
  local why="" d f
  declare -A got=()
  for d in local path process; do
    mkdir -p "$WORK/$CASE_DIR/$d"
    lab_start "$LABNAME" 2 2
    PAIR_ENV=("RERAIL_TELEMETRY_DIR=$WORK/$CASE_DIR/$d" "RERAIL_PROGRESS_TIMEOUT=300")
    pair_start "$CASE_DIR/$d.run" "${TRAFFIC[@]}" --duration 8 --timeout 60 --no-peer-abort
    started || return
    nap 0.5
    case $d in
      local) link 0 0 down ;;
      path) drop 0 0 100 ;;
      process) kill -9 "$CPID" ;;
    esac
    nap 1.5
    # per side: host 0's .prom is the client's, host 1's the server's (by pid)
    for f in "$WORK/$CASE_DIR/$d"/rerail-*-"$CPID".prom; do [ -e "$f" ] && cp "$f" "$WORK/$CASE_DIR/$d.client.prom"; done
    for f in "$WORK/$CASE_DIR/$d"/rerail-*-"$SPID".prom; do [ -e "$f" ] && cp "$f" "$WORK/$CASE_DIR/$d.server.prom"; done
    local side w
    # A receiver whose sender died ends (and removes its .prom): its event log stays
    if [ "$d" = process ]; then
      pair_wait 60
      got[process,server,process]=$(cat "$WORK/$CASE_DIR/$d"/rerail-events-*-"$SPID".jsonl 2>/dev/null | grep -c '"where":"process"')
      lab_cleanup
      continue
    fi
    for side in client server; do
      for w in local peer path process; do
        got[$d,$side,$w]=$(awk -v w="where=\"$w\"" '$1 ~ /^rerail_rail_faults_total[{]/ && index($1, w) { s += $NF } END { print s + 0 }' \
          "$WORK/$CASE_DIR/$d.$side.prom" 2>/dev/null)
        [ -n "${got[$d,$side,$w]}" ] || got[$d,$side,$w]=0
      done
    done
    [ "$d" = local ] && link 0 0 up
    [ "$d" = path ] && drop 0 0 off
    pair_wait 60
    lab_cleanup
  done
  VFIG="link down at host 0: host 0 local=${got[local,client,local]} path=${got[local,client,path]}, host 1 peer=${got[local,server,peer]} path=${got[local,server,path]}; silent drop: host 0 path=${got[path,client,path]} local=${got[path,client,local]}, host 1 path=${got[path,server,path]} peer=${got[path,server,peer]}; killed sender: host 1 process=${got[process,server,process]}"
  [ "${got[local,client,local]}" -ge 1 ] && [ "${got[local,client,path]}" = 0 ] && [ "${got[local,client,peer]}" = 0 ] ||
    why+="host 0 did not read its link down as local; "
  [ "${got[local,server,peer]}" -ge 1 ] && [ "${got[local,server,path]}" = 0 ] && [ "${got[local,server,local]}" = 0 ] ||
    why+="host 1 did not read host 0's link down as peer; "
  [ "${got[path,client,path]}" -ge 1 ] && [ "$((got[path,client,local] + got[path,client,peer]))" = 0 ] ||
    why+="host 0 did not read the silent drop as path; "
  [ "${got[path,server,path]}" -ge 1 ] && [ "$((got[path,server,local] + got[path,server,peer]))" = 0 ] ||
    why+="host 1 did not read the silent drop as path; "
  [ "${got[process,server,process]}" -ge 1 ] || why+="host 1 did not read the killed sender as process; "
  if [ -n "$why" ]; then bad "$why"; else ok "every fault placed"; fi
}

run_cases "gray failures (scale $SCALE)" "${CASES[@]}"
