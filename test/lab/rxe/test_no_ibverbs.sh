#!/bin/bash
# ctest verbs_without_ibverbs: the verbs device layer on a host without libibverbs. With the
# library hidden (no_ibverbs.sh), discovery must report it once at INFO, find no devices and
# not fail; with it visible, the same program must load it (so the test can tell the two
# apart). Then the plugin itself, asked for verbs, loads and moves checked traffic over TCP
# there. Arguments: the verbs_probe binary, and (optional) the harness and the plugin's
# directory. Needs root (a private mount namespace).
set -uo pipefail
probe=$1 harness=${2:-} plugin_dir=${3:-}
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
fails=0
if [[ $(id -u) -ne 0 ]]; then echo "verbs_without_ibverbs: needs root" >&2; exit 1; fi

out=$(RERAIL_LOG_LEVEL=info "$probe" --require-lib 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"lib=ok"* ]]; then echo "ok   - libibverbs visible: loaded"
else echo "FAIL - libibverbs visible: status $rc: $out"; fails=$((fails + 1)); fi

out=$("$here/no_ibverbs.sh" env RERAIL_LOG_LEVEL=info "$probe" 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"lib=absent"* && $out == *"libibverbs.so.1 unusable"*"no verbs devices, rails use TCP"* ]]; then
  echo "ok   - libibverbs hidden: reported at INFO, no devices, status 0"
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
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q 'libibverbs cannot be loaded' "$work/client.log"; then
    echo "ok   - the plugin without libibverbs: verbs asked for, TCP used, traffic checked"
    rm -rf "$work"
  else
    echo "FAIL - the plugin without libibverbs: client $crc, server $src (logs in $work)"
    tail -n 5 "$work/client.log"
    fails=$((fails + 1))
  fi
fi
exit "$fails"
