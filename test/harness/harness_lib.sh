# shellcheck shell=bash
# Shared by test/integration/harness_loopback.sh and harness_badinput.sh
# (sourced, not run).
# Expects PLUGIN_DIR and HARNESS set; runs everything on loopback.
# KEEP_LOGS=1 keeps the work directory even when every case passed.

if [ ! -x "$HARNESS" ]; then
  echo "harness not found: $HARNESS" >&2
  exit 2
fi
if [ ! -e "$PLUGIN_DIR/libnccl-net-rerail.so" ]; then
  echo "plugin not found: $PLUGIN_DIR/libnccl-net-rerail.so" >&2
  exit 2
fi
# The plugin is found the way NCCL finds it: NCCL_NET_PLUGIN=rerail ->
# libnccl-net-rerail.so through the library search path.
export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_SOCKET_IFNAME=lo
unset RERAIL_TRANSPORT NCCL_DEBUG

# hcount: the plugin's counters from a summary
# shellcheck source=harness_json.sh
. "$(dirname "${BASH_SOURCE[0]}")/harness_json.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rerail-harness.XXXXXX")
FAILS=0
RESULTS=()
PROC_LIMIT=${PROC_LIMIT:-150}   # backstop above the harness's own watchdog

finish() {
  echo
  echo "==== summary"
  for r in "${RESULTS[@]}"; do echo "  $r"; done
  if [ "$FAILS" -eq 0 ]; then
    if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
    echo "all passed"
    exit 0
  fi
  echo "$FAILS case(s) failed; logs kept in $WORK"
  exit 1
}

pass() { RESULTS+=("PASS  $1${2:+: $2}"); echo "PASS  $1${2:+: $2}"; }
fail() {
  FAILS=$((FAILS + 1))
  RESULTS+=("FAIL  $1${2:+: $2}")
  echo "FAIL  $1${2:+: $2}"
  local f
  for f in "$WORK/$1"/*.log; do
    [ -e "$f" ] || continue
    echo "---- $f"
    tail -n 40 "$f"
  done
}

# run_pair NAME ARGS... : server and client with the same arguments plus
# $S_EXTRA / $C_EXTRA. Sets SRC and CRC (exit codes, read by the callers);
# logs in $WORK/NAME.
# shellcheck disable=SC2034
run_pair() {
  local name=$1
  shift
  local d="$WORK/$name"
  mkdir -p "$d/rdv"
  # shellcheck disable=SC2086
  timeout -k 5 "$PROC_LIMIT" "$HARNESS" --role server --rendezvous "$d/rdv" "$@" ${S_EXTRA:-} \
    >"$d/server.log" 2>&1 &
  local sp=$!
  # shellcheck disable=SC2086
  timeout -k 5 "$PROC_LIMIT" "$HARNESS" --role client --rendezvous "$d/rdv" "$@" ${C_EXTRA:-} \
    >"$d/client.log" 2>&1
  CRC=$?
  wait "$sp"
  SRC=$?
}

# rate NAME: "sent X GB/s / received Y GB/s" from the logs, for the summary
rate() {
  local d="$WORK/$1" s r
  s=$(grep -ho 'sent: .*= [0-9.]* GB/s' "$d"/*.log 2>/dev/null | head -1 | sed 's/.*= //')
  r=$(grep -ho 'received: .*= [0-9.]* GB/s' "$d"/*.log 2>/dev/null | head -1 | sed 's/.*= //')
  echo "send ${s:-?}, recv ${r:-?}"
}

