#!/usr/bin/env bash
# Build rerail and run the whole test suite: unit tests, the NCCL-faithful
# harness against every exported ABI version, and the network-lab tests
# (those need root: run as root, as CI does).
# Warnings are errors here (-DRERAIL_WERROR=ON), for developers and CI alike;
# tools/build.sh alone, as users build, leaves them warnings.
#   BUILD_DIR=...  build directory (default: build/)
#   extra arguments are passed to cmake after it (e.g. -DRERAIL_SANITIZE=ON)
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$top/build}"
"$top/tools/build.sh" -DRERAIL_WERROR=ON "$@"
if ! ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900; then
  # A CI report may keep only the end of this output: repeat each failed
  # test's own verdict lines (its "FAIL ..." lines) here, after ctest's summary.
  echo "=== verdict lines of the failed tests ==="
  awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3; buf = ""; n = 0; next }
       /(^|[: ])FAIL[: ]/ { if (n++ < 8) buf = buf t ": " substr($0, 1, 400) "\n" }
       /^Test Failed/ { printf "%s", buf }' \
    "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null || true
  exit 1
fi
