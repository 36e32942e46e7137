#!/usr/bin/env bash
# The harness's binding of NCCL's built-in transports (test/harness/nccl_builtin_loader.c), what
# can be checked without RDMA hardware (NCCL's IB transport moving data is checked in the
# Soft-RoCE lab: test/lab/rxe/verbs_gpu_mem.sh).
#  - stand-in libraries (fake_libnccl.c) each wrong in one way: the loader refuses a table with
#    the wrong name, the wrong size or an entry outside the library before calling into it, and
#    binds a well-formed one whose init() fails: the harness reports that error (exit 2), no crash
#  - NCCL's own libnccl.so.2 (when the build found one): nccl-ib binds and lists its devices;
#    NCCL_IB_DISABLE=1 makes its init() fail, reported the same way; on a host without RDMA
#    devices it has none, and a traffic run ends in a setup error that tells the peer (the
#    abort flag) instead of a hang or a crash.
# usage: harness_nccl_builtin.sh HARNESS FAKE_DIR [LIBNCCL]
#   FAKE_DIR holds libfake-nccl-{good,wrong-name,wrong-size,foreign-fn}.so
set -u
HARNESS=${1:?usage: $0 HARNESS FAKE_DIR [LIBNCCL]}
FAKE_DIR=${2:?usage: $0 HARNESS FAKE_DIR [LIBNCCL]}
LIBNCCL=${3:-}
[[ $LIBNCCL == *NOTFOUND ]] && LIBNCCL=""
work=$(mktemp -d /tmp/harness-nccl-builtin.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }

# fake VARIANT WANT_INIT: probe the stand-in; exit 2 expected, init() called iff WANT_INIT=1.
fake() {
  local lib="$FAKE_DIR/libfake-nccl-$1.so" rc called=0
  rm -f "$work/init-called"
  FAKE_NCCL_INIT_MARK="$work/init-called" "$HARNESS" --probe --plugin "nccl-ib:$lib" >"$work/$1.log" 2>&1
  rc=$?
  [[ -e "$work/init-called" ]] && called=1
  if [[ $rc -eq 2 && $called -eq $2 ]]; then
    ok "$1: exit 2, init() called: $called"
  else
    bad "$1: exit $rc (want 2), init() called: $called (want $2)"
    tail -n 3 "$work/$1.log"
  fi
}
fake good 1
fake wrong-name 0
fake wrong-size 0
fake foreign-fn 0

if [[ -z $LIBNCCL ]]; then
  echo "# no libnccl.so.2 found by the build: NCCL's own IB transport not checked here"
  exit $((fails != 0))
fi
export NCCL_SOCKET_IFNAME=lo   # its out-of-band interface: lo is on every host

"$HARNESS" --probe --plugin "nccl-ib:$LIBNCCL" >"$work/probe.log" 2>&1
rc=$?
ndev=$(sed -n 's/^devices: \([0-9][0-9]*\)$/\1/p' "$work/probe.log")
if [[ $rc -eq 0 && -n $ndev ]]; then ok "nccl-ib binds NCCL's IB transport: $ndev device(s)"
else bad "nccl-ib probe: exit $rc, devices '${ndev:-none}'"; tail -n 5 "$work/probe.log"; fi

NCCL_IB_DISABLE=1 "$HARNESS" --probe --plugin "nccl-ib:$LIBNCCL" >"$work/disabled.log" 2>&1
rc=$?
if [[ $rc -eq 2 ]]; then ok "NCCL_IB_DISABLE=1: init() fails, the harness reports it (exit 2)"
else bad "NCCL_IB_DISABLE=1: exit $rc (want 2)"; tail -n 3 "$work/disabled.log"; fi

if [[ ${ndev:-} == 0 ]]; then
  mkdir -p "$work/rdv"
  "$HARNESS" --role server --plugin "nccl-ib:$LIBNCCL" --rendezvous "$work/rdv" --conns 1 --iters 4 \
    --timeout 20 >"$work/nodev.log" 2>&1
  rc=$?
  if [[ $rc -eq 2 && -e "$work/rdv/server.abort" ]]; then
    ok "no RDMA device: a traffic run ends in a setup error (exit 2) and tells the peer"
  else bad "no RDMA device: exit $rc (want 2), abort flag: $(ls "$work/rdv")"; tail -n 3 "$work/nodev.log"; fi
else
  echo "# $ndev RDMA device(s) here: the no-device case is not this host's"
fi
exit $((fails != 0))
