#!/usr/bin/env bash
# ctest device_check_dry: bench/device_check.sh without a GPU (root: the lab).
#   1. The full check on a machine without a GPU stops within seconds, exit 2,
#      one line on stderr, before building anything (skipped where a GPU is).
#   2. --no-gpu runs every step that needs no GPU against BUILD_DIR (built, not
#      reconfigured): the build, the NCCL log checker against the canned logs,
#      a rail failed under checked harness traffic in two namespaces, the short
#      socket bench. Judged by the exit status and summary.tsv, not wording.
#   3. --pack-deps copies libsodium (and, where rerail-nccl-e2e is built, its
#      CUDA and NCCL headers) out of BUILD_DIR, and iproute2's ip with a
#      wrapper that runs it on its own libraries.
#
# usage: device_check_dry.sh BUILD_DIR
set -u
BUILD=${1:?usage: $0 BUILD_DIR}
TOP="$(cd "$(dirname "$0")/../.." && pwd)"
DC=$TOP/bench/device_check.sh
work=$(mktemp -d /tmp/rerail-device-check-dry.XXXXXX)
failures=0 passes=0
pass() { echo "PASS $*"; passes=$((passes + 1)); }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# ---- 1. no GPU: fail fast, one line ----------------------------------------
shopt -s nullglob
gpus=(/dev/nvidia[0-9]*)
shopt -u nullglob
if command -v nvidia-smi >/dev/null || [[ ${#gpus[@]} -gt 0 ]]; then
  echo "SKIP full mode without a GPU: this machine has one (nvidia-smi or /dev/nvidia*)"
else
  t0=$EPOCHREALTIME
  timeout 60 bash "$DC" --build-dir "$work/never-built" --out "$work/full" >"$work/full.out" 2>"$work/full.err"
  rc=$?
  ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
  lines=$(wc -l <"$work/full.err")
  if [[ $rc == 2 && $ms -lt 10000 && $lines == 1 && ! -e $work/never-built && ! -s $work/full.out ]]; then
    pass "full mode without a GPU: exit 2 in $ms ms, one line: $(cat "$work/full.err")"
  else
    fail "full mode without a GPU: exit $rc in $ms ms, $lines stderr line(s), build dir $([[ -e $work/never-built ]] && echo created || echo absent)"
    cat "$work/full.out" "$work/full.err"
  fi
fi

# ---- 2. --no-gpu ------------------------------------------------------------------
timeout 200 bash "$DC" --no-gpu --build-dir "$BUILD" --out "$work/dry" --budget 180 >"$work/dry.out" 2>&1
rc=$?
cat "$work/dry.out"
declare -A want=([preflight]=PASS [build]=PASS [e2e]=SKIP [nccl-log]=PASS [failover]=PASS [bench]=PASS)
declare -A got=()
if [[ -r $work/dry/summary.tsv ]]; then
  while IFS=$'\t' read -r step res _; do got[$step]=$res; done <"$work/dry/summary.tsv"
fi
for step in preflight build e2e nccl-log failover bench; do
  if [[ ${got[$step]:-missing} == "${want[$step]}" ]]; then
    pass "--no-gpu step $step: ${got[$step]}"
  else
    fail "--no-gpu step $step: ${got[$step]:-missing}, expected ${want[$step]} (log $work/dry/$step.log)"
  fi
done
if [[ $rc == 0 ]]; then pass "--no-gpu exit status 0"; else fail "--no-gpu exit status $rc"; fi
# The failover step moved traffic across a real rail failure: it counted one.
failovers=$(cat "$work"/dry/failover/telemetry/*.jsonl* 2>/dev/null | grep -c '"kind":"failover"')
if ((failovers > 0)); then pass "the lab run reported $failovers failover(s)"; else fail "the lab run reported no failover"; fi
# No lab left behind.
if ip netns list 2>/dev/null | grep -q '^dcheck-'; then fail "lab namespaces dcheck-* left behind"; else pass "no lab left behind"; fi

# ---- 3. --pack-deps ------------------------------------------------------------
if bash "$DC" --pack-deps "$work/deps" --build-dir "$BUILD" >"$work/pack.out" 2>&1 &&
  [[ -s $work/deps/include/sodium.h && -s $work/deps/lib/libsodium.a && -s $work/deps/MANIFEST ]]; then
  if [[ -e $BUILD/bench/rerail-nccl-e2e ]]; then
    if [[ -s $work/deps/include/nccl.h && -s $work/deps/include/cuda_runtime.h && -n $(ls "$work"/deps/lib/libcudart.so.* 2>/dev/null) ]]; then
      pass "--pack-deps: libsodium, nccl.h, cuda_runtime.h and libcudart ($(find "$work/deps" -type f | wc -l) files)"
    else
      fail "--pack-deps: the CUDA/NCCL headers or libcudart are missing"; cat "$work/pack.out"
    fi
  else
    pass "--pack-deps: libsodium (rerail-nccl-e2e not built here: no CUDA headers to pack)"
  fi
else
  fail "--pack-deps"; cat "$work/pack.out"
fi

# The packed ip (for GPU machines whose image has none) must run through its
# wrapper and see this machine's namespaces as the real one does.
if [[ -x $work/deps/bin/ip ]]; then
  ns=rerail-dcdry-$$
  if ip netns add "$ns" 2>/dev/null; then
    if "$work/deps/bin/ip" netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns" &&
      [[ $("$work/deps/bin/ip" netns exec "$ns" sh -c 'echo "${LD_LIBRARY_PATH-unset}"') == "${LD_LIBRARY_PATH-unset}" ]]; then
      pass "--pack-deps: the packed ip runs, lists namespaces, and leaves its children's library path alone"
    else
      fail "--pack-deps: the packed ip does not list namespace $ns or changed the library path of what it runs"
    fi
    ip netns del "$ns"
  else
    fail "cannot make namespace $ns to test the packed ip"
  fi
else
  fail "--pack-deps: no bin/ip packed (this machine has ip)"
fi

echo "device_check_dry: $passes passed, $failures failed"
if ((failures == 0)); then
  rm -rf "$work"
  exit 0
fi
echo "logs kept in $work"
exit 1
