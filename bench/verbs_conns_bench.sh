#!/bin/bash
# Connections per process over verbs, in the Soft-RoCE lab: rerail's verbs rail and NCCL's own
# IB transport, one after the other in the same guest. For each count N and each transport, the
# harness as host A (client, sends) and host B (server, receives) with N connections, small
# checked messages for a few seconds:
#   rerail   both NICs of each host, RERAIL_BACKUPS=1: every connection an endpoint on each NIC
#   nccl-ib  NCCL's ncclNetIb (harness --plugin nccl-ib), one NIC per host (rxe0 / rxe2): NCCL
#            has no warm backup, a connection is one QP on one NIC
# Reported per count: setup time (both ranks start to the sender's every connection up), each
# rank's resident memory (Rss of smaps_rollup: mem_of) and pinned memory (VmPin: what ibv_reg_mr pinned), the QPs,
# CQs and MRs the rxe devices of each host hold (rdma resource show, summed over the host's
# NICs), the descriptors each rank holds. Then per connection side (the differences between two
# consecutive counts divided by the difference in connections, so fixed costs — the plugin,
# libnccl, the harness, libibverbs — drop out) and rerail / NCCL for each.
#
# usage (root):  bench/verbs_conns_bench.sh BUILD_DIR [COUNTS...]     default counts: 64 256
# A count may carry one setting of its own: 1024@RERAIL_PROGRESS_TIMEOUT=10000 (both nets).
# It boots the lab itself (test/lab/rxe/rxelab.sh run) and prints one line per count and net.
#   RERAIL_BENCH_NETS     which transports, in order (default "rerail nccl-ib")
#   RERAIL_BENCH_DURATION seconds of traffic per run (default 10; the figures are the last
#                         sample taken before its last two seconds)
#   RERAIL_BENCH_LAB_MEM  the lab guest's memory in MiB (default 3072; both ranks live in the
#                         one guest: 2,048 connections need ~8 GiB)
#   RERAIL_BENCH_LAB_TIMEOUT  the lab's time limit in s (default 580; every count runs in one
#                         boot, and 2,048 connections under TCG take minutes to set up)
#   NCCL_LIB              the libnccl.so.2 whose IB transport is measured (bench/find_libnccl.sh)
#   RERAIL_BENCH_BACKUPS  rerail's RERAIL_BACKUPS (default 1; 0 measures a connection without its
#                         warm backup endpoint)
#   RERAIL_BENCH_LOG_GREP a failed run prints its ranks' log lines that match (extended regexp)
#   RERAIL_BENCH_TELEMETRY 1: rerail's ranks keep their telemetry (.prom at exit), and each count
#                         adds a line per rank: messages, data writes and the control work
#                         requests around them (ring writes, credit words, probes, drains),
#                         per connection and second of the run and per message
#                         (bench/RESULTS.md §11, addendum "scale2048")
#   RERAIL_CONNECT_TIMEOUT (the plugin's): the default 30 s sets 2,048 connections up under TCG
#                         since a peer process's answers to any connection count for all of them
#                         (bench/RESULTS.md §11, addendum "branch peerprog")
# While connections are being set up, two watchers (bench/lab_setup_diag.sh) note the first
# connect whose SYN went unanswered twice, and the first setup message or connection left
# untaken for 9-12 s, and print the guest's TCP queues and counters at that moment; each line
# ends with the SYN and listen-queue counters' growth.
set -uo pipefail
if [ "${RXELAB:-}" != 1 ]; then
  top="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  build=$(readlink -f "$1"); shift
  exec "$top/test/lab/rxe/rxelab.sh" run --timeout "${RERAIL_BENCH_LAB_TIMEOUT:-580}" --mem "${RERAIL_BENCH_LAB_MEM:-3072}" -- \
    "$top/bench/verbs_conns_bench.sh" "$build" "${@:-64 256}"
