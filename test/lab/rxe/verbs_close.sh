#!/bin/bash
# Orderly close over the verbs rail, inside the Soft-RoCE lab (run by test_verbs_rail.sh through
# rxelab.sh): short harness exchanges between hosts A (client, sends) and B (server, receives),
# both NICs on the verbs rail, where one side closes as soon as its own schedule is done
# (--close-when-done, no end barrier), as a rank destroying its communicator does:
#   recv_closes  the receiver closes right after its last receive (the sender may still wait
#                for the acknowledgements of those receives)
#   send_closes  the sender closes right after its last small sends were reported done (the
#                receiver, 2 receives posted at a time, posts its last ones after that)
# Every run must end with exit 0 on both sides: zero errors, every byte checked.
#
# usage: verbs_close.sh HARNESS PLUGIN_DIR [RUNS per case]
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2 RUNS=${3:-10}
work=$(mktemp -d /tmp/verbs-close.XXXXXX)
# Connection setup of the RDMA devices travels out of band (RERAIL_SOCKET_IFNAME): over lo,
# which both lab hosts share as their management network, so a data NIC going down never
# takes setup or reconnects with it.
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_TRANSPORT=verbs RERAIL_IB_GID_INDEX=1
fails=0
pairs() { # NAME SERVER_EXTRA CLIENT_EXTRA ARGS...
  local name=$1 sx=$2 cx=$3 i
  shift 3
  local bad=0
  for i in $(seq 1 "$RUNS"); do
    local d="$work/$name/$i"
    mkdir -p "$d/rdv"
    # shellcheck disable=SC2086
    RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe2,rxe3 RERAIL_HEALTH_PATH=/dev/shm/rr-close-B \
      "$HARNESS" --role server --rendezvous "$d/rdv" --seed "$i" --timeout 60 --quiet "$@" $sx \
      >"$d/server.log" 2>&1 &
    local sp=$!
    # shellcheck disable=SC2086
    RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA==rxe0,rxe1 RERAIL_HEALTH_PATH=/dev/shm/rr-close-A \
      "$HARNESS" --role client --rendezvous "$d/rdv" --seed "$i" --timeout 60 --quiet "$@" $cx \
      >"$d/client.log" 2>&1
    local c=$? s
    wait "$sp"
    s=$?
    if [ "$c" -ne 0 ] || [ "$s" -ne 0 ]; then
      bad=$((bad + 1))
      echo "verbs_close: $name run $i: server exit $s, client exit $c"
      grep -h "ERROR\|WARN" "$d"/*.log | head -4
    fi
  done
  if [ "$bad" -eq 0 ]; then echo "verbs_close: ok   - $name: $RUNS of $RUNS runs clean"
  else echo "verbs_close: FAIL - $name: $bad of $RUNS runs failed"; fails=$((fails + 1)); fi
}
pairs recv_closes --close-when-done "" --conns 2 --iters 8 --max-size 256K
pairs send_closes "" --close-when-done --conns 2 --iters 16 --max-size 4K --inflight 2
rm -rf "$work"
exit $((fails > 0))
