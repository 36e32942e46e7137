#!/bin/bash
# ctest verbs_without_ibverbs: the verbs device layer on a host without libibverbs. With the
# library hidden (no_ibverbs.sh), discovery must count it once (verbs_library_unusable_total,
# also logged at INFO for humans), find no devices and not fail; with it visible, the same
# program must load it (so the test can tell the two apart). Then the plugin itself, asked for
# verbs, loads and moves checked traffic over TCP there, its counters saying why (the library
# unusable, no device on the verbs rail). Arguments: the verbs_probe binary, and (optional) the
# harness and the plugin's directory. Needs root (a private mount namespace).
set -uo pipefail
probe=$1 harness=${2:-} plugin_dir=${3:-}
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
# hcount: the plugin's counters from a harness summary (verdicts never read log wording)
# shellcheck source=../../harness/harness_json.sh disable=SC1091
. "$here/../../harness/harness_json.sh"
fails=0
if [[ $(id -u) -ne 0 ]]; then echo "verbs_without_ibverbs: needs root" >&2; exit 1; fi

out=$(RERAIL_LOG_LEVEL=info "$probe" --require-lib 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"lib=ok"* && $out == *"lib_unusable=0"* ]]; then echo "ok   - libibverbs visible: loaded"
else echo "FAIL - libibverbs visible: status $rc: $out"; fails=$((fails + 1)); fi

out=$("$here/no_ibverbs.sh" env RERAIL_LOG_LEVEL=info "$probe" 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"lib=absent"* && $out == *"lib_unusable=1"* ]]; then
  echo "ok   - libibverbs hidden: counted once, no devices, status 0"
else echo "FAIL - libibverbs hidden: status $rc: $out"; fails=$((fails + 1)); fi
# The strict mode of the probe must notice the missing library (the test can fail).
if "$here/no_ibverbs.sh" "$probe" --require-lib >/dev/null 2>&1; then
  echo "FAIL - libibverbs hidden: --require-lib still succeeded"; fails=$((fails + 1))
else echo "ok   - libibverbs hidden: --require-lib fails"; fi
# The plugin, asked for verbs on a host without libibverbs: loads, runs TCP, every byte checked.
if [[ -n $harness ]]; then
  work=$(mktemp -d /tmp/no-ibverbs.XXXXXX)
  mkdir -p "$work/rdv"
  "$here/no_ibverbs.sh" env LD_LIBRARY_PATH="$plugin_dir" RERAIL_TRANSPORT=verbs RERAIL_SOCKET_IFNAME=lo \
    NCCL_DEBUG=INFO "$harness" --role server --rendezvous "$work/rdv" --conns 2 --iters 32 --timeout 60 \
    >"$work/server.log" 2>&1 &
  sp=$!
  "$here/no_ibverbs.sh" env LD_LIBRARY_PATH="$plugin_dir" RERAIL_TRANSPORT=verbs RERAIL_SOCKET_IFNAME=lo \
    NCCL_DEBUG=INFO "$harness" --role client --rendezvous "$work/rdv" --conns 2 --iters 32 --timeout 60 \
    >"$work/client.log" 2>&1
  crc=$?
  wait "$sp"; src=$?
  unusable=$(hcount "$work/client.log" verbs_library_unusable_total)
  verbs_devs=$(hcount "$work/client.log" verbs_devices_opened_total)
  if [[ $crc -eq 0 && $src -eq 0 && $unusable == 1 && $verbs_devs == 0 ]]; then
    echo "ok   - the plugin without libibverbs: verbs asked for, TCP used, traffic checked"
    rm -rf "$work"
  else
    echo "FAIL - the plugin without libibverbs: client $crc, server $src, libibverbs unusable $unusable," \
      "devices on the verbs rail $verbs_devs (logs in $work)"
    tail -n 5 "$work/client.log"
    fails=$((fails + 1))
  fi
fi
exit "$fails"
