#!/bin/bash
# ctest verbs_without_ibverbs: the verbs device layer on a host without libibverbs. With the
# library hidden (no_ibverbs.sh), discovery must report it once at INFO, find no devices and
# not fail; with it visible, the same program must load it (so the test can tell the two
# apart). Argument: the verbs_probe binary. Needs root (a private mount namespace).
set -uo pipefail
probe=$1
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
exit "$fails"
