#!/usr/bin/env bash
# Configure and build rerail into BUILD_DIR (default: build/). Extra args go to cmake.
# Warnings stay warnings unless -DRERAIL_WERROR=ON (test/run_tests.sh passes it).
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$top/build}"
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
