#!/usr/bin/env bash
# Hostile peers in the network lab: 3 hosts x 2 rails. The harness moves
# checksummed traffic (8 connections, every byte and the guard bytes around
# every posted receive checked) from host 0 to host 1 while rails flap, and
# host 2 attacks host 1's listeners with rerail-hostile:
#   - 1,000 idle connections (from one address), with a rail flap meanwhile:
#     the listener holds at most its per-source cap (64) of them, each newer
#     one evicting that source's oldest (no clock: a slow connector's turn
#     may take minutes), and the failover's reconnect still gets through;
#   - garbage, a truncated hello, an old-version hello, a wrong secret;
#   - as a peer holding the handle: a runaway generation (0xFFFFFFFF), and
#     rails reopened to send forged TCP frames (unknown key, address outside
#     any receive, huge length, truncated header, unknown type, flags,
#     oversized control): only that rail fails, the real sender reopens it.
# Passes when both harness processes exit 0 with zero errors, every attack
# got the answer it should (rerail-hostile's RESULT lines), the server counted
# each kind of refusal (its harness summary's counters), its warnings stay far
# below the refusals, and the listeners bind the pooled rails' addresses only.
#
# usage: hostile_peers.sh PLUGIN_DIR HARNESS HOSTILE
#   RERAIL_TEST_SCALE   scales the traffic time (default 1: 40 s; at least 30 s)
#   KEEP_LOGS=1         keep the logs
# shellcheck disable=SC2034,SC1091,SC2153  # PLUGIN_DIR, HARNESS, PAIR_ENV: read by resilience_lib.sh; SRC: set by it
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS HOSTILE}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS HOSTILE}
HOSTILE=${3:?usage: $0 PLUGIN_DIR HARNESS HOSTILE}
# shellcheck source=resilience_lib.sh
. "$(dirname "$0")/resilience_lib.sh"

SECS=$(scaled 40 30)
SECS=${SECS%.*}
lab_start "${RERAIL_LAB:-rrh}$$" 3 2
PAIR_ENV=(RERAIL_PROGRESS_TIMEOUT=300 RERAIL_BACKUPS=1)
pair_start hostile --conns 8 --max-size 2M --duration "$SECS" --quiet --timeout $((SECS + 90)) --seed 10
RDV="$PAIR_DIR/rdv"
ALOG="$PAIR_DIR/attacks.log"
: >"$ALOG"
if ! pair_wait_traffic 60; then
  pair_wait 60
  fail hostile "traffic never started (server exit $SRC, client exit $CRC)"
  finish
fi

attack() {   # attack ARGS...: rerail-hostile from host 2; its RESULT line is kept
  ip netns exec "$(ns 2)" "$HOSTILE" "$@" >>"$ALOG" 2>&1
  local rc=$?
  echo "  [$(calc "$(wall) - $T0")s] $* -> $(tail -n 1 "$ALOG")"
  return $rc
}
T0=$(wall)
BAD=()
expect_ok() { attack "$@" || BAD+=("$*"); }

# The listeners: the pooled rails' addresses, never the wildcard.
LISTEN=$(ip netns exec "$(ns 1)" ss -Hltn 2>/dev/null | awk '{print $4}')
if echo "$LISTEN" | grep -qE '^(0\.0\.0\.0|\*|\[::\]):'; then
  BAD+=("a listener on the wildcard address: $(echo "$LISTEN" | tr '\n' ' ')")
fi

# conn K -> its id, which a peer that read the handle names to reopen a rail
# (it could as well sniff a hello): the server's harness publishes what the
# plugin says (rerailConnId_v1) once accept() returned the connection.
conn_id() {
  local id
  id=$(cat "$RDV/server.accepted.$1" 2>/dev/null)
  [[ "$id" =~ ^[0-9a-f]{16}$ ]] && echo "$id"
}
H() { echo "--handle $RDV/server.handle.$1"; }
SRC0=10.77.0.3
SRC1=10.77.1.3

# 1. A flood of idle connections, and a rail flap under it: conn 0's primary
#    fails over and its reconnect must get through the flooded listener.
# shellcheck disable=SC2046
attack $(H 0) --addr 0 --src "$SRC0" idle 1000 4 64 &
FLOOD=$!
nap 0.5
link 0 0 down
nap 1.0
link 0 0 up
wait $FLOOD || BAD+=("idle flood")

