#!/usr/bin/env bash
# Failover benchmark in the network lab (test/lab/netlab.sh), driven through the
# NCCL-faithful harness (2 hosts, 4 connections of checksummed traffic, every
# byte checked): how long traffic stops when a NIC fails, how much throughput a
# degraded host keeps, how fast traffic returns to a healed port.
#
# usage: bench/failover_bench.sh BUILD_DIR [PART...]     (as root)
#   PART: link silent degraded failback (default: all)
#
#   link      FB_TRIALS (20) trials, 2 rails, full load (4 connections, sizes 0..4M):
#             host 0's active rail (rail0) goes down; the time until traffic resumes:
#             "receiver": from the link going down until the receiver completes messages
#             again (the end of the longest gap between completions that starts within
#             [-50 ms, +300 ms] of the fault, from --completion-log); "backup": until
#             512 KB have left host 0 on rail1
#   silent    the same with a silent failure (drop 100, link up), compared with δ + 100 ms
#   degraded  every rail shaped to FB_MBIT (200) Mbit/s on both hosts (tbf, egress), so
#             that the network is the limit: throughput before and after a rail fails,
#             in the same run: chain (2 rails, 1 down) against one rail's healthy
#             throughput, and RERAIL_FAILOVER=balance (4 rails, 1 down) against three
#             rails' worth (3/4 of the healthy 4-rail figure); target >= 90 %
#   failback  FB_FB_TRIALS (5) runs: rail0 at FB_MBIT, rail1 at half of it; rail0 down for
#             2 s, then up: the time from the port coming up until the throughput is
#             back at the primary's level (90 % of the healthy figure, 250 ms windows),
#             against the hold (RERAIL_FAILBACK_HOLD, 500 ms) + 1 s
#
# Environment: FB_TRIALS, FB_FB_TRIALS, FB_MBIT, FB_DELTA (RERAIL_PROGRESS_TIMEOUT, default
# 1000 = the plugin's default), KEEP_LOGS=1. Ends with a markdown section for bench/RESULTS.md.
# The machine may be shared: each ratio is measured within one run.
# shellcheck disable=SC1091,SC2034,SC2119  # PLUGIN_DIR, HARNESS, PAIR_ENV: read by resilience_lib.sh
set -u
BUILD=${1:?usage: $0 BUILD_DIR [link|silent|degraded|failback ...]}
shift
BUILD=$(cd "$BUILD" && pwd)
PLUGIN_DIR=$BUILD/net_plugin
HARNESS=$BUILD/test/harness/rerail-harness
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/test/integration/resilience_lib.sh"

PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(link silent degraded failback)
TRIALS=${FB_TRIALS:-20}
FB_TRIALS_N=${FB_FB_TRIALS:-5}
MBIT=${FB_MBIT:-200}
DELTA=${FB_DELTA:-1000}
HOLD=500
LABNAME=rrb$$
MD=()        # markdown rows
NOTES=()

# stats "v1 v2 ...": "n p50 p99 min max mean" (nearest rank)
stats() {
  python3 - "$@" <<'EOF'
import math, sys
v = sorted(float(x) for x in sys.argv[1:] if x not in ("?", ""))
if not v:
    print("0 ? ? ? ? ?")
    sys.exit()
pct = lambda p: v[max(0, math.ceil(p / 100 * len(v)) - 1)]
print("%d %.1f %.1f %.1f %.1f %.1f" % (len(v), pct(50), pct(99), v[0], v[-1], sum(v) / len(v)))
EOF
}