fi
build=$(cd "$1" && pwd); shift
# The guest's input backlog per CPU (net.core.netdev_max_backlog, 1000 by default): rxe's packets
# reach the peer's veth through it, and hundreds of connections' packets at once overflow it
# (22,077 drops in one 512-connection run, nearly every connection then silent on both rails). A real
# NIC has its own rings; the emulated one has only this queue.
sysctl -qw net.core.netdev_max_backlog=65536 || echo "verbs_conns_bench: could not raise net.core.netdev_max_backlog"
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=bench/rxe_nets.sh
source "$here/rxe_nets.sh"
# shellcheck source=bench/find_libnccl.sh
source "$here/find_libnccl.sh"
# shellcheck source=bench/lab_setup_diag.sh
source "$here/lab_setup_diag.sh"
harness=$build/test/harness/rerail-harness
export LD_LIBRARY_PATH="$build/net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_DEBUG=WARN
counts=$*
[ -n "$counts" ] || counts="64 256"
nets=${RERAIL_BENCH_NETS:-rerail nccl-ib}
duration=${RERAIL_BENCH_DURATION:-10}
find_libnccl "$build"
case " $nets " in
  *" nccl-ib "*) [ -n "$NCCL_LIB" ] || { echo "verbs_conns_bench: no libnccl.so.2 found (set NCCL_LIB)"; exit 2; } ;;
esac

