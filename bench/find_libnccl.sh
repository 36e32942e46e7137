# Sourced by the benchmark scripts: sets NCCL_LIB to the libnccl.so.2 whose
# built-in socket transport `rerail-net-bench --plugin nccl-socket:LIB`
# measures. Keeps NCCL_LIB if the caller set it; else the first
# LD_LIBRARY_PATH entry holding the file, else the ld.so cache's, else the one
# CMake found for the build ($1: the build directory, RERAIL_NCCL_LIB in its
# CMakeCache.txt). Leaves NCCL_LIB empty when none is found or readable.
# shellcheck shell=bash
find_libnccl() {
  local build=$1 d ldp=()
  if [[ -z "${NCCL_LIB:-}" ]]; then
    IFS=: read -r -a ldp <<<"${LD_LIBRARY_PATH:-}"
    for d in "${ldp[@]}"; do
      if [[ -n "$d" && -e "$d/libnccl.so.2" ]]; then NCCL_LIB="$d/libnccl.so.2"; break; fi
    done
  fi
  if [[ -z "${NCCL_LIB:-}" ]]; then
    # awk reads to the end: an early exit would leave ldconfig writing into a closed pipe, and
    # its SIGPIPE fails the pipeline under the callers' `set -eo pipefail` (silently, now and then).
    NCCL_LIB=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" && !found {print $NF; found = 1}')
  fi
  if [[ -z "${NCCL_LIB:-}" && -r "$build/CMakeCache.txt" ]]; then
    NCCL_LIB=$(sed -n 's/^RERAIL_NCCL_LIB:FILEPATH=//p' "$build/CMakeCache.txt")
    [[ $NCCL_LIB == *NOTFOUND ]] && NCCL_LIB=""
  fi
  [[ -n "${NCCL_LIB:-}" && -r "$NCCL_LIB" ]] || NCCL_LIB=""
  return 0
}
# The version string compiled into the library ("2.28.9+cuda13.0"), or empty.
libnccl_version() {
  grep -a -o -m1 'NCCL version [0-9][0-9.]*[-+a-z0-9.]*' "$1" 2>/dev/null | head -1 | sed 's/NCCL version //' || true
}
