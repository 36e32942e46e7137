#!/usr/bin/env bash
# Bad input through the NCCL-faithful harness: every case must end in a
# clear verdict, never a crash or a hang.
#
# usage: harness_badinput.sh PLUGIN_DIR HARNESS
#
# Cases:
#  bad_handle          connect() with garbage handles: an error return
#  wrong_token         a forged copy of a genuine handle (bytes 8..15 flipped):
#                      the server never accepts it; the genuine one still works
#  wrong_all_but_addr  the same with every byte but the listen address flipped
#  die_mid_message     the sender _exit()s with a 256 MiB send in flight: the
#                      receiver's test() returns an error within 30 s
#  ifname_nomatch      RERAIL_SOCKET_IFNAME=nomatch_xyz: a warning naming the
#                      value, and 0 devices (or a fallback device)
#  transport_bogus     RERAIL_TRANSPORT=bogus: a warning, then auto works
#  forged_write_only_rail  the sender's 100th write names a chunk no receive has
#                      (RERAIL_TEST_FORGE_WRITE) on connections of one rail: the
#                      receiver refuses it (as a chunk outside the receive, or as a
#                      malformed eager write when it was a small one sent eagerly)
#                      and fails that rail, the sender reopens
#                      it (a live peer closing every rail is not a dead one), and
#                      every byte arrives checked
#  checker_selftest    the harness itself must catch one flipped byte
set -u
PLUGIN_DIR=${1:?usage: $0 PLUGIN_DIR HARNESS}
HARNESS=${2:?usage: $0 PLUGIN_DIR HARNESS}
. "$(dirname "$0")/../harness/harness_lib.sh"

# ---- bad handle (client alone)
mkdir -p "$WORK/bad_handle"
RERAIL_CONNECT_TIMEOUT=5000 timeout -k 5 "$PROC_LIMIT" "$HARNESS" --bad-handle --bad-bound 30 --quiet \
  >"$WORK/bad_handle/client.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then pass bad_handle "$(grep -c 'PASS:' "$WORK/bad_handle/client.log") handles refused"
else fail bad_handle "exit $rc"; fi

# ---- wrong token, two variants
for variant in token all-but-addr; do
  name=wrong_${variant//-/_}
  [ "$variant" = token ] && name=wrong_token
  run_pair "$name" --wrong-token "$variant" --conns 1 --iters 16 --timeout 90 --quiet
  if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then
    pass "$name" "$(grep -ho 'client: client-failed=[^;]*' "$WORK/$name/server.log" | head -1)"
  else
    fail "$name" "server exit $SRC, client exit $CRC"
  fi
done

# ---- the sending process dies mid-message
run_pair die_mid_message --die-mid-message --conns 2 --iters 8 --die-size 256M --die-after-ms 20 \
  --die-bound 30 --timeout 90 --quiet
if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ] && grep -q 'die-mid-message: PASS' "$WORK/die_mid_message/server.log"; then
  pass die_mid_message "$(grep -ho 'test() returned [A-Za-z]* [0-9.]* s' "$WORK/die_mid_message/server.log")"
elif [ "$CRC" -eq 4 ]; then
  fail die_mid_message "the 256 MiB message completed before the sender died (inconclusive)"
else
  fail die_mid_message "server exit $SRC, client exit $CRC"
fi

# ---- RERAIL_SOCKET_IFNAME that matches nothing
mkdir -p "$WORK/ifname_nomatch"
RERAIL_SOCKET_IFNAME=nomatch_xyz timeout -k 5 60 "$HARNESS" --probe >"$WORK/ifname_nomatch/probe.log" 2>&1
rc=$?
ndev=$(sed -n 's/^devices: \([0-9]*\)$/\1/p' "$WORK/ifname_nomatch/probe.log")
if [ $rc -ne 0 ]; then
  fail ifname_nomatch "probe exit $rc"
elif ! [ "$(hcount "$WORK/ifname_nomatch/probe.log" settings_refused_total)" -ge 1 ] 2>/dev/null; then
  fail ifname_nomatch "RERAIL_SOCKET_IFNAME=nomatch_xyz not counted as a refused setting"
elif [ "${ndev:-x}" = 0 ]; then
  pass ifname_nomatch "0 devices, warned: $(grep -o 'NET/rerail: .*nomatch_xyz[^;]*' "$WORK/ifname_nomatch/probe.log" | head -1)"
elif [ -n "$ndev" ]; then
  pass ifname_nomatch "fell back to $ndev device(s) with a warning"
else
  fail ifname_nomatch "no device count printed"
fi

# ---- RERAIL_TRANSPORT=bogus: warn, then run on auto
mkdir -p "$WORK/transport_bogus"
RERAIL_TRANSPORT=bogus timeout -k 5 60 "$HARNESS" --probe >"$WORK/transport_bogus/probe.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! [ "$(hcount "$WORK/transport_bogus/probe.log" settings_refused_total)" -ge 1 ] 2>/dev/null; then
  fail transport_bogus "probe exit $rc or RERAIL_TRANSPORT=bogus not counted as a refused setting"
else
  export RERAIL_TRANSPORT=bogus
  run_pair transport_bogus_traffic --conns 2 --iters 16 --timeout 90 --quiet
  unset RERAIL_TRANSPORT
  if [ "$SRC" -eq 0 ] && [ "$CRC" -eq 0 ]; then
    pass transport_bogus "warned, then traffic on auto: $(rate transport_bogus_traffic)"
  else
    fail transport_bogus_traffic "server exit $SRC, client exit $CRC"
  fi
fi

# ---- a forged write on a connection's only rail (loopback: one rail)
RERAIL_LOG_LEVEL=info NCCL_DEBUG=INFO RERAIL_TEST_FORGE_WRITE=100 \
  run_pair forged_write_only_rail --conns 2 --max-size 256K --iters 400 --timeout 90 --quiet
d="$WORK/forged_write_only_rail"
if [ "$SRC" -ne 0 ] || [ "$CRC" -ne 0 ]; then
  fail forged_write_only_rail "server exit $SRC, client exit $CRC"
elif ! [ "$(hcount "$d/client.log" test_forged_writes_total)" -ge 1 ] 2>/dev/null; then
  fail forged_write_only_rail "the sender never forged a write (inconclusive)"
elif ! [ "$(hcount "$d/server.log" protocol_violations_total)" -ge 1 ] 2>/dev/null; then
  fail forged_write_only_rail "the receiver did not refuse the forged write"
elif ! [ "$(hcount "$d/client.log" rail_reconnects_total)" -ge 1 ] 2>/dev/null; then
  fail forged_write_only_rail "the rail was not reopened"
else
  # the refusal's wording only as context for a human
  pass forged_write_only_rail "refused ($(hcount "$d/server.log" protocol_violations_total) violation(s)), rail reopened ($(hcount "$d/client.log" rail_reconnects_total)x), every byte checked: $(grep -ho 'broke the protocol ([^)]*)' "$d/server.log" | head -1)"
fi

# ---- the checker catches a corrupted byte (a self-test of the harness)
run_pair checker_selftest --conns 1 --iters 12 --selftest-corrupt 5 --timeout 60 --quiet
if [ "$SRC" -eq 1 ] && grep -q 'DATA MISMATCH conn 0 seq 5' "$WORK/checker_selftest/server.log"; then
  pass checker_selftest "flipped byte reported, server exit 1"
else
  fail checker_selftest "server exit $SRC (expected 1 with a DATA MISMATCH report)"
fi

finish