# ---- link / silent: time to resume -------------------------------------------------
# one_trial KIND: sets R_RECV (ms), R_STALL (ms), R_BACKUP (ms); "?" when not seen
one_trial() {
  local kind=$1 i=$2 base t0 deadline
  pair_start "$kind.$i" --conns 4 --max-size 4M --quiet --duration 3 --timeout 60 --stall-report \
    --completion-log "$WORK/$kind.$i.clog" --seed "$i"
  R_RECV="?" R_STALL="?" R_BACKUP="?" R_BASE="?"
  if ! pair_wait_traffic; then pair_wait 60; return 1; fi
  nap 0.7
  dev_read 0 1 tx
  base=$DEV_BYTES
  if [ "$kind" = link ]; then link 0 0 down; else drop 0 0 100; fi
  local tf=$T_FAULT
  t0=${T_FAULT/./}
  deadline=$((t0 + 5000000))
  # poll host 0's rail1 tx counter (no forks: ~0.1 ms per round)
  while :; do
    dev_read 0 1 tx
    if [ $((DEV_BYTES - base)) -ge 524288 ]; then R_BACKUP=$(((${EPOCHREALTIME/./} - t0) / 1000)); break; fi
    [ "${EPOCHREALTIME/./}" -lt $deadline ] || break
  done
  pair_wait 120
  if [ "$kind" = link ]; then link 0 0 up; else drop 0 0 off; fi
  ok_pair || return 1
  read -r R_STALL R_RECV <<<"$(clog_stall "$WORK/$kind.$i.clog" "$tf")"
  # the noise floor: the same measure 1 s before the fault, when nothing failed
  read -r R_BASE _ <<<"$(clog_stall "$WORK/$kind.$i.clog" "$(calc "$tf - 1")")"
  return 0
}

part_resume() {
  local kind=$1 i recv=() backup=() stall=() base=() bad=0
  echo "---- $kind: $TRIALS trials, 2 rails, δ = $DELTA ms"
  lab_start "$LABNAME" 2 2
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$DELTA")
  for ((i = 1; i <= TRIALS; i++)); do
    if one_trial "$kind" "$i"; then
      printf '  trial %2d: receiver resumed %7s ms after the fault (stall %7s ms; 1 s before: %6s ms), backup rail moving data after %5s ms\n' \
        "$i" "$R_RECV" "$R_STALL" "$R_BASE" "$R_BACKUP"
      recv+=("$R_RECV") backup+=("$R_BACKUP") stall+=("$R_STALL") base+=("$R_BASE")
    else
      bad=$((bad + 1))
      echo "  trial $i: FAILED (server exit $SRC, client exit $CRC; logs $PAIR_DIR)"
      KEEP_LOGS=1
    fi
  done
  lab_cleanup
  local s b g
  read -r n p50 p99 mn mx mean <<<"$(stats "${recv[@]}")"
  s="receiver resumed after: p50 $p50 ms, p99 $p99 ms (min $mn, max $mx, mean $mean; $n trials)"
  read -r _ bp50 bp99 _ bmx _ <<<"$(stats "${backup[@]}")"
  b="backup rail moving data after: p50 $bp50 ms, p99 $bp99 ms (max $bmx)"
  read -r _ gp50 gp99 _ _ _ <<<"$(stats "${stall[@]}")"
  read -r _ np50 np99 _ _ _ <<<"$(stats "${base[@]}")"
  g="stall (longest receive gap): p50 $gp50 ms, p99 $gp99 ms; the same 1 s before the fault (noise): p50 $np50 ms, p99 $np99 ms"
  echo "  $s"
  echo "  $b"
  echo "  $g"
  [ $bad -gt 0 ] && echo "  $bad trial(s) failed" && NOTES+=("$kind: $bad of $TRIALS trials failed (errors or a non-zero exit)")
  if [ "$kind" = link ]; then
    MD+=("| NIC link down (ip link set rail0 down), 2 rails | $n | $p50 ms | $p99 ms | $bp50 / $bp99 ms | $gp50 / $gp99 ms | $np50 / $np99 ms | — |")
  else
    local ref=$((DELTA + 100)) verdict
    verdict=$(is_true "$p99 <= $ref" && echo "p99 within δ + 100 ms = $ref ms" || echo "p99 over δ + 100 ms = $ref ms")
    echo "  vs δ + 100 ms = $ref ms: $verdict"
    MD+=("| silent failure (drop 100 %, link up), 2 rails | $n | $p50 ms | $p99 ms | $bp50 / $bp99 ms | $gp50 / $gp99 ms | $np50 / $np99 ms | $verdict |")
  fi
}

