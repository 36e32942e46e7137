#!/bin/bash
# The rxe_lab test's body, run inside the lab by test_rxe_lab.sh: the four rxe ports are ACTIVE
# with an IPv4 RoCE v2 GID, real RC traffic crosses each rail between "hosts" A and B (over the
# veth wire, not loopback), a link that goes down is seen by verbs (port state and
# IBV_EVENT_PORT_ERR) and comes back, and the silent-drop fault stops RoCE on its rail only.
# Optional arguments: the verbs_probe and verbs_smoke binaries built from this tree.
set -uo pipefail
fails=0
ok()   { echo "rxe_lab: ok   - $* [$(cut -d" " -f1 /proc/uptime) s]"; }
bad()  { echo "rxe_lab: FAIL - $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

# The port state as verbs reports it (ibv_query_port through ibv_devinfo).
port_state() { ibv_devinfo -d "$1" 2>/dev/null | awk '/state:/ {print $2; exit}'; }
# Wait for a state change on sysfs (no process start per poll), then confirm it through verbs.
wait_state() {  # DEV PORT_ACTIVE|PORT_DOWN SECONDS
  local i st want=${2#PORT_}
  for ((i = 0; i < $3 * 20; i++)); do
    read -r st <"/sys/class/infiniband/$1/ports/1/state"
    [[ ${st#*: } == "$want" ]] && break
    sleep 0.05
  done
  [[ $(port_state "$1") == "$2" ]]
}
wait_route() {  # TABLE SECONDS: the lab's link watcher puts the route back after a link up
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ -n $(ip route show table "$1") ]] && return 0
    sleep 0.1
  done
  return 1
}
# The perftest/pingpong server is ready once its TCP exchange port listens (a fixed sleep is
# not enough on a loaded 2-core machine under TCG).
wait_listen() {  # PORT
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  return 1
}
rx_bytes() { cat "/sys/class/net/$1/statistics/rx_bytes"; }
# A short RC exchange from B's device to A's device over one rail: ibv_rc_pingpong both ends.
pingpong() {  # SERVER_DEV CLIENT_DEV SERVER_ADDR PORT
  timeout 20 ibv_rc_pingpong -d "$1" -g 1 -n 20 -s 4096 -p "$4" >"/tmp/pp-srv.$4" 2>&1 &
  local srv=$! rc
  wait_listen "$4"
  timeout 20 ibv_rc_pingpong -d "$2" -g 1 -n 20 -s 4096 -p "$4" "$3" >"/tmp/pp-cli.$4" 2>&1
  rc=$?
  wait "$srv" || rc=1
  if [[ $rc -ne 0 ]]; then sed 's/^/    /' "/tmp/pp-srv.$4" "/tmp/pp-cli.$4"; fi
  return "$rc"
}

probe=${1:-} smoke=${2:-}
# One `rdma link` for all four (each program start costs ~0.1-0.5 s under TCG).
check "rxe0..rxe3 ACTIVE" test "$(rdma link | grep -c 'state ACTIVE')" -eq 4
read -r gid1 </sys/class/infiniband/rxe0/ports/1/gids/1
read -r type1 </sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1
check "rxe0 GID 1 is ::ffff:10.55.0.1, RoCE v2" \
  test "$gid1 $type1" = "0000:0000:0000:0000:0000:ffff:0a37:0001 RoCE v2"

# Rail 0: RDMA WRITE, A (rxe0) <- B (rxe2), through the wire: vethA0 must receive the bytes.
before=$(rx_bytes vethA0)
ib_write_bw -d rxe0 -x 1 -s 65536 -n 20 -F -p 18515 >/tmp/bw-srv.log 2>&1 &
srv=$!
wait_listen 18515
if timeout 30 ib_write_bw -d rxe2 -x 1 -s 65536 -n 20 -F -p 18515 10.55.0.1 >/tmp/bw-cli.log 2>&1 &&
   wait "$srv"; then
  ok "ib_write_bw rxe2 -> rxe0 (rail 0): $(awk '$1 == 65536 {print $4 " MB/s"}' /tmp/bw-cli.log)"
else
  bad "ib_write_bw rxe2 -> rxe0 (rail 0)"; cat /tmp/bw-cli.log /tmp/bw-srv.log
fi
check "rail 0 traffic crossed vethA0 (>= 1.3 MB received)" \
  test "$(( $(rx_bytes vethA0) - before ))" -ge 1300000
# Rail 1: RC send/recv, A (rxe1) <-> B (rxe3).
check "ibv_rc_pingpong rxe3 <-> rxe1 (rail 1)" pingpong rxe1 rxe3 10.55.1.1 18516

# Link down on A's rail-0 NIC: port goes DOWN with IBV_EVENT_PORT_ERR, then back.
stdbuf -oL ibv_asyncwatch -d rxe0 >/tmp/async.log 2>&1 &
watch=$!
# It prints "rxe0: async event FD n" once it listens.
for ((i = 0; i < 100; i++)); do grep -q "async event FD" /tmp/async.log && break; sleep 0.1; done
ip link set vethA0 down
check "rxe0 PORT_DOWN after ip link set vethA0 down" wait_state rxe0 PORT_DOWN 5
check "rxe2 (the other end, behind the switch) still PORT_ACTIVE" test "$(port_state rxe2)" = PORT_ACTIVE
if [[ -n $probe ]]; then
  got=$("$probe" | awk '$1 == "port" {print $2}' | sort | tr '\n' ' ')
  check "verbs_probe leaves the downed rxe0 out: $got" test "$got" = "rxe1:1 rxe2:1 rxe3:1 "
fi
ip link set vethA0 up
check "rxe0 PORT_ACTIVE after ip link set vethA0 up" wait_state rxe0 PORT_ACTIVE 5
check "the lab restored rail 0's policy route" wait_route 101 5
sleep 0.3
kill "$watch" 2>/dev/null; wait "$watch" 2>/dev/null
check "IBV_EVENT_PORT_ERR seen on rxe0" grep -q "IBV_EVENT_PORT_ERR" /tmp/async.log
check "IBV_EVENT_PORT_ACTIVE seen on rxe0" grep -q "IBV_EVENT_PORT_ACTIVE" /tmp/async.log
check "rail 0 carries traffic again" pingpong rxe0 rxe2 10.55.0.1 18517

# Silent drop on rail 1: ports stay ACTIVE, RoCE does not pass; rail 0 is untouched.
rxefault drop 1 on
check "rxe1 still PORT_ACTIVE under the drop" test "$(port_state rxe1)" = PORT_ACTIVE
# Rail 1 blocked and rail 0 working, tried at the same time (each costs seconds under TCG).
timeout 20 ibv_rc_pingpong -d rxe1 -g 1 -n 5 -s 4096 -p 18518 >/dev/null 2>&1 &
srv=$!
pingpong rxe0 rxe2 10.55.0.1 18519 &
rail0=$!
wait_listen 18518
if timeout 2 ibv_rc_pingpong -d rxe3 -g 1 -n 5 -s 4096 -p 18518 10.55.1.1 >/dev/null 2>&1; then
  bad "rail 1 pingpong got through the drop"
else
  ok "rail 1 pingpong blocked by the drop"
fi
kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
check "rail 0 unaffected by rail 1's drop" wait "$rail0"
rxefault drop 1 off
check "rail 1 carries traffic after the drop is lifted" pingpong rxe1 rxe3 10.55.1.1 18520

if [[ -n $probe ]]; then
  "$(dirname "$0")/check_verbs_probe.sh" "$probe" || fails=$((fails + 1))
fi
if [[ -n $smoke ]]; then
  # RC QPs through rerail's libibverbs table: 1 MiB writes with immediate, data checked, then
  # a silent rail 0 must end in a retry error (4.096 us x 2^12 x 4 tries: ~70 ms, plus TCG).
  out=$(RERAIL_IB_TIMEOUT=12 RERAIL_IB_RETRY_CNT=3 "$smoke" rxe2 rxe0 1048576 3 0 2>&1)
  echo "$out" | sed 's/^/  /'
  check "verbs_smoke: writes verified, then a retry error on the silent rail" \
    test "$(grep -c '^verbs_smoke: ok' <<<"$out")" -eq 2
fi

echo "rxe_lab: $fails failure(s)"
[[ $fails -eq 0 ]]
