#!/usr/bin/env bash
# Build rerail's libFuzzer targets with clang and run each one from its
# committed seed corpus (corpus/<target>/) for a fixed time, a few at a time
# in parallel. Fails when a target fails to build, crashes, leaks, times out
# on an input or breaks one of its invariants; the input that did it is kept
# and named in the output.
#
#   run_fuzzers.sh [--build-dir DIR] [TARGET...]   (default: every target)
#   RERAIL_FUZZ_SECONDS   seconds per target (default 60)
#   RERAIL_FUZZ_JOBS      targets run at once (default 2)
#   RERAIL_FUZZ_CC        the clang to use (default clang-14, else clang)
#
# New inputs the fuzzers find go to the build directory, never into the
# committed corpus; to keep an interesting one, copy it there by hand.
# Reproduce a crash: <build-dir>/fuzz_<target> <the crash file it names>.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$here/../../build/fuzz"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
secs="${RERAIL_FUZZ_SECONDS:-60}"
jobs="${RERAIL_FUZZ_JOBS:-2}"
cc="${RERAIL_FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}"
if [ -z "$cc" ]; then
  echo "run_fuzzers: no clang found (tools/install-deps.sh installs clang-14 and libclang-rt-14-dev)" >&2
  exit 1
fi

t0=$(date +%s)
cmake -S "$here" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" >/dev/null || { cmake --build "$build" -j1; exit 1; }
echo "run_fuzzers: built with $cc in $(( $(date +%s) - t0 )) s"
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <(grep -v '^$' "$build/fuzz_targets.txt"); fi

work="$build/run"
rm -rf "$work"
mkdir -p "$work"
# The health table target writes its input to a file per run: tmpfs keeps
# that off the disk.
scratch="$work"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then scratch="$(mktemp -d /dev/shm/rerail-fuzz-XXXXXX)"; fi
trap 'rm -rf "${scratch:?}"/rr-fuzz-* 2>/dev/null; [ "$scratch" = "$work" ] || rm -rf "$scratch"' EXIT

run_one() {
  local t="$1" d="$work/$1" opts=()
  mkdir -p "$d/found" "$d/crashes" "$scratch/$t"
  if [ ! -x "$build/fuzz_$t" ] || [ ! -d "$here/corpus/$t" ]; then
    echo "no fuzz_$t binary or no corpus/$t" >"$d/log"
    echo 1 >"$d/rc"
    return
  fi
  [ -f "$here/$t.options" ] && read -r -a opts <"$here/$t.options"
  local rc=0
  TMPDIR="$scratch/$t" "$build/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$d/crashes/" "${opts[@]}" \
    "$d/found" "$here/corpus/$t" >"$d/log" 2>&1 || rc=$?
  echo "$rc" >"$d/rc"
}

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

fail=0
for t in "${targets[@]}"; do
  d="$work/$t"
  rc="$(cat "$d/rc" 2>/dev/null || echo 1)"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -1 || true)"
  cov="$(grep -o 'cov: [0-9]*' "$d/log" | tail -1 || true)"
  crashes=("$d"/crashes/*)
  if [ "$rc" != 0 ] || [ -e "${crashes[0]}" ]; then
    fail=1
    echo "FAIL $t (exit $rc) - last lines of $d/log:"
    tail -n 40 "$d/log" | sed 's/^/    /'
    for c in "${crashes[@]}"; do [ -e "$c" ] && echo "    input kept: $c (reproduce: $build/fuzz_$t $c)"; done
  else
    echo "ok   $t: ${runs:-?} runs in ${secs} s, ${cov:-cov: ?}, $(ls "$here/corpus/$t" | wc -l) seeds"
  fi
done
echo "run_fuzzers: ${#targets[@]} targets, $(( $(date +%s) - t0 )) s in all"
exit "$fail"