# Both ranks' resident and pinned memory (KiB), "A_rss A_pin B_rss B_pin", in one program start:
# under TCG each costs 0.1-1 s, and the sample must be taken while both ranks still run.
# Resident is smaps_rollup's Rss (the page tables walked), not VmRSS: the lab's kernel (6.1) counts
# a thread's page insertions into VmRSS only every 64 page faults of that thread, and rxe maps
# each QP's and CQ's rings (68-296 KiB each) into the process without a fault, so VmRSS left out
# whatever queues were made since a thread's last 64 faults: most of NCCL's (bench/RESULTS.md §11,
# addendum "vmem"). RERAIL_BENCH_RSS=status reads VmRSS as before. VmPin is exact either way.
mem_of() {
  local rss_file=smaps_rollup rss_key=Rss:
  [ "${RERAIL_BENCH_RSS:-rollup}" = status ] && rss_file=status rss_key=VmRSS:
  awk -v key="$rss_key" 'FNR == 1 {f++; g = int((f + 1) / 2)} $1 == key && !(g in r) {r[g] = $2} $1 == "VmPin:" {p[g] = $2}
       END {printf "%s %s %s %s", (1 in r) ? r[1] : "-", (1 in p) ? p[1] : "-", (2 in r) ? r[2] : "-", (2 in p) ? p[2] : "-"}' \
    "/proc/$1/$rss_file" "/proc/$1/status" "/proc/$2/$rss_file" "/proc/$2/status" 2>/dev/null
}
# The guest's CPU time so far (ticks, all CPUs): "user system softirq idle" from /proc/stat; rxe
# does its work in softirq and its kernel threads, so what the ranks leave of two vCPUs shows here.
cpu_now() { awk '$1 == "cpu" {print $2 + $3, $4 + $7, $8, $5 + $6; exit}' /proc/stat; }
# A rank's CPU time so far (ticks: utime + stime, all threads).
rank_cpu() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo -; }
# Sums of one rank's kept .prom counter (over its rails): prom_sum DIR METRIC [LABEL_MATCH].
prom_sum() {
  cat "$1"/rerail-*.prom 2>/dev/null | awk -v m="$2{" -v q="${3:-}" '
    index($0, m) == 1 && (q == "" || index($0, q)) {n += $NF} END {printf "%.6f\n", n}'
}
fds_of() { local f=(/proc/"$1"/fd/*); [ -e "${f[0]}" ] && echo "${#f[@]}" || echo -; }
# The QPs, CQs and MRs (as "qp/cq/mr") the named rdma devices hold together, from a saved
# `rdma resource show`.
res() {
  local show=$1; shift
  awk -v devs=" $* " '
    {d = $2; sub(/:$/, "", d); if (index(devs, " " d " ") == 0) next
     for (i = 3; i < NF; i++) {if ($i == "qp") q += $(i + 1); if ($i == "cq") c += $(i + 1); if ($i == "mr") m += $(i + 1)}}
    END {printf "%d/%d/%d", q, c, m}' <<<"$show"
}
# What a side runs with for NET: sets side_env (VAR=VALUE list for env(1)) and side_devs.
side_setup() {
  local net=$1 side=$2
  case $net in
    rerail)
      # The backup's NIC too; set-up goes out of band (the first veth's address, over lo).
      if [ "$side" = A ]; then
        side_env=(RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 "RERAIL_BACKUPS=${RERAIL_BENCH_BACKUPS:-1}" "RERAIL_IB_HCA==rxe0,rxe1"
                  "RERAIL_SOCKET_IFNAME==vethA0,vethA1" RERAIL_HEALTH_PATH=/dev/shm/rr-conns-A)
        side_devs="rxe0 rxe1"
      else
        side_env=(RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1 "RERAIL_BACKUPS=${RERAIL_BENCH_BACKUPS:-1}" "RERAIL_IB_HCA==rxe2,rxe3"
                  "RERAIL_SOCKET_IFNAME==vethB0,vethB1" RERAIL_HEALTH_PATH=/dev/shm/rr-conns-B)
        side_devs="rxe2 rxe3"
      fi ;;
    nccl-ib)
      rxe_net_env nccl-ib "$side" || return 2
      side_env=("${rxe_env[@]}")
      if [ "$side" = A ]; then side_devs="rxe0 rxe1"; else side_devs="rxe2 rxe3"; fi ;;
    *) echo "verbs_conns_bench: unknown net '$net' (rerail, nccl-ib)"; return 2 ;;
  esac
}

results=$(mktemp /tmp/verbs-conns-results.XXXXXX)
echo "verbs_conns_bench: counts $counts, nets $nets; NCCL ${NCCL_LIB:+$(libnccl_version "$NCCL_LIB") ($NCCL_LIB)}"
echo "net      conns  setup_s  A_rss_kib  A_pin_kib  B_rss_kib  B_pin_kib  A_qp/cq/mr      B_qp/cq/mr      A_fds B_fds  tcp counters grown"
for count in $counts; do
  # COUNT@VAR=VALUE: that count runs with VAR=VALUE too (both nets; NCCL ignores RERAIL_*), e.g.
  # 1024@RERAIL_PROGRESS_TIMEOUT=10000 beside 1024 at the default in one boot.
  n=${count%%@*} count_env=()
  [ "$count" != "$n" ] && count_env=("${count#*@}")
  for net in $nets; do
    # Per connection and rank: a listener (server), each endpoint's setup socket, and the verbs
    # objects' file descriptors; 8 per connection leaves room.
    ulimit -n $((n * 8 + 256))
    work=$(mktemp -d /tmp/verbs-conns.XXXXXX)
    mkdir -p "$work/rdv"
    plugin=$(rxe_net_plugin "$net") || exit 2
    common=(--plugin "$plugin" --rendezvous "$work/rdv" --conns "$n" --duration "$duration" --min-size 0 --max-size 4K
            --inflight 1 --group 1 --timeout 400 --rdv-timeout 200 --quiet)
    before=$(setup_diag_counters)
    t0=$(date +%s.%N)
    side_setup "$net" B || exit 2
    b_devs=$side_devs
    side_env+=("${count_env[@]}")
    tel_env() { # the kept telemetry of side $1 (rerail, RERAIL_BENCH_TELEMETRY=1)
      [ "$net" = rerail ] && [ "${RERAIL_BENCH_TELEMETRY:-0}" = 1 ] || return 0
      mkdir -p "$work/tel-$1"
      side_env+=("RERAIL_TELEMETRY_DIR=$work/tel-$1" RERAIL_TELEMETRY_KEEP=1 RERAIL_TELEMETRY_INTERVAL=3600000)
    }
    tel_env B
    env "${side_env[@]}" "$harness" --role server "${common[@]}" >"$work/server.log" 2>&1 &
    server=$!
    side_setup "$net" A || exit 2
    a_devs=$side_devs
    side_env+=("${count_env[@]}")
    tel_env A
    env "${side_env[@]}" "$harness" --role client "${common[@]}" >"$work/client.log" 2>&1 &
    client=$!
    setup_diag_watch "$client" "$work/diag" &
    watch=$!
    setup_diag_stuck_watch "$client" "$work/stuck" &
    stuck_watch=$!
    while [ ! -e "$work/rdv/client.traffic" ] && kill -0 "$client" 2>/dev/null; do sleep 0.05; done
    t_up=$(date +%s.%N)
    for _ in $(seq 1 300); do [ -e "$work/diag.busy" ] || [ -e "$work/stuck.busy" ] || break; sleep 0.1; done
    kill "$watch" "$stuck_watch" 2>/dev/null; wait "$watch" "$stuck_watch" 2>/dev/null
    # Sampled again and again until two seconds before the traffic ends, the last whole sample
    # kept: rerail makes a connection's bounce buffers at its first small send, and under TCG a
    # thousand connections driven round-robin take seconds to all have sent.
    fd_a=- fd_b=- rss_a=- pin_a=- rss_b=- pin_b=- show=""
    t_traffic=${EPOCHREALTIME/./}
    read -r cpu0_u cpu0_s cpu0_si cpu0_i <<<"$(cpu_now)"
    rc0_a=$(rank_cpu "$client") rc0_b=$(rank_cpu "$server") cpu_line=""
    while [ $(( ${EPOCHREALTIME/./} - t_traffic )) -lt $(( (duration - 2) * 1000000 )) ]; do
      sleep 1
      s_fd_a=$(fds_of "$client") s_fd_b=$(fds_of "$server")
      read -r s_rss_a s_pin_a s_rss_b s_pin_b <<<"$(mem_of "$client" "$server")"
      s_show=$(rdma resource show 2>/dev/null)
      case "$s_fd_a $s_fd_b $s_rss_a $s_pin_a $s_rss_b $s_pin_b" in *-*) break ;; esac # a rank ended
      fd_a=$s_fd_a fd_b=$s_fd_b rss_a=$s_rss_a pin_a=$s_pin_a rss_b=$s_rss_b pin_b=$s_pin_b show=$s_show
      # Where the guest's two vCPUs went since traffic started (shares of all CPU time), and each
      # rank's share of one vCPU.
      read -r c_u c_s c_si c_i <<<"$(cpu_now)"
      rc_a=$(rank_cpu "$client") rc_b=$(rank_cpu "$server")
      cpu_line=$(awk -v u=$((c_u - cpu0_u)) -v s=$((c_s - cpu0_s)) -v si=$((c_si - cpu0_si)) -v i=$((c_i - cpu0_i)) \
        -v a="$rc0_a $rc_a" -v b="$rc0_b $rc_b" -v us=$(( ${EPOCHREALTIME/./} - t_traffic )) -v hz="$(getconf CLK_TCK)" 'BEGIN {
          t = u + s + si + i; if (t <= 0) exit; split(a, x, " "); split(b, y, " ")
          printf "guest CPU over %.1f s of traffic: user %.0f%%, system %.0f%%, softirq %.0f%%, idle %.0f%%; client %.0f%%, server %.0f%% of one vCPU",
            us / 1e6, 100 * u / t, 100 * s / t, 100 * si / t, 100 * i / t, 100 * (x[2] - x[1]) / hz / (us / 1e6), 100 * (y[2] - y[1]) / hz / (us / 1e6)}')
    done
    line=$(printf '%-7s  %5d  %7.1f  %9s  %9s  %9s  %9s  %-14s  %-14s  %5s %5s' "$net" "$n" \
      "$(awk -v a="$t0" -v b="$t_up" 'BEGIN {print b - a}')" "$rss_a" "$pin_a" "$rss_b" "$pin_b" \
      "$(res "$show" "$a_devs")" "$(res "$show" "$b_devs")" "$fd_a" "$fd_b")
    wait "$client"; crc=$?
    wait "$server"; src=$?
    # The counters that grew during this run (SYNs unanswered, listen queues full, drops).
    grown=$(awk -v a="$before" -v b="$(setup_diag_counters)" 'BEGIN {
      na = split(a, x, " "); for (i = 1; i <= na; i++) {split(x[i], kv, "="); v[kv[1]] = kv[2]}
      nb = split(b, y, " "); for (i = 1; i <= nb; i++) {split(y[i], kv, "=")
        if (kv[2] ~ /^[0-9]+$/ && kv[2] - v[kv[1]] != 0) printf "%s+%d ", kv[1], kv[2] - v[kv[1]]}}')
    [ -n "$cpu_line" ] && echo "  $net $count: $cpu_line"
    # Control requests per connection and second of traffic (RERAIL_BENCH_DURATION; setup's few
    # per connection are counted in, nothing of them is timed: no connection is busy before its
    # traffic) and per message, from each rank's kept telemetry. On the sender the control
    # requests are its send-queue requests less its data writes; on the receiver every
    # send-queue request is control (clear-to-sends, acks, credit words, probes, drains).
    if [ "$net" = rerail ] && [ "${RERAIL_BENCH_TELEMETRY:-0}" = 1 ]; then
      run_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
      for side in A B; do
        d=$work/tel-$side dir=tx; [ "$side" = B ] && dir=rx
        msgs=$(prom_sum "$d" rerail_rail_messages_total "direction=\"$dir\"")
        writes=$(prom_sum "$d" rerail_rail_requests_total "direction=\"tx\"")
        wrs=$(prom_sum "$d" rerail_rail_work_requests_total 'queue="send"')
        bells=$(prom_sum "$d" rerail_rail_doorbells_total 'queue="send"')
        cpl=$(prom_sum "$d" rerail_rail_completions_total 'queue="send"')
        kinds=""
        for k in probe signal credit; do kinds="$kinds $(prom_sum "$d" rerail_rail_control_requests_total "kind=\"$k\"")"; done
        drives=$(prom_sum "$d" rerail_background_drives_total)
        awk -v side="$side" -v n="$n" -v cnt="$count" -v s="$run_s" -v d="$duration" -v m="$msgs" -v w="$writes" -v r="$wrs" -v b="$bells" -v c="$cpl" -v net="$net" \
          -v k="$kinds" -v dr="$drives" 'BEGIN {
          ctl = r - w; split(k, x, " ")
          printf "  %s %s telemetry %s: run %.1f s, messages %d, data writes %d, send-queue requests %d (doorbells %d, completions %d): control %d = %.2f per connection per s of traffic, %.2f per message\n",
            net, cnt, side, s, m, w, r, b, c, ctl, ctl / n / d, (m > 0 ? ctl / m : 0)
          printf "  %s %s telemetry %s: of them probes %d, signals %d, credit words %d (%.2f / %.2f / %.2f per connection per s); background drives %d (%.1f per connection per s)\n",
            net, cnt, side, x[1], x[2], x[3], x[1] / n / d, x[2] / n / d, x[3] / n / d, dr, dr / n / d}'
      done
      # Where the connector's connect() time went, per connection (means over its connects), and
      # what became of the backups not up when it went on (bench/RESULTS.md §11, addendum "vsetup").
      d=$work/tel-A phases=""
      for ph in first_rail other_rails install; do phases="$phases $(prom_sum "$d" rerail_connect_time_seconds_total "phase=\"$ph\"")"; done
      awk -v cnt="$count" -v net="$net" -v c="$(prom_sum "$d" rerail_connects_total)" -v p="$phases" \
        -v w="$(prom_sum "$d" rerail_connect_settle_waits_total)" -v df="$(prom_sum "$d" rerail_connect_rails_deferred_total)" \
        -v du="$(prom_sum "$d" rerail_connect_deferred_rails_up_total)" -v dm="$(prom_sum "$d" rerail_connect_deferred_window_seconds_total)" 'BEGIN {
        split(p, x, " "); k = c > 0 ? c : 1
        printf "  %s %s connect A: %d comms; mean ms to a rail up %.0f, then to the rails decided %.0f, then handed out %.0f; settle waits %d; backups deferred %d, up since %d (mean window %.0f ms)\n",
          net, cnt, c, 1e3 * x[1] / k, 1e3 * x[2] / k, 1e3 * x[3] / k, w, df, du, (du > 0 ? 1e3 * dm / du : 0)}'
      # Each rank's own work in setup (s, summed): inside NCCL's connect()/accept() calls, and of
      # it and of the reopens behind, opening and connecting rails' endpoints.
      for side in A B; do
        d=$work/tel-$side
        awk -v cnt="$count" -v net="$net" -v side="$side" -v cc="$(prom_sum "$d" rerail_setup_call_seconds_total 'call="connect"')" \
          -v ca="$(prom_sum "$d" rerail_setup_call_seconds_total 'call="accept"')" -v eo="$(prom_sum "$d" rerail_setup_endpoint_seconds_total 'step="open"')" \
          -v ec="$(prom_sum "$d" rerail_setup_endpoint_seconds_total 'step="connect"')" \
          -v nc="$(prom_sum "$d" rerail_setup_calls_total 'call="connect"')" -v na="$(prom_sum "$d" rerail_setup_calls_total 'call="accept"')" 'BEGIN {
          printf "  %s %s setup work %s: inside connect() %.1f s (%d calls), accept() %.1f s (%d calls); endpoints opened in %.1f s, connected in %.1f s\n",
            net, cnt, side, cc, nc, ca, na, eo, ec}'
      done
    fi
    if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
      echo "$line  $grown"
      echo "$line" >>"$results"
    else
      echo "$line  $grown FAILED (client $crc, server $src)"
      # Each rank's first errors, then its warnings counted by kind (numbers and addresses out),
      # and the lines RERAIL_BENCH_LOG_GREP (an extended regexp) picks, whole.
      for side in client server; do
        [ -n "${RERAIL_BENCH_LOG_GREP:-}" ] && grep -E "$RERAIL_BENCH_LOG_GREP" "$work/$side.log" | head -60 | sed "s/^/  $side: /"
        grep -m3 -E 'ERROR|no rail reached' "$work/$side.log" | sed "s/^/  $side: /"
        grep 'WARN' "$work/$side.log" | sed -E 's/^.* WARN [^ ]+ (\[[^]]*\] )?//; s/[0-9]+(\.[0-9]+)*/N/g' | sort | uniq -c |
          sort -rn | head -8 | sed "s/^/  $side warns: /"
      done
    fi
    [ "${#count_env[@]}" -gt 0 ] && echo "  ($net $n above ran with ${count_env[*]})"
    [ -s "$work/diag" ] && { echo "-- $net $n: a connect's SYN went unanswered twice during setup:"; cat "$work/diag"; }
    [ -s "$work/stuck" ] && { echo "-- $net $n: bytes or connections left untaken during setup:"; cat "$work/stuck"; }
    rm -rf "$work"
  done
done

# Per connection side, between consecutive counts of one net, and rerail / NCCL where both ran.
echo
echo "per connection side (KiB; QP/CQ/MR per connection and host; setup ms per connection):"
awk '
  function per(a, b) {return (b - a) / dn}
  function split3(s, o) {split(s, o, "/")}
  {net = $1; n = $2
   if (net in last_n) {
     dn = n - last_n[net]; p = last[net]; split(p, q, " ")
     split3(q[8], qa); split3($8, ca); split3(q[9], qb); split3($9, cb)
     key = last_n[net] "-" n
     row[net, key] = sprintf("%.0f %.0f %.0f %.0f %.2f/%.2f/%.2f %.2f/%.2f/%.2f %.1f",
       per(q[4], $4), per(q[5], $5), per(q[6], $6), per(q[7], $7),
       per(qa[1], ca[1]), per(qa[2], ca[2]), per(qa[3], ca[3]), per(qb[1], cb[1]), per(qb[2], cb[2]), per(qb[3], cb[3]),
       1000 * per(q[3], $3))
     if (!(key in seen)) {seen[key] = 1; keys[++nk] = key}
   }
   last_n[net] = n; last[net] = $0; setup[net, n] = $3; if (!(n in seen_n)) {seen_n[n] = 1; ns[++nn] = n}}
  END {
    for (k = 1; k <= nn; k++)
      if ((("rerail", ns[k]) in setup) && (("nccl-ib", ns[k]) in setup) && setup["nccl-ib", ns[k]] > 0)
        printf "setup of %d connections: rerail %.1f s, nccl-ib %.1f s, rerail / NCCL %.2f\n", ns[k],
          setup["rerail", ns[k]], setup["nccl-ib", ns[k]], setup["rerail", ns[k]] / setup["nccl-ib", ns[k]]
    print "net      conns      A_rss  A_pin  B_rss  B_pin  A_qp/cq/mr        B_qp/cq/mr        setup_ms"
    for (k = 1; k <= nk; k++) {
      key = keys[k]
      for (net in last_n) if ((net, key) in row) {
        split(row[net, key], r, " "); printf "%-7s  %-9s  %5s  %5s  %5s  %5s  %-16s  %-16s  %s\n", net, key, r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
      if ((("rerail", key) in row) && (("nccl-ib", key) in row)) {
        split(row["rerail", key], a, " "); split(row["nccl-ib", key], b, " ")
        printf "%-7s  %-9s", "ratio", key
        for (i = 1; i <= 4; i++) printf "  %5s", (b[i] > 0 ? sprintf("%.2f", a[i] / b[i]) : "-")
        split(a[5], x, "/"); split(b[5], y, "/"); printf "  %-16s", sprintf("%s/%s", (y[1] > 0 ? sprintf("%.1f", x[1] / y[1]) : "-"), (y[2] > 0 ? sprintf("%.1f", x[2] / y[2]) : "-"))
        split(a[6], x, "/"); split(b[6], y, "/"); printf "  %-16s", sprintf("%s/%s", (y[1] > 0 ? sprintf("%.1f", x[1] / y[1]) : "-"), (y[2] > 0 ? sprintf("%.1f", x[2] / y[2]) : "-"))
        printf "  %s\n", (b[7] > 0 ? sprintf("%.2f", a[7] / b[7]) : "-")
      }
    }
  }' "$results"
rm -f "$results"
