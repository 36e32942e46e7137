#!/usr/bin/env bash
# Chaos: 2 hosts x 4 rails, 4 connections of checksummed traffic (sizes 0..4M,
# grouped receives) through the NCCL-faithful harness while a loop takes random
# rails down and up: a random host and rail, sometimes the host's NIC
# (`link H R down`), sometimes the switch port (`link H R down --switch`),
# sometimes a silent black hole (`drop H R 100`); a change every 100-800 ms,
# and never all rails of the path at once: at least one rail always has both
# hosts' NICs and both switch ports up and drops nothing.
#
# Passes when both harness processes exit 0: zero errors, every byte and
# sequence of every message checked (no loss, duplicate or corruption), and no
# rail was demoted as degraded (rerail_rail_demotions_total, demotion on at its
# default: hard faults and the traffic moving around them must never look like
# a gray failure). Prints the longest stall (receiver's --stall-report) and the
# plugin's events.
#
# usage: resilience_chaos.sh PLUGIN_DIR HARNESS
#   RERAIL_CHAOS_SECONDS  length of the traffic (default 120), times RERAIL_TEST_SCALE
#   RERAIL_CHAOS_SEED     seed of the fault sequence (default: random; printed for a rerun)
#   KEEP_LOGS=1           keep the logs (the fault log is $WORK/chaos/faults.log)
# Settings: RERAIL_PROGRESS_TIMEOUT=300, RERAIL_BACKUPS=3 (every connection holds all
# 4 rails), RERAIL_LOG_LEVEL=warn.
# shellcheck disable=SC2034,SC1091,SC2317,SC2119  # PLUGIN_DIR, HARNESS, PAIR_ENV: read by resilience_lib.sh; cases are called by name
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
# shellcheck source=resilience_lib.sh
. "$(dirname "$0")/resilience_lib.sh"

RAILS=4
SECS=$(scaled "${RERAIL_CHAOS_SECONDS:-120}" 10)
SEED=${RERAIL_CHAOS_SEED:-$((($$ * 7919 + ${EPOCHREALTIME/./}) % 1000000))}
RANDOM=$SEED
DELTA=${RERAIL_CHAOS_DELTA:-300}

echo "chaos: 2 hosts x $RAILS rails, 4 connections, $SECS s, seed $SEED (RERAIL_CHAOS_SEED=$SEED to replay the fault sequence)"
lab_start rrc$$ 2 $RAILS
mkdir -p "$WORK/chaos-tel"
PAIR_ENV=("RERAIL_TELEMETRY_DIR=$WORK/chaos-tel" RERAIL_TELEMETRY_KEEP=1 "RERAIL_PROGRESS_TIMEOUT=$DELTA" RERAIL_BACKUPS=3 "RERAIL_LOG_LEVEL=${RERAIL_CHAOS_LOG:-warn}" "NCCL_DEBUG=${RERAIL_CHAOS_LOG:-warn}")
pair_start chaos --conns 4 --max-size 4M --duration "$SECS" --stall-report --quiet \
  --timeout "$(calc "$SECS + 90")" --seed "$SEED"
FAULTS="$PAIR_DIR/faults.log"
: >"$FAULTS"

if ! pair_wait_traffic 60; then
  pair_wait 60
  fail chaos "traffic never started (server exit $SRC, client exit $CRC)"
  finish
fi

# Faults: fault_step (resilience_lib.sh), every 100-800 ms.
T0=$EPOCHREALTIME
end_us=$(($(us) + $(calc "$SECS * 1000000" | cut -d. -f1) - 500000))
while [ "$(us)" -lt "$end_us" ] && kill -0 "$CPID" 2>/dev/null && kill -0 "$SPID" 2>/dev/null; do
  nap "0.$(printf '%03d' $((100 + RANDOM % 701)))"
  fault_step
done
ELAPSED=$(calc "$EPOCHREALTIME - $T0")
# heal everything: the run ends on a healthy network
heal_all

pair_wait "$(calc "$SECS + 150" | cut -d. -f1)"
# Both processes' last .prom files (RERAIL_TELEMETRY_KEEP: each writes its
# totals when its exporter stops and leaves the file), so the count covers the
# whole run, heal included, whenever the processes end against the fault loop;
# "?" when neither left one, which fails the run.
DEMOTIONS=$(prom_sum "$WORK/chaos-tel" rerail_rail_demotions_total)

longest=$(jget "$PAIR_DIR/server.json" 'd["stall"]["longest"]["ms"]')
at=$(jget "$PAIR_DIR/server.json" 'd["stall"]["longest"]["start_s"]')
echo "faults: $NCHANGES changes (nic ${COUNT[nic]:-0}, switch ${COUNT[sw]:-0}, drop ${COUNT[drop]:-0}); log: $FAULTS"
echo "plugin events (WARN lines, both sides):"
grep -hoE 'health: (failover|failback|nic_state|error)' "$PAIR_DIR"/client.log "$PAIR_DIR"/server.log |
  sort | uniq -c | sed 's/^/  /'
echo "longest stall: $longest ms, at +$at s of traffic"
conn_longest=$(jget "$PAIR_DIR/server.json" 'max(c["longest"]["ms"] for c in d["stall"]["per_conn"])')
echo "longest stall of one connection: $conn_longest ms ($(jget "$PAIR_DIR/server.json" '", ".join("conn %d: %.0f ms at +%.1f s" % (c["conn"], c["longest"]["ms"], c["longest"]["start_s"]) for c in d["stall"]["per_conn"])'))"
echo "next longest: $(jget "$PAIR_DIR/server.json" '", ".join("%.0f ms" % g["ms"] for g in d["stall"]["top"][1:5])')"
fig="$DEMOTIONS demotions; $NCHANGES fault changes in $ELAPSED s of faults (planned: $SECS s of traffic); longest stall $longest ms (of one connection: $conn_longest ms); $(what_moved)"
if ok_pair && [ "$DEMOTIONS" = 0 ]; then
  pass chaos "$fig"
else
  # the fault sequence just before the end, for the report
  echo "last fault changes:"
  tail -n 12 "$FAULTS" | sed 's/^/  /'
  fail chaos "server exit $SRC, client exit $CRC, $DEMOTIONS demotions (want 0); $fig (seed $SEED)"
fi
finish
