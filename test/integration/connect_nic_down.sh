#!/usr/bin/env bash
# Connections set up while a NIC is down (issue 22), in the network lab, each a
# PASS/FAIL line, then a summary. The NCCL-faithful harness runs as two hosts
# (sender on host 0, receiver and listener on host 1; 4 connections of
# checksummed traffic, sizes 0..4M, grouped receives; every byte and sequence
# checked): every connection must be made, carry checked traffic, and move to the
# healed NIC afterwards, as after a failover (host 0's per-rail tx counters, as
# resilience_edges.sh's failback case reads them).
#
# usage: connect_nic_down.sh PLUGIN_DIR HARNESS [CASE...]
#   CASE  any of: listener_down connector_down flapping (default: all three)
#
# Cases:
#   listener_down   host 1's rail0 NIC (the listener's first NIC, the handle's first
#                   address) is down before either process starts; traffic flows on
#                   rail1; rail0 comes up: within the fail-back hold + 2 s host 0 sends
#                   >= 95% of its bytes on rail0; zero errors
#   connector_down  the same with host 0's rail0 (the connector's first NIC)
#   flapping        4 rails, RERAIL_BACKUPS=3, δ = 300 ms, fail-back hold 100 ms: host 0's
#                   rail0 NIC down, and random NIC / switch-port / black-hole faults on the
#                   rails of both hosts, from before the processes start through connection
#                   setup and the first seconds of traffic, never every rail of the path at
#                   once (as resilience_chaos.sh); then everything heals: rail0 carries >= 95%
#                   of host 0's bytes within 12 s (the hold doubles with each recent failure,
#                   up to 64x); zero errors
#
# A case that fails only on a timing bound is run once more (RES_RETRIES, default 1),
# as in resilience_edges.sh: the machine running CI is shared.
#   RERAIL_TEST_SCALE   scales the flapping time (default 1)
#   KEEP_LOGS=1         keep the logs of a passing run
# shellcheck disable=SC2034,SC1091,SC2317  # PLUGIN_DIR, HARNESS, PAIR_ENV: read by resilience_lib.sh; cases are called by name
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS [CASE...]}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS [CASE...]}
shift 2
# shellcheck source=resilience_lib.sh
. "$(dirname "$0")/resilience_lib.sh"

ALL_CASES=(listener_down connector_down flapping)
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=("${ALL_CASES[@]}")
LABNAME=rrn$$
RETRIES=${RES_RETRIES:-1}
TRAFFIC=(--conns 4 --max-size 4M --quiet)

VERDICT="" VMSG="" VFIG=""
ok() { VERDICT=pass VMSG=$1; }
bad() { VERDICT=fail VMSG=$1; }      # correctness: never retried
slow() { VERDICT=slow VMSG=$1; }     # a timing bound only: retried

# started [LIMIT_S]: every connection is up and traffic flows, else the case fails
started() {
  pair_wait_traffic "${1:-30}" && return 0
  pair_wait 60
  bad "the connections were never all made (server exit $SRC, client exit $CRC)"
  return 1
}

# tx_rails: host 0's tx byte counters of every rail, space separated
tx_rails() {
  local r out=""
  for ((r = 0; r < LAB_RAILS; r++)); do
    dev_read 0 "$r" tx
    out+="$DEV_BYTES "
  done
  echo "$out"
}

# moved_off0 SECONDS: bytes host 0 sends on its other rails over SECONDS (traffic
# flows without rail0); sets OFF0
moved_off0() {
  local a b i sum=0
  read -ra a <<<"$(tx_rails)"
  nap "$1"
  read -ra b <<<"$(tx_rails)"
  for ((i = 1; i < LAB_RAILS; i++)); do sum=$((sum + b[i] - a[i])); done
  OFF0=$sum
}

# wait_on_rail0 LIMIT_MS [FROM_US]: host 0's tx counters over 50 ms windows from now
# until rail0 moves more than 1 MB and at least 95% of the bytes (every connection is
# back on it); FB_MS = when (ms after FROM_US, default now: a window's end, <= 50 ms
# late), empty when not within LIMIT_MS of FROM_US. The burst of TCP resending what sat in a rail's
# socket buffer is short; the other rails carry the data until connections fail back.
wait_on_rail0() {
  local limit_us=$(($1 * 1000)) t0 t a b i d0 rest
  t0=${2:-$(us)}
  FB_MS=""
  read -ra a <<<"$(tx_rails)"
  while t=$(us); [ $((t - t0)) -lt "$limit_us" ]; do
    nap 0.05
    read -ra b <<<"$(tx_rails)"
    d0=$((b[0] - a[0])) rest=0
    for ((i = 1; i < LAB_RAILS; i++)); do rest=$((rest + b[i] - a[i])); done
    if [ "$d0" -gt 1000000 ] && [ $((d0 * 100)) -ge $(((d0 + rest) * 95)) ]; then
      FB_MS=$((($(us) - t0) / 1000))
      return 0
    fi
    a=("${b[@]}")
  done
  return 1
}

