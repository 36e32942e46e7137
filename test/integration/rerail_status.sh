#!/usr/bin/env bash
# `rerail status` against real health tables: none, one with a live job (text
# and JSON), the job's end (clean stop, and a killed process whose rows stay
# behind), a corrupt table, bad usage.
#
# usage: rerail_status.sh RERAIL HT_WRITER_HELPER
set -u
RERAIL=${1:?usage: $0 RERAIL HT_WRITER_HELPER}
HELPER=${2:?usage: $0 RERAIL HT_WRITER_HELPER}
WORK=$(mktemp -d /tmp/rr-status-XXXXXX)
T=$WORK/health
wpid=
cleanup() {
  [ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# Run the tool; keep stdout, stderr and the exit status.
run() { "$RERAIL" "$@" >"$WORK/out" 2>"$WORK/err"; rc=$?; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "$2: exit $rc, expected $1 ($(cat "$WORK/out" "$WORK/err"))"; }
expect_out() { grep -q -- "$1" "$WORK/out" || { fail "$2: no '$1' in:"; cat "$WORK/out"; }; }
json() { # json FILTER LABEL: the output is JSON and FILTER holds
  if command -v jq >/dev/null; then
    jq -e "$1" "$WORK/out" >/dev/null || { fail "$2: jq '$1' on:"; cat "$WORK/out"; }
  else
    python3 -m json.tool "$WORK/out" >/dev/null || fail "$2: not JSON"
  fi
}
start_writer() { # a job process: rows until its stdin closes
  mkfifo "$WORK/ctl.$1"
  RERAIL_HEALTH_PATH=$T "$HELPER" ${2:-} <"$WORK/ctl.$1" >"$WORK/helper.$1" 2>&1 &
  wpid=$!
  exec 3>"$WORK/ctl.$1"
  for _ in $(seq 100); do grep -q ready "$WORK/helper.$1" && return 0; sleep 0.05; done
  fail "helper did not start: $(cat "$WORK/helper.$1")"
}

# ---- no table: no job, exit 0
run status --path "$T"
expect_rc 0 "no table"
expect_out "no rerail job on this host" "no table"
RERAIL_HEALTH_PATH=$T "$RERAIL" status >"$WORK/out" 2>&1; rc=$?
expect_rc 0 "no table via RERAIL_HEALTH_PATH"
expect_out "no rerail job on this host" "no table via RERAIL_HEALTH_PATH"
run status --json --path "$T"
expect_rc 0 "no table, JSON"
json '.job == false and .problem == "absent"' "no table, JSON"

# ---- a live job
start_writer a
run status --path "$T"
expect_rc 0 "live job"
for want in rrtest0 rrtest1 "$wpid" down "PEER RAILS" 10.99.0.2 "link down (netlink)" 1250.0 "8.0/21.0"; do
  expect_out "$want" "live job"
done
run status --json --path "$T"
expect_rc 0 "live job, JSON"
json ".job == true and (.nics | length) == 2 and (.peer_rails | length) == 1
  and all(.nics[]; .pid == $wpid and .liveness == \"live\")
  and any(.nics[]; .ifname == \"rrtest1\" and .state == \"down\" and .failovers_from == 1)
  and any(.nics[]; .ifname == \"rrtest0\" and .state == \"up\" and .failovers_to == 1
          and .tx.bytes_per_s == 1250000000 and .rx.p99_ns == 25000)
  and .peer_rails[0].peer == \"10.99.0.2\" and .peer_rails[0].state == \"down\"" "live job, JSON"
echo "--- rerail status with a live job:"
"$RERAIL" status --path "$T"

# ---- each NIC's transport, from the telemetry file of the row's process (--dir)
mkdir -p "$WORK/tel"
run status --path "$T" --dir "$WORK/tel"
expect_rc 0 "no telemetry file"
json_rows() { grep -E "^$1 " "$WORK/out"; }
json_rows rrtest0 | grep -q ' - ' || fail "no telemetry file: rrtest0's transport is not '-'"
{
  echo "# a hostile or truncated file is only input: a bad line reads as unknown"
  echo "rerail_nic_info{host=\"h\",pid=\"$wpid\",nic=\"rrtest1\",transport=\"verbs"
  echo "rerail_nic_info{host=\"h\",pid=\"$wpid\",nic=\"rrtest0\",transport=\"verbs\",rdma_device=\"mlx5_0\",rdma_port=\"1\"} 1"
} >"$WORK/tel/rerail-h-$wpid.prom"
run status --path "$T" --dir "$WORK/tel"
expect_rc 0 "telemetry file"
expect_out "verbs mlx5_0:1" "telemetry file"
run status --json --path "$T" --dir "$WORK/tel"
json "any(.nics[]; .ifname == \"rrtest0\" and .transport == \"verbs\" and .rdma_device == \"mlx5_0\" and .rdma_port == 1)
  and any(.nics[]; .ifname == \"rrtest1\" and .transport == null)" "telemetry file, JSON"

# ---- the job ends cleanly: its rows are released
exec 3>&-
wait "$wpid"
wpid=
run status --path "$T"
expect_rc 0 "clean end"
expect_out "no rerail job on this host" "clean end"

# ---- a process killed: its rows stay, marked, but it is no job
start_writer b
{ kill -9 "$wpid"; wait "$wpid"; } 2>/dev/null
exec 3>&-
dead=$wpid
wpid=
run status --path "$T"
expect_rc 0 "killed job"
expect_out "no rerail job on this host" "killed job"
expect_out "exited or stopped reporting" "killed job"
run status --path "$T" --all
expect_rc 0 "killed job, --all"
expect_out "down,gone" "killed job, --all"
run status --json --all --path "$T"
json ".job == false and (.nics | length) == 2 and all(.nics[]; .liveness == \"gone\" and .pid == $dead)" \
  "killed job, JSON --all"

# ---- a corrupt table: an error, exit 1, never a crash
printf 'XXXX' | dd of="$T" bs=1 seek=100 conv=notrunc status=none
run status --path "$T"
expect_rc 1 "corrupt"
grep -q corrupt "$WORK/err" || fail "corrupt: no reason on stderr: $(cat "$WORK/err")"
run status --json --path "$T"
expect_rc 1 "corrupt, JSON"
json '.job == false and .problem == "corrupt"' "corrupt, JSON"
printf 'not a table' >"$T"
run status --path "$T"
expect_rc 1 "foreign"

# ---- rails out of service, and a NIC that fails towards every peer it serves
T=$WORK/health.faults   # the table above was spoiled on purpose
start_writer c faults
served() { # served NIC PEER...: rails of the helper's process, as its telemetry file lists them
  local nic=$1 p
  shift
  for p in "$@"; do echo "rerail_rail_degraded{host=\"h\",pid=\"$wpid\",nic=\"$nic\",peer=\"$p\"} 0"; done
}
rm -f "$WORK"/tel/*.prom
{ served rrtest1 10.99.0.2 10.99.0.3; served rrtest0 10.99.0.2 10.99.0.3; } >"$WORK/tel/rerail-h-$wpid.prom"
run status --path "$T" --dir "$WORK/tel"
expect_rc 0 "faults"
expect_out "DEGRADED rrtest0 -> 10.99.0.3 (pid $wpid): send rail0 (rrtest0 -> 10.99.0.3): delivers 4 % of its level for 3.1 s; path" "faults: the demoted rail, why and where"
expect_out "NIC rrtest1 fails towards every peer it serves (2 of 2): local" "faults: rrtest1 fails everywhere"
grep -q "NIC rrtest0 fails" "$WORK/out" && fail "faults: rrtest0 fails towards one peer of two, not every peer"
run status --json --path "$T" --dir "$WORK/tel"
json "any(.nic_reach[]; .nic == \"rrtest1\" and .peers_served == 2 and .peers_failing == 2 and .fails_towards_every_peer)
  and any(.nic_reach[]; .nic == \"rrtest0\" and .peers_served == 2 and .peers_failing == 1 and (.fails_towards_every_peer | not))
  and all(.peer_rails[]; .nic_fails_towards_every_peer == (.ifname == \"rrtest1\"))
  and any(.peer_rails[]; .ifname == \"rrtest0\" and .state == \"degraded\")" "faults, JSON"
# a third peer rrtest1 still reaches: not the NIC
served rrtest1 10.99.0.4 >>"$WORK/tel/rerail-h-$wpid.prom"
run status --json --path "$T" --dir "$WORK/tel"
json "any(.nic_reach[]; .nic == \"rrtest1\" and .peers_served == 3 and .peers_failing == 2 and (.fails_towards_every_peer | not))" \
  "faults, a peer still reached"
# without telemetry files nothing is concluded
run status --json --path "$T" --dir "$WORK/none"
json "(.nic_reach | length) == 0 and all(.peer_rails[]; .nic_fails_towards_every_peer | not)" "faults, no telemetry"
echo "--- rerail status with rails out of service:"
"$RERAIL" status --path "$T" --dir "$WORK/tel"
exec 3>&-
wait "$wpid"
wpid=

# ---- queue work per message (--cost): the ratios of a known file, no health table needed
mkdir -p "$WORK/cost"
{
  echo 'rerail_rail_messages_total{host="h",pid="41",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx"} 20'
  echo 'rerail_rail_doorbells_total{host="h",pid="41",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx",queue="send"} 30'
  echo 'rerail_rail_doorbells_total{host="h",pid="41",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx",queue="recv"} 10'
  echo 'rerail_rail_work_requests_total{host="h",pid="41",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx",queue="send"} 50'
  echo 'rerail_rail_completions_total{host="h",pid="41",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx",queue="send"} 5'
  echo 'rerail_rail_messages_total{host="h",pid="41",nic="vethA1",peer="10.55.0.2",rail="1",direction="tx"} 0'
} >"$WORK/cost/rerail-h-41.prom"
run status --cost --json --dir "$WORK/cost" --path "$WORK/no-table"
expect_rc 0 "cost, JSON"
json "(.rails | length) == 2
  and any(.rails[]; .pid == 41 and .nic == \"vethA0\" and .rail == 0 and .direction == \"tx\" and .messages == 20
          and .doorbells.send_per_message == 1.5 and .doorbells.recv_per_message == 0.5
          and .work_requests.send_per_message == 2.5 and .completions.send_per_message == 0.25
          and .completions.recv_per_message == 0)
  and any(.rails[]; .nic == \"vethA1\" and .messages == 0 and .doorbells.send_per_message == null)" "cost, JSON"
run status --cost --dir "$WORK/cost"
expect_rc 0 "cost, text"
grep -Eq '^41 +vethA0 +10\.55\.0\.2 +0 +tx +20 +1\.50 +0\.50 +2\.50 +0\.00 +0\.25 +0\.00' "$WORK/out" ||
  fail "cost, text: no row with the ratios in: $(cat "$WORK/out")"
run status --cost --json --dir "$WORK/none"
json ".readable == false and (.rails | length) == 0" "cost, no directory"

# ---- usage
run status --bogus
expect_rc 2 "bad argument"
run status --help
expect_rc 0 "help"

[ "$fails" -eq 0 ] && echo "rerail status: all checks passed"
exit $((fails > 0))
