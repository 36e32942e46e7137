#!/bin/bash
# How fast the verbs rail resumes after a failure, in the Soft-RoCE lab: the NCCL-faithful
# harness as two "hosts" A (sends) and B (receives), 2 connections over rxe0/rxe1 <-> rxe2/rxe3
# with RERAIL_TRANSPORT=verbs, every byte checked. One harness pair per kind runs while the
# script fails host A's rail 0 TRIALS times, each time healing it and waiting for traffic to
# fail back before the next trial:
#   link    ip link set vethA0 down (rxe0's port goes DOWN): target p50 <= 100 ms
#   silent  RoCE on rail 0 dropped by one nft rule, links and ports up: target <= δ + 100 ms
# "Resumes": the receiver logs every completion (--completion-log, wall clock); the fault's gap
# is the longest gap between consecutive completions that starts within 50 ms before the fault
# command started and 300 ms after it returned, and traffic resumed at that gap's end. The
# fault command (ip, nft) takes 10-200 ms to start and run in the emulated guest, so the time
# to resume is given from its start (an upper bound) and from its return (a lower bound); the
# gap's length is a second upper bound (it starts at the last completion before the fault),
# and the plugin's own figure (the sender's failover event: how long its traffic stood still)
# is printed beside them.
#
# Run inside the lab:
#   test/lab/rxe/rxelab.sh run --timeout 900 -- bench/verbs_failover_bench.sh BUILD_DIR [KIND...]
# Environment (set it inside the command: `-- env TRIALS=5 bench/...`, the lab passes on only
# RERAIL_* and a few others): TRIALS (20), DELTA (RERAIL_PROGRESS_TIMEOUT, 1000). Ends with a
# markdown table for bench/RESULTS.md.
set -uo pipefail
build=$(cd "${1:?usage: verbs_failover_bench.sh BUILD_DIR [link|silent ...]}" && pwd)
shift
kinds=("$@")
[[ ${#kinds[@]} -gt 0 ]] || kinds=(link silent)
trials=${TRIALS:-20} delta=${DELTA:-1000}
work=$(mktemp -d /tmp/verbs-fo-bench.XXXXXX)
export LD_LIBRARY_PATH="$build/net_plugin" RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 HNET_LOG_TIME=1
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET RERAIL_FAILBACK_HOLD=500 RERAIL_PROGRESS_TIMEOUT=$delta
H=$build/test/harness/rerail-harness
md=()

# stats V...: "n p50 p90 max" (nearest rank), ms
stats() {
  python3 - "$@" <<'EOF'
import math, sys
v = sorted(float(x) for x in sys.argv[1:] if x not in ("?", ""))
if not v:
    print("0 ? ? ?"); sys.exit()
pct = lambda p: v[max(0, math.ceil(p / 100 * len(v)) - 1)]
print("%d %.1f %.1f %.1f" % (len(v), pct(50), pct(90), v[-1]))
EOF
}
# resume CLOG TB TA: the gap the fault caused, "STALL RESUME_TB RESUME_TA" in ms ("? ? ?" when
# none): the longest gap between consecutive completions that starts within [TB - 50 ms, TA +
# 300 ms] and ends after TB; its length, and its end minus TB and minus TA.
resume() {
  python3 - "$1" "$2" "$3" <<'EOF' 2>/dev/null || echo "? ? ?"
import sys
tb, ta = float(sys.argv[2]), float(sys.argv[3])
ts = sorted(float(l.split()[0]) for l in open(sys.argv[1]) if l[0] != "#")
best = None
for a, b in zip(ts, ts[1:]):
    if tb - 0.05 <= a <= ta + 0.3 and b > tb and (best is None or b - a > best[1] - best[0]):
        best = (a, b)
print("? ? ?" if best is None else "%.1f %.1f %.1f" % ((best[1] - best[0]) * 1e3, (best[1] - tb) * 1e3, (best[1] - ta) * 1e3))
EOF
}
failbacks() { grep -c 'health: failback' "$1"; }

# the nft table and chain exist before the first trial, so a silent fault is one rule
nft add table inet rxelab
nft add chain inet rxelab input '{ type filter hook input priority 0; policy accept; }'

for kind in "${kinds[@]}"; do
  d=$work/$kind
  mkdir -p "$d/rdv"
  per=8; [[ $kind == silent ]] && per=$((10 + delta / 1000))   # seconds a trial takes under TCG
  secs=$((trials * per + 5))   # the trials fit in the schedule, which then ends on its own
  common=(--rendezvous "$d/rdv" --conns 2 --duration "$secs" --max-size 256K --inflight 4 --timeout $((secs + 120))
          --stall-report)
  RERAIL_SOCKET_IFNAME='=vethB0,vethB1' RERAIL_IB_HCA='=rxe2,rxe3' RERAIL_HEALTH_PATH=/dev/shm/rr-fob-B \
    "$H" --role server "${common[@]}" --completion-log "$d/clog" >"$d/server.log" 2>&1 &
  spid=$!
  RERAIL_SOCKET_IFNAME='=vethA0,vethA1' RERAIL_IB_HCA='=rxe0,rxe1' RERAIL_HEALTH_PATH=/dev/shm/rr-fob-A \
    "$H" --role client "${common[@]}" >"$d/client.log" 2>&1 &
  cpid=$!
  for ((i = 0; i < 600; i++)); do [[ -e $d/rdv/client.traffic && -e $d/rdv/server.traffic ]] && break; sleep 0.1; done
  sleep 1
  tbs=() tas=()
  for ((t = 1; t <= trials; t++)); do
    kill -0 "$cpid" 2>/dev/null || { echo "verbs_failover_bench: the sender exited early"; break; }
    fb=$(failbacks "$d/client.log")
    if [[ $kind == link ]]; then
      tbs+=("$EPOCHREALTIME")
      ip link set vethA0 down
      tas+=("$EPOCHREALTIME")
      sleep 1
      rxefault link 0 up A
    else
      tbs+=("$EPOCHREALTIME")
      nft add rule inet rxelab input iifname '{ vethA0, vethB0 }' udp dport 4791 drop comment '"rail0"'
      tas+=("$EPOCHREALTIME")
      sleep "$(awk -v d="$delta" 'BEGIN { print d / 1000 + 1 }')"
      rxefault drop 0 off
    fi
    # traffic back on rail 0 (every connection failed back) before the next trial
    for ((i = 0; i < 100; i++)); do [[ $(failbacks "$d/client.log") -ge $((fb + 2)) ]] && break; sleep 0.1; done
    sleep 0.5
  done
  # the receiver writes its completion log when the schedule ends
  wait "$cpid"; crc=$?
  wait "$spid"; src=$?
  if [[ $crc -ne 0 || $src -ne 0 ]]; then
    echo "verbs_failover_bench: $kind: sender exit $crc, receiver exit $src; the plugin's events and errors:"
    grep -hE 'health: |ERROR|WARN' "$d/client.log" "$d/server.log" | tail -40
  fi
  [[ -n ${FOB_DEBUG:-} ]] && { grep -E 'health:|harness' "$d/client.log" | head -30; head -3 "$d/clog"; wc -l "$d/clog"; }
  stalls=() rb=() ra=() plug=()
  echo "verbs_failover_bench: $kind, ${#tbs[@]} trials (δ = $delta ms)"
  for ((t = 0; t < ${#tbs[@]}; t++)); do
    tb=${tbs[t]} ta=${tas[t]}
    read -r st b a <<<"$(resume "$d/clog" "$tb" "$ta")"
    p=$(grep 'health: failover vethA0 -> vethA1' "$d/client.log" |
      awk -v tf="$tb" '{ sub(/^@/, "", $2); if ($2 + 0 >= tf) { for (i = 1; i <= NF; i++) if ($i == "stalled") { print $(i + 1); exit } } }')
    stalls+=("$st") rb+=("$b") ra+=("$a") plug+=("${p:-?}")
    echo "  fault $((t + 1)) (command ran $tb .. $ta, $(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.0f", (a - b) * 1e3 }') ms): traffic resumed $b ms after the command started, $a ms after it returned; receiver's stall $st ms; sender's failover event: stalled ${p:-?} ms"
  done
  read -r n s50 s90 smax <<<"$(stats "${stalls[@]}")"
  read -r _ b50 b90 bmax <<<"$(stats "${rb[@]}")"
  read -r _ a50 a90 amax <<<"$(stats "${ra[@]}")"
  read -r _ p50 p90 pmax <<<"$(stats "${plug[@]}")"
  if [[ $kind == link ]]; then target="p50 <= 100 ms"; else target="<= δ + 100 = $((delta + 100)) ms"; fi
  md+=("| $kind | $n | $b50 / $b90 / $bmax | $a50 / $a90 / $amax | $s50 / $s90 / $smax | $p50 / $p90 / $pmax | $target |")
done
echo
echo "| fault | trials | resumed after the fault command started, ms p50 / p90 / max | after it returned | receiver's stall (gap between completions) | sender's failover event: stall | target |"
echo "|---|---:|---:|---:|---:|---:|---|"
printf '%s\n' "${md[@]}"
