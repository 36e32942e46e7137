#!/usr/bin/env bash
# Deterministic simulation at scale: rerail-sim (test/sim/) over a long range
# of seeds, split into SIM_JOBS processes that each take a contiguous block.
# Every seed is a different rail set, fault schedule and traffic; a failing
# seed is printed with its replay command (rerail-sim --seed N --verbose).
#
# usage: bench/sim_bench.sh BUILD_DIR [SEEDS [FIRST]]    (default 1000000 seeds from 1)
# Environment: SIM_JOBS (default: 1), SIM_NICE (default: 10).
# Ends with a markdown section for bench/RESULTS.md (result, seeds/s, the command).
set -euo pipefail
build="${1:?usage: bench/sim_bench.sh BUILD_DIR [SEEDS [FIRST]]}"
seeds="${2:-1000000}"
first="${3:-1}"
jobs="${SIM_JOBS:-1}"
sim="$build/test/sim/rerail-sim"
[ -x "$sim" ] || { echo "no $sim: build the rerail-sim target first" >&2; exit 2; }
commit=$(git -C "$(dirname "$0")/.." rev-parse --short HEAD 2>/dev/null || echo '?')
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
per=$(( (seeds + jobs - 1) / jobs ))
start=$(date +%s.%N)
pids=()
for ((j = 0; j < jobs; j++)); do
  f=$(( first + j * per ))
  n=$(( seeds - j * per < per ? seeds - j * per : per ))
  [ "$n" -gt 0 ] || break
  nice -n "${SIM_NICE:-10}" "$sim" --seeds "$n" --first "$f" --max-failures 1000 > "$tmp/job$j.txt" 2>&1 &
  pids+=("$!")
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
end=$(date +%s.%N)
grep -h '^FAIL seed' "$tmp"/job*.txt || true
tail -qn1 "$tmp"/job*.txt
wall=$(echo "$end - $start" | bc)
# A job killed before its summary counts nothing: the table would show it.
total=$(awk '/^rerail-sim: [0-9]+ seed/ {s += $2} END {print s + 0}' "$tmp"/job*.txt)
failed=$(awk '/^rerail-sim: [0-9]+ seed/ {for (i = 1; i <= NF; i++) if ($i == "failed;") f += $(i-1)} END {print f + 0}' "$tmp"/job*.txt)
cat <<MD

### Deterministic simulation, $total seeds

Command: \`bench/sim_bench.sh $build $seeds $first\` (SIM_JOBS=$jobs), commit $commit,
$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) core(s), $(uname -sr).

| seeds | failed | wall s | seeds/s |
|---:|---:|---:|---:|
| $total | $failed | $(printf '%.0f' "$wall") | $(echo "scale=0; $total / $wall" | bc) |
MD
exit $rc
