#!/usr/bin/env bash
# Model-check the tuner's agreement protocol (agree.pml) with Spin: every
# configuration below must be searched exhaustively with no error, and each
# planted bug (-DBROKEN, -DBROKEN_LATE, -DBROKEN_FP, -DBROKEN_SIM) must be
# found, which shows the check can fail where each fix matters.
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
# Ranks, collectives per rank, re-planning epochs, simulated calls per rank:
# exhaustive within about 30 s on 2 cores (larger ones outgrow 1 GiB: see
# docs/tuner.md).
for cfg in "-DN=2 -DS=5 -DE=2 -DSIM=1" "-DN=3 -DS=4 -DE=1 -DSIM=0" "-DN=3 -DS=2 -DE=2 -DSIM=1"; do
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

for bug in "-DBROKEN -DN=2 -DS=4 -DE=2" "-DBROKEN_LATE -DN=2 -DS=4 -DE=2" \
           "-DBROKEN_FP -DN=2 -DS=2 -DE=1" "-DBROKEN_SIM -DN=2 -DS=4 -DE=2"; do
  # shellcheck disable=SC2086
  check $bug
  if grep -q "assertion violated" <<<"$out"; then
    echo "agree.pml $bug: the planted bug is found ($(grep -o 'assertion violated.*' <<<"$out" | head -1 | cut -c1-60)...)"
  else
    echo "agree.pml $bug: the planted bug was NOT found: the check cannot fail"
    echo "$out" | tail -20
    fail=1
  fi
done
exit $fail