# ---- degraded throughput -------------------------------------------------------------
# degraded_run NAME RAILS MODE: healthy for 4 s, rail0 down, degraded for 4 s (after 1.5 s
# to settle). Sets HEALTHY DEGRADED (MB/s, receiver side).
degraded_run() {
  local name=$1 rails=$2 mode=$3 r h ta tb tc td
  lab_start "$LABNAME" 2 "$rails"
  for ((h = 0; h < 2; h++)); do
    for ((r = 0; r < rails; r++)); do shape $h $r "$MBIT" >/dev/null; done
  done
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$DELTA" "RERAIL_FAILOVER=$mode" "RERAIL_BACKUPS=$((rails - 1))")
  pair_start "$name" --conns 4 --max-size 1M --quiet --duration 13 --timeout 60 --stall-report \
    --completion-log "$WORK/$name.clog" --timeline "$WORK/$name.timeline"
  HEALTHY="?" DEGRADED="?"
  pair_wait_traffic || { pair_wait 60; return 1; }
  nap 1
  ta=$EPOCHREALTIME
  nap 4
  tb=$EPOCHREALTIME
  link 0 0 down
  nap 1.5
  tc=$EPOCHREALTIME
  local before=() after=()
  for ((r = 0; r < rails; r++)); do before[r]=$(txbytes 0 $r); done
  nap 4
  td=$EPOCHREALTIME
  for ((r = 0; r < rails; r++)); do after[r]=$(txbytes 0 $r); done
  PER_RAIL=""
  for ((r = 0; r < rails; r++)); do
    PER_RAIL+="rail$r $(calc "(${after[r]} - ${before[r]}) / ($td - $tc) / 1e6") "
  done
  pair_wait 120
  lab_cleanup
  ok_pair || return 1
  HEALTHY=$(clog_rate "$WORK/$name.clog" "$ta" "$tb")
  DEGRADED=$(clog_rate "$WORK/$name.clog" "$tc" "$td")
}

part_degraded() {
  local one="" ratio four three ratio4
  echo "---- degraded: every rail shaped to $MBIT Mbit/s (tbf) on both hosts"
  if degraded_run deg_chain 2 chain; then
    one=$HEALTHY
    ratio=$(calc "100 * $DEGRADED / $one")
    echo "  chain, 2 rails: healthy $one MB/s (one rail carries it), rail0 down: $DEGRADED MB/s = $ratio % of one rail's healthy throughput (target >= 90 %)"
    echo "    host 0 tx while degraded (MB/s, wire bytes): $PER_RAIL"
    MD+=("| chain, 2 rails, 1 down | one rail healthy: $one MB/s | $DEGRADED MB/s | **$ratio %** | >= 90 % |")
  else
    echo "  chain run FAILED (server exit $SRC, client exit $CRC)"
    NOTES+=("degraded chain run failed")
    KEEP_LOGS=1
  fi
  if degraded_run deg_balance 4 balance; then
    four=$HEALTHY
    three=$(calc "$four * 3 / 4")
    ratio4=$(calc "100 * $DEGRADED / $three")
    echo "  balance, 4 rails: healthy $four MB/s, rail0 down: $DEGRADED MB/s = $ratio4 % of three rails' worth ($three MB/s) (target >= 90 %)"
    echo "    host 0 tx while degraded (MB/s, wire bytes): $PER_RAIL"
    NOTES+=("balance, 4 rails, rail0 down: host 0 sent (MB/s, wire bytes) $PER_RAIL")
    MD+=("| balance, 4 rails, 1 down | three rails' worth (3/4 of $four): $three MB/s | $DEGRADED MB/s | **$ratio4 %** | >= 90 % |")
    if [ -n "${one:-}" ]; then
      NOTES+=("balance, 4 rails, 1 down, against 3 x the chain run's one-rail figure ($(calc "3 * $one") MB/s): $(calc "100 * $DEGRADED / (3 * $one)") %; healthy 4 rails against 4 x one rail: $(calc "100 * $four / (4 * $one)") %")
    fi
  else
    echo "  balance run FAILED (server exit $SRC, client exit $CRC)"
    NOTES+=("degraded balance run failed")
    KEEP_LOGS=1
  fi
  # The link's own ceiling, for reference: tbf at MBIT Mbit/s = MBIT/8 MB/s of IP payload
  NOTES+=("tbf at $MBIT Mbit/s is $(calc "$MBIT / 8") MB/s of wire bytes per rail (headers included)")
}

