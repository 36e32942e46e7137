#!/usr/bin/env bash
# rerail ring-order end to end: each output format from a rack-labelled host
# list and from a measured matrix, and clear failures on bad input.
# Usage: ring_order_cli.sh PATH/rerail
set -euo pipefail
rerail="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "ring_order_cli: $*"; exit 1; }

printf 'a0 r0\na1 r1\nb0 r0\nb1 r1\n' >"$dir/hosts"
out="$("$rerail" ring-order --hosts "$dir/hosts" --slots 2 2>"$dir/err")"
[ "$out" = "$(printf 'a0 slots=2\nb0 slots=2\na1 slots=2\nb1 slots=2')" ] || fail "hostfile: $out"
grep -q "leaves a rack 2 times (input order: 4)" "$dir/err" || fail "report: $(cat "$dir/err")"

"$rerail" ring-order --hosts "$dir/hosts" --format slurm --slots 2 --out "$dir/slurm" 2>/dev/null
[ "$(grep -v '^#' "$dir/slurm" | tr '\n' ' ')" = "a0 a0 b0 b0 a1 a1 b1 b1 " ] || fail "slurm: $(cat "$dir/slurm")"
out="$("$rerail" ring-order --hosts "$dir/hosts" --format torchrun 2>/dev/null | grep -v '^#')"
[ "$out" = "$(printf 'a0 0\nb0 1\na1 2\nb1 3')" ] || fail "torchrun: $out"
out="$("$rerail" ring-order --hosts "$dir/hosts" --format rankmap --slots 2 2>/dev/null | grep -v '^#' | sed -n 3p)"
[ "$out" = "2 b0 0" ] || fail "rankmap: $out"

# Fast only as x -> z -> y -> x.
printf 'x y z\n0 1 9\n9 0 1\n1 9 0\n' >"$dir/matrix"
out="$("$rerail" ring-order --matrix "$dir/matrix" --format torchrun 2>"$dir/err" | grep -v '^#' | cut -d' ' -f1 | tr '\n' ' ')"
[ "$out" = "x z y " ] || fail "matrix order: $out"
grep -q "exact; slowest hop 9.00 GB/s (input order: 1.00 GB/s)" "$dir/err" || fail "matrix report: $(cat "$dir/err")"

# Bad input: a message naming file and line, exit status 1 or 2, no output.
printf 'x y\n0 1\n1 q\n' >"$dir/bad"
if "$rerail" ring-order --matrix "$dir/bad" >"$dir/out" 2>"$dir/err"; then fail "bad matrix accepted"; fi
grep -q "bad:3: row 2 column 2: 'q'" "$dir/err" || fail "bad matrix message: $(cat "$dir/err")"
[ ! -s "$dir/out" ] || fail "output written for a bad matrix"
if "$rerail" ring-order --hosts "$dir/none" 2>"$dir/err"; then fail "missing file accepted"; fi
grep -q "No such file" "$dir/err" || fail "missing file message: $(cat "$dir/err")"
if "$rerail" ring-order --hosts "$dir/hosts" --format xml 2>/dev/null; then fail "bad format accepted"; fi
if "$rerail" ring-order --hosts "$dir/hosts" --matrix "$dir/matrix" 2>/dev/null; then fail "both inputs accepted"; fi
if "$rerail" ring-order --hosts "$dir/hosts" --slots 0 2>/dev/null; then fail "--slots 0 accepted"; fi
echo "ring_order_cli: all formats and errors as expected"
