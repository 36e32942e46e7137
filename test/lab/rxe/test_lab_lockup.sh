#!/bin/bash
# ctest rxe_lab_lockup: the lab's answer to a guest kernel that locks up in Soft-RoCE (README.md,
# "Known problem"). A stand-in guest command prints the kernel watchdog's lock-up line on the
# console on its first boot and then hangs, as a locked-up guest does; on a second boot it ends
# well. With the default one retry the lab must stop the first guest at once and report two boots,
# one lock-up and the command's status 0; with --livelock-retries 0, one boot and status 125.
# Root, as every lab test.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "rxe_lab_lockup: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# /run/rxelab is the job directory in the guest: it outlives a boot, so the second one sees the mark.
hang_once='if [ ! -e /run/rxelab/locked-once ]; then : >/run/rxelab/locked-once;
  echo "<4>watchdog: BUG: soft lockup - CPU#0 stuck for 23s! [rxe_lab_lockup]" >/dev/kmsg; sleep 600; fi'
fails=0
check() { # NAME WANT_RC GOT_RC WANT_BOOTS WANT_LOCKUPS
  local boots lockups
  boots=$(awk '$1 == "boots" {print $2}' "$work/report" 2>/dev/null || true)
  lockups=$(awk '$1 == "lockups" {print $2}' "$work/report" 2>/dev/null || true)
  if [[ $3 == "$2" && $boots == "$4" && $lockups == "$5" ]]; then
    echo "rxe_lab_lockup: ok - $1: status $3, boots $boots, lock-ups $lockups (${6} s)"
  else
    echo "rxe_lab_lockup: FAIL - $1: status $3 (want $2), boots ${boots:-?} (want $4)," \
      "lock-ups ${lockups:-?} (want $5)"
    fails=$((fails + 1))
  fi
}
t0=$SECONDS rc=0
RXELAB_REPORT="$work/report" "$here/rxelab.sh" run --timeout 150 -- bash -c "$hang_once" || rc=$?
check "one lock-up, booted again" 0 "$rc" 2 1 $((SECONDS - t0))
rm -f "$work/report"
t0=$SECONDS rc=0
RXELAB_REPORT="$work/report" "$here/rxelab.sh" run --timeout 150 --livelock-retries 0 -- bash -c "$hang_once" ||
  rc=$?
check "no retry allowed" 125 "$rc" 1 1 $((SECONDS - t0))
exit $((fails != 0))
