#!/usr/bin/env bash
# Memory per connection on the TCP rail stays small (issue 23: ~300 KB per
# connection end before the rail and the engine allocated on demand, ~60-70 KB
# after, ~50-62 KB once a send end's staging, queues and connect plan were
# sized to what it uses; bench/RESULTS.md section 10). 256 connections over loopback, a few
# checked messages each, then each process's resident growth per connection
# (rerail-harness --scale-report) must stay under LIMIT_KB. Also: every
# connection came up and carried its traffic (the harness's verdict).
#
# usage: conn_scale_memory.sh PLUGIN_DIR HARNESS
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
LIMIT_KB=${LIMIT_KB:-75}   # measured 61-62 (send end), 49-55 (receive end)
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RERAIL_SOCKET_IFNAME=lo
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

ARGS=(--plugin rerail --rendezvous "$WORK" --conns 256 --iters 8 --max-size 4K --inflight 1 --no-flush
      --scale-report --json --quiet --timeout 120 --max-call-ms 5000)
"$HARNESS" --role server "${ARGS[@]}" >"$WORK/server.json" 2>"$WORK/server.err" &
spid=$!
"$HARNESS" --role client "${ARGS[@]}" >"$WORK/client.json" 2>"$WORK/client.err"
crc=$?
wait "$spid"
src=$?
if [[ $crc != 0 || $src != 0 ]]; then
  echo "FAIL: the harness failed (client exit $crc, server exit $src)"
  tail -5 "$WORK/client.err" "$WORK/server.err"
  exit 1
fi
fail=0
for role in client server; do
  kb=$(python3 -c 'import json,sys; print("%.1f" % json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["scale"]["kb_per_conn_traffic"])' "$WORK/$role.json")
  if python3 -c 'import sys; sys.exit(0 if 0 < float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$kb" "$LIMIT_KB"; then
    echo "PASS: $role: $kb KB per connection (limit $LIMIT_KB)"
  else
    echo "FAIL: $role: $kb KB per connection (limit $LIMIT_KB)"
    fail=1
  fi
done
exit $fail