# 2. Unauthenticated garbage of every kind, at conn 1's backup address.
for a in garbage truncated oldversion wrong-secret; do
  # shellcheck disable=SC2046
  expect_ok $(H 1) --addr 1 --src "$SRC1" "$a"
done

# 3. A peer holding the handle: a runaway generation on conn 2's backup.
ID=()
for k in 0 1 2 3 4 5 6 7; do ID[k]=$(conn_id $k); done
if [ ${#ID[@]} -ne 8 ] || printf '%s\n' "${ID[@]}" | grep -qx ''; then
  BAD+=("connection ids not published by the server's harness")
  ID=(0 0 0 0 0 0 0 0)
fi
# shellcheck disable=SC2046
expect_ok $(H 2) --addr 1 --src "$SRC1" runaway "${ID[2]}" 1

# 4. Failover still reconnects after all that: the backup rail flaps.
nap 0.3
link 1 1 down
nap 1.0
link 1 1 up
nap 1.0

# 5. Forged TCP frames on rails the attacker reopened as that peer: one
#    connection each, primaries and backups. (The real sender reopens a rail
#    the attacker took over, since it closed only that rail; one attack per
#    connection keeps the run short.)
KINDS=(key outside ctrl type flags drainlen truncated eager)
for k in 0 1 2 3 4 5 6 7; do
  r=$((k % 2))
  src=$SRC0
  [ $r = 1 ] && src=$SRC1
  # shellcheck disable=SC2046
  expect_ok $(H $k) --addr $r --src "$src" frame "${ID[$k]}" $r "${KINDS[$k]}"
done

pair_wait $((SECS + 120))
SJSON="$PAIR_DIR/server.json"
# The server's counters decide (never its log wording): ctr NAME -> value, or -1.
ctr() {
  local v
  # a family's bare name is the sum of its members (hcount's rule)
  v=$(jget "$SJSON" "sum(v for k, v in d['counters'].items() if k == '$1' or ('{' not in '$1' and k.startswith('$1{')))")
  [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo -1
}
# least MIN NAME WHAT: the server counted NAME at least MIN times
least() {
  local n
  n=$(ctr "$2")
  [ "$n" -ge "$1" ] || BAD+=("$3: $2 = $n (want >= $1)")
}
least 936 'listener_refusals_total{reason=per_source_cap}' "the per-source cap (1,000 idle, 64 held)"
least 1 'listener_refusals_total{reason=no_handshake}' "a truncated hello"
least 1 'listener_refusals_total{reason=not_rerail}' "garbage"
least 1 'listener_refusals_total{reason=setup_version}' "an old version"
least 1 'listener_refusals_total{reason=wrong_secret}' "a wrong secret"
least 1 'listener_refusals_total{reason=runaway_generation}' "a runaway generation"
# Forged frames: the engine refuses key, outside and eager (one connection
# each, maybe more than one frame); the TCP rail refuses the rest itself.
least 3 protocol_violations_total "forged frames the engine refuses"
# The eager kind names a receive 3200 ahead of what it assumes: refused as malformed.
least 1 'protocol_violations_total{kind=malformed}' "a forged eager write the engine cannot decode"
for k in unknown_type oversized_control unknown_flags drain_with_payload; do
  least 1 "tcp_frames_refused_total{kind=$k}" "a forged frame the TCP rail refuses"
done
# Refusals are logged once a minute per reason and source: the ~1,000
# refused connections of the flood must not each leave a warning.
REFUSED=$(jget "$SJSON" "sum(v for k, v in d['counters'].items() if k.startswith('listener_refusals_total'))")
WARNS=$(jget "$SJSON" 'd["plugin_warnings"]')
if ! [[ "$REFUSED" =~ ^[0-9]+$ && "$WARNS" =~ ^[0-9]+$ ]] || [ "$WARNS" -gt 100 ]; then
  BAD+=("the log is flooded: $WARNS plugin warnings for $REFUSED refused connections (want <= 100)")
fi

echo "traffic: $(what_moved)"
if ! ok_pair; then
  fail hostile "the harness failed (server exit $SRC, client exit $CRC)"
elif [ ${#BAD[@]} -gt 0 ]; then
  fail hostile "$(printf '%s; ' "${BAD[@]}")"
  cat "$ALOG"
else
  pass hostile "${SECS}s of checked traffic with rail flaps through 1,000 idle connections, 4 kinds of garbage, a wrong secret, a runaway generation and 8 kinds of forged frames; every kind of refusal counted, $REFUSED refused connections in $WARNS warnings"
fi
finish