# ---- a NIC down on one host before the job starts ---------------------------------
# nic_down_case HOST: HOST's rail0 is down before either process starts
nic_down_case() {
  local host=$1 hold=500 limit dur
  limit=$((hold + 2000))
  dur=8
  lab_start "$LABNAME" 2 2
  link "$host" 0 down
  PAIR_ENV=("RERAIL_FAILBACK_HOLD=$hold")
  pair_start "$CASE_DIR" "${TRAFFIC[@]}" --duration "$dur" --timeout 60
  started || return
  moved_off0 1
  link "$host" 0 up
  wait_on_rail0 5000
  pair_wait 60
  VFIG="rail0 of host $host down at start; rail1 carried $((OFF0 / 1000000)) MB in 1 s without it; after it came up rail0 carried >= 95% of host 0's bytes after ${FB_MS:-never (5 s)} ms (limit: hold $hold ms + 2 s); $(what_moved)"
  if ! ok_pair; then bad "server exit $SRC, client exit $CRC"
  elif [ "$OFF0" -lt 1000000 ]; then bad "no traffic flowed while rail0 was down"
  elif [ -z "$FB_MS" ]; then bad "traffic never moved to rail0 after it healed"
  elif [ "$FB_MS" -gt "$limit" ]; then slow "traffic moved to rail0 late"
  else ok "every connection made without rail0, then moved to it"; fi
}
case_listener_down() { nic_down_case 1; }
case_connector_down() { nic_down_case 0; }

# ---- rails flapping from the first second -------------------------------------------
# Random hard faults as in resilience_chaos.sh (fault_step, resilience_lib.sh).

case_flapping() {
  local flap window=12 seed end_us hold=100 dur healed
  flap=$(scaled 5 3)
  dur=$(calc "$flap + $window + 2")
  seed=${RERAIL_CHAOS_SEED:-$((($$ * 7919 + ${EPOCHREALTIME/./}) % 1000000))}
  RANDOM=$seed
  F=() NCHANGES=0 PINNED=nic,0,0
  lab_start "$LABNAME" 2 4
  PAIR_DIR="$WORK/$CASE_DIR"
  mkdir -p "$PAIR_DIR"
  : >"$PAIR_DIR/faults.log"
  T0=$EPOCHREALTIME
  # The connector's first NIC down before anything starts and until the flapping
  # ends (every connection is set up without it, and must move to it once it
  # heals), the other rails flapping from the first second.
  apply nic 0 0 on
  fault_step
  PAIR_ENV=(RERAIL_PROGRESS_TIMEOUT=300 RERAIL_BACKUPS=3 "RERAIL_FAILBACK_HOLD=$hold")
  pair_start "$CASE_DIR" "${TRAFFIC[@]}" --duration "$dur" --timeout 120 --seed "$seed"
  end_us=$(($(us) + $(calc "$flap * 1000000" | cut -d. -f1)))
  while [ "$(us)" -lt "$end_us" ] && kill -0 "$CPID" 2>/dev/null && kill -0 "$SPID" 2>/dev/null; do
    nap "0.$(printf '%03d' $((100 + RANDOM % 701)))"
    fault_step
  done
  PINNED=""
  heal_all
  healed=$(us)
  # Setup may still be under way if a rail stayed down long: it completes once healed.
  started 45 || return
  wait_on_rail0 $((window * 1000)) "$healed"
  pair_wait 120
  VFIG="seed $seed (RERAIL_CHAOS_SEED); $NCHANGES fault changes over $flap s from before the processes started; after everything healed rail0 carried >= 95% of host 0's bytes after ${FB_MS:-never ($window s)} ms; $(what_moved)"
  if ! ok_pair; then bad "server exit $SRC, client exit $CRC"
  elif [ -z "$FB_MS" ]; then slow "traffic did not return to rail0 within $window s"
  else ok "every connection made through the flapping, then back on rail0"; fi
}

run_cases "connections set up with a NIC down (scale $SCALE)" "${CASES[@]}"
