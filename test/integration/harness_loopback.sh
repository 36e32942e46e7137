#!/usr/bin/env bash
# The NCCL-faithful harness over loopback: a server and a client process drive
# libnccl-net-rerail.so the way NCCL's proxy does, with every byte checked.
#
# usage: harness_loopback.sh PLUGIN_DIR HARNESS
#   PLUGIN_DIR  directory holding libnccl-net-rerail.so (put on LD_LIBRARY_PATH)
#   HARNESS     the rerail-harness executable
#
# Cases: each net version 7..12 bound explicitly; the newest one with
# --bidir --threads (both comm types in each process, one thread per
# connection), whose connection ids both ends must agree on, also after a
# connection started over behind NCCL's back; a --duration
# run (the sender ends the schedule in-band); and
# three v12 contexts in each process (three communicators) with a server that
# is slow to accept; a server and a client bound to different versions (v8
# against v12); a teardown where one side closes 500 ms later (no warnings
# allowed); and NCCL's library naming rules.
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
. "$(dirname "$0")/../harness/harness_lib.sh"

COMMON=(--plugin rerail --conns 3 --iters 48 --seed 7 --timeout 90 --quiet)

# ---- NCCL's naming rules (probe only): a bare name through the search path,
# a library file name, an absolute path with no search path, a list whose
# first entry is missing, and a missing plugin that must fail clearly.
mkdir -p "$WORK/naming"
naming_ok=1
probe() {   # probe EXPECTED_EXIT LABEL ARGS...
  local want=$1 label=$2
  shift 2
  "$@" >"$WORK/naming/$label.log" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "naming[$label]: exit $rc, expected $want"
    naming_ok=0
  fi
}
probe 0 bare "$HARNESS" --probe --quiet --plugin rerail
probe 0 libname "$HARNESS" --probe --quiet --plugin libnccl-net-rerail.so
probe 0 path env LD_LIBRARY_PATH= "$HARNESS" --probe --quiet --plugin "$PLUGIN_DIR/libnccl-net-rerail.so"
probe 0 list "$HARNESS" --probe --quiet --plugin no_such_plugin_x,rerail
probe 2 missing "$HARNESS" --probe --quiet --plugin no_such_plugin_x
grep -q 'libnccl-net-no_such_plugin_x.so' "$WORK/naming/missing.log" || {
  echo "naming[missing]: the error does not name libnccl-net-no_such_plugin_x.so"
  naming_ok=0
}
for v in 7 8 9 10 11 12; do
  probe 0 "v$v" "$HARNESS" --probe --net-version "$v"
  grep -q "as net v$v\$" "$WORK/naming/v$v.log" || { echo "naming[v$v]: not bound as v$v"; naming_ok=0; }
done
if [ $naming_ok -eq 1 ]; then pass naming "name, lib name, path, list, missing; v7..v12 bound"
else fail naming; fi

for v in 7 8 9 10 11 12; do
  run_pair "v$v" "${COMMON[@]}" --net-version "$v"
  if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass "v$v" "$(rate "v$v")"
  else fail "v$v" "server exit $SRC, client exit $CRC"; fi
done

run_pair bidir_threads "${COMMON[@]}" --bidir --threads --conns 4
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass bidir_threads "$(rate bidir_threads)"
else fail bidir_threads "server exit $SRC, client exit $CRC"; fi

# ids_agree RDV N [RECEIVERS]: connection k's id (rerailConnId_v1, published
# by each harness: a receive comm's at accept(), a send comm's once its first
# isend() got a request) is the same at its receiving and its sending end, in
# both directions (RECEIVERS "server client", the default) or those named,
# and no two connections share one. Prints the first mismatch.
ids_agree() {
  local rdv=$1 n=$2 receivers=${3:-server client} k a b recv send seen=" "
  for k in $(seq 0 $((n - 1))); do
    for recv in $receivers; do
      send=client
      [ $recv = client ] && send=server
      a=$(cat "$rdv/$recv.accepted.$k" 2>/dev/null)
      b=$(cat "$rdv/$send.connected.$k" 2>/dev/null)
      if ! [[ "$a" =~ ^[0-9a-f]{16}$ ]] || [ "$a" != "$b" ]; then
        echo "$recv.accepted.$k '$a', $send.connected.$k '$b'"
        return 1
      fi
      case "$seen" in *" $a "*) echo "id $a names two connections"; return 1 ;; esac
      seen="$seen$a "
    done
  done
}
if why=$(ids_agree "$WORK/bidir_threads/rdv" 4); then pass conn_ids "both ends of 8 connections name each by the same id"
else fail conn_ids "$why"; fi

# A connection started over behind NCCL's back: the server's listener refuses
# the first connection's commit socket at its PROOF (RERAIL_TEST_REFUSE_PROOF),
# after the client's connect() handed the comm out ahead of the ACCEPTs; the
# client's plugin starts it over as a new connection (a new id). Both ends
# must still name each connection by the id it ended with.
RERAIL_TEST_REFUSE_PROOF=1 run_pair start_over "${COMMON[@]}" --conns 2
d="$WORK/start_over"
if [ "$SRC" -ne 0 ] || [ "$CRC" -ne 0 ]; then
  fail start_over "server exit $SRC, client exit $CRC"
elif ! [ "$(hcount "$d/client.log" connect_start_overs_total)" -ge 1 ] 2>/dev/null; then
  fail start_over "no connection started over (inconclusive)"
elif ! why=$(ids_agree "$d/rdv" 2 server); then
  fail start_over "$why"
else
  pass start_over "$(hcount "$d/client.log" connect_start_overs_total) start over(s), ids agree: $(rate start_over)"
fi

run_pair bidir_threads_v8 "${COMMON[@]}" --bidir --threads --net-version 8 --inflight 3 --group 3
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass bidir_threads_v8 "$(rate bidir_threads_v8)"
else fail bidir_threads_v8 "server exit $SRC, client exit $CRC"; fi

run_pair duration --plugin rerail --conns 2 --duration 2 --seed 11 --timeout 90 --quiet --max-size 1M
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass duration "$(rate duration)"
else fail duration "server exit $SRC, client exit $CRC"; fi

run_pair contexts "${COMMON[@]}" --bidir --conns 4 --contexts 3 --accept-delay-ms 1500
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass contexts "3 contexts (v12), slow accept: $(rate contexts)"
else fail contexts "server exit $SRC, client exit $CRC"; fi

# Ranks tear down at different times: the server closes 500 ms after the
# client. An orderly close of idle connections must not log warnings.
S_EXTRA="--close-delay-ms 500" run_pair teardown_quiet --plugin rerail --conns 2 --iters 16 --timeout 90 --quiet
tw=$(grep -ho '([0-9]* during the orderly teardown)' "$WORK/teardown_quiet"/*.log |
  awk '{gsub(/[^0-9]/, ""); s += $0} END {print (NR ? s : "x")}')
if [ "$SRC" -ne 0 ] || [ "$CRC" -ne 0 ]; then fail teardown_quiet "server exit $SRC, client exit $CRC"
elif [ "${tw:-x}" != 0 ]; then fail teardown_quiet "$tw plugin warning(s) during an orderly teardown"
else pass teardown_quiet "no warnings when the peer closes first"; fi

S_EXTRA="--net-version 8" C_EXTRA="--net-version 12" \
  run_pair mixed_v8_v12 "${COMMON[@]}" --conns 2
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then pass mixed_v8_v12 "$(rate mixed_v8_v12)"
else fail mixed_v8_v12 "server exit $SRC, client exit $CRC"; fi

finish