# ---- fail-back ------------------------------------------------------------------------
# failback_run I: sets FB_MS (port up -> throughput back), FB_HOLD_MS (the same minus the
# hold), FB_PRIMARY FB_DEGRADED (MB/s)
failback_run() {
  local i=$1 ta tb tup half
  half=$((MBIT / 2))
  lab_start "$LABNAME" 2 2
  for h in 0 1; do shape $h 0 "$MBIT" >/dev/null; shape $h 1 "$half" >/dev/null; done
  PAIR_ENV=("RERAIL_PROGRESS_TIMEOUT=$DELTA" "RERAIL_FAILBACK_HOLD=$HOLD")
  pair_start "fb.$i" --conns 4 --max-size 1M --quiet --duration 11 --timeout 60 --stall-report \
    --completion-log "$WORK/fb.$i.clog" --seed "$i"
  FB_MS="?" FB_PRIMARY="?" FB_DEGRADED="?"
  pair_wait_traffic || { pair_wait 60; lab_cleanup; return 1; }
  nap 1
  ta=$EPOCHREALTIME
  nap 2.5
  tb=$EPOCHREALTIME
  link 0 0 down
  nap 2
  link 0 0 up
  tup=$T_AFTER
  pair_wait 120
  lab_cleanup
  ok_pair || return 1
  FB_PRIMARY=$(clog_rate "$WORK/fb.$i.clog" "$ta" "$tb")
  FB_DEGRADED=$(clog_rate "$WORK/fb.$i.clog" "$(calc "$tup - 1.2")" "$(calc "$tup - 0.2")")
  # the first 250 ms window (sliding by 10 ms) after the port came up whose rate is
  # >= 90 % of the primary's; its end is when the throughput was back
  FB_MS=$(python3 - "$WORK/fb.$i.clog" "$tup" "$FB_PRIMARY" <<'EOF'
import sys
tup, prim = float(sys.argv[2]), float(sys.argv[3])
rec = [(float(l.split()[0]), int(l.split()[1])) for l in open(sys.argv[1]) if l[0] != "#"]
w = 0.25
t = tup
end = max(r[0] for r in rec)
while t + w <= end:
    mbs = sum(b for ts, b in rec if t <= ts < t + w) / w / 1e6
    if mbs >= 0.9 * prim:
        print("%.0f" % ((t + w - tup) * 1e3))
        break
    t += 0.01
else:
    print("?")
EOF
)
}

