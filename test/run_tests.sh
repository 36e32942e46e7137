#!/usr/bin/env bash
# Build rerail and run the whole test suite: unit tests, the NCCL-faithful
# harness against every exported ABI version, and the network-lab tests
# (those need root: run as root, as CI does).
#   BUILD_DIR=...  build directory (default: build/)
#   extra arguments are passed to cmake (e.g. -DRERAIL_SANITIZE=ON)
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$top/build}"
"$top/tools/build.sh" "$@"
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900
