#!/usr/bin/env bash
# Model-check the tuner's agreement protocol (agree.pml) with Spin: every
# configuration below must be searched exhaustively with no error, and the
# planted bug (-DBROKEN) must be found, which shows the check can fail.
# Usage: spin_check.sh PATH/agree.pml WORKDIR
set -euo pipefail
pml="$1"
work="$2"
command -v spin >/dev/null || { echo "spin not installed (tools/install-deps.sh installs it)"; exit 1; }
mkdir -p "$work"
cd "$work"
cp "$pml" agree.pml

# Returns pan's output in $out.
check() {
  rm -f pan pan.* agree.pml.trail
  spin -a "$@" agree.pml >/dev/null
  cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=1024 -o pan pan.c
  out="$(./pan -m100000 2>&1 || true)"
}

fail=0
# Ranks, collectives per rank, re-planning epochs: exhaustive within about
# 20 s on 2 cores (larger ones outgrow 1 GiB: see docs/tuner.md).
for cfg in "-DN=2 -DS=5 -DE=2" "-DN=3 -DS=4 -DE=1" "-DN=3 -DS=3 -DE=2"; do
  # shellcheck disable=SC2086
  check $cfg
  states="$(grep -Eo '[0-9]+ states, stored' <<<"$out" || true)"
  if grep -q "errors: 0" <<<"$out" && ! grep -q "Search not completed" <<<"$out"; then
    echo "agree.pml $cfg: no error, exhaustive ($states)"
  else
    echo "agree.pml $cfg: FAILED"
    echo "$out" | tail -20
    [ -f agree.pml.trail ] && spin -t -p -g agree.pml | tail -60
    fail=1
  fi
done

check -DBROKEN -DN=2 -DS=4 -DE=2
if grep -q "assertion violated" <<<"$out"; then
  echo "agree.pml -DBROKEN: the planted bug is found ($(grep -o 'assertion violated.*' <<<"$out" | head -1))"
else
  echo "agree.pml -DBROKEN: the planted bug was NOT found: the check cannot fail"
  echo "$out" | tail -20
  fail=1
fi
exit $fail