part_failback() {
  local i vals=() prims=() degs=()
  echo "---- failback: $FB_TRIALS_N runs; rail0 $MBIT Mbit/s, rail1 $((MBIT / 2)) Mbit/s; rail0 down for 2 s; hold $HOLD ms"
  for ((i = 1; i <= FB_TRIALS_N; i++)); do
    if failback_run "$i"; then
      printf '  run %d: primary %s MB/s, on the backup %s MB/s; back to 90 %% of the primary %s ms after the port came up\n' \
        "$i" "$FB_PRIMARY" "$FB_DEGRADED" "$FB_MS"
      vals+=("$FB_MS") prims+=("$FB_PRIMARY") degs+=("$FB_DEGRADED")
    else
      echo "  run $i: FAILED (server exit $SRC, client exit $CRC; logs $PAIR_DIR)"
      NOTES+=("failback run $i failed")
      KEEP_LOGS=1
    fi
  done
  read -r n p50 p99 mn mx mean <<<"$(stats "${vals[@]}")"
  local target=$((HOLD + 1000)) verdict
  verdict=$(is_true "$p99 <= $target" 2>/dev/null && echo "within hold + 1 s" || echo "over hold + 1 s in some runs")
  echo "  port up -> primary's throughput: p50 $p50 ms, max $mx ms ($n runs); hold $HOLD ms + 1 s = $target ms: $verdict"
  MD+=("| fail-back (rail0 down 2 s, up) | $n | $p50 ms | $mx ms | hold $HOLD ms + 1 s = $target ms | $verdict |")
}

echo "failover benchmark: $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${PARTS[@]}"; do
  case $p in
    link | silent) part_resume "$p" ;;
    degraded) part_degraded ;;
    failback) part_failback ;;
    *) echo "unknown part '$p' (link silent degraded failback)" >&2; exit 2 ;;
  esac
done

echo
echo "==== markdown for bench/RESULTS.md"
cat <<EOF
## Failover (network lab)

\`bench/failover_bench.sh BUILD_DIR\` (as root; $(date -u +%Y-%m-%d), $(nproc) cores, kernel $(uname -r),
shared machine: load $(cut -d' ' -f1-3 /proc/loadavg)). Two hosts (network namespaces) joined by veth
rails through per-rail bridges; the NCCL-faithful harness with 4 connections of checksummed traffic
(every byte checked); δ = RERAIL_PROGRESS_TIMEOUT = $DELTA ms, fail-back hold $HOLD ms.

EOF
rows_resume=() rows_deg=() rows_fb=()
for r in "${MD[@]}"; do
  case $r in
    "| NIC"* | "| silent"*) rows_resume+=("$r") ;;
    "| chain"* | "| balance"*) rows_deg+=("$r") ;;
    *) rows_fb+=("$r") ;;
  esac
done
if [ ${#rows_resume[@]} -gt 0 ]; then
  echo "Time until traffic resumes after a rail fails under full load (receiver: from the fault until"
  echo "messages complete again; backup: until 512 KB left on the backup rail; stall: the longest gap"
  echo "between receive completions that starts within -50..+300 ms of the fault; no-fault gap: the"
  echo "same measure 1 s before the fault, the noise floor of this machine):"
  echo
  echo "| fault | trials | receiver p50 | receiver p99 | backup p50 / p99 | stall p50 / p99 | no-fault gap p50 / p99 | vs δ + 100 ms |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows_resume[@]}"
  echo
fi
if [ ${#rows_deg[@]} -gt 0 ]; then
  echo "Throughput while degraded, every rail shaped to $MBIT Mbit/s on both hosts (baselines in the same run):"
  echo
  echo "| mode | healthy baseline | degraded | ratio | target |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows_deg[@]}"
  echo
fi
if [ ${#rows_fb[@]} -gt 0 ]; then
  echo "Fail-back: from the port coming up until the throughput is back at 90 % of the primary's"
  echo "(rail0 $MBIT Mbit/s, rail1 $((MBIT / 2)) Mbit/s, 250 ms windows):"
  echo
  echo "| case | runs | p50 | max | target | verdict |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows_fb[@]}"
  echo
fi
for n in "${NOTES[@]}"; do echo "- $n"; done
if [ "${KEEP_LOGS:-0}" = 1 ]; then echo; echo "logs: $WORK"; else rm -rf "$WORK"; fi
