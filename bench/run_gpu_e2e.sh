#!/usr/bin/env bash
# run_gpu_e2e.sh: stock NCCL end to end on a machine with ONE GPU, twice in a
# row: first through rerail (NCCL_NET_PLUGIN=rerail, NCCL_TUNER_PLUGIN=rerail),
# then through NCCL's own TCP transport (NCCL_NET=Socket, no plugin). Prints
# both tables (every result checked by rerail-nccl-e2e), which net transport
# NCCL chose in each run (from NCCL_DEBUG=INFO), and a busbw comparison.
#
# Usage: bench/run_gpu_e2e.sh [BUILD_DIR] [-- rerail-nccl-e2e options]
#   BUILD_DIR  a configured and built tree (default: ./build) holding
#              bench/rerail-nccl-e2e, libnccl-net-rerail.so, libnccl-tuner-rerail.so
#   e.g.       bench/run_gpu_e2e.sh build -- --max-bytes 16M --iters 10
#
# Environment knobs:
#   E2E_NRANKS   ranks, all on device 0 (default 2)
#   E2E_MODES    runs to do, in order (default "rerail socket")
#   E2E_IFNAME   interface for NCCL's and rerail's sockets (default lo)
#   E2E_TIMEOUT  the driver's --timeout per step, seconds (default 120)
#   E2E_WALL     hard wall-clock limit per rank process, seconds (default 900)
#   E2E_OUT      folder for logs (default: a new folder under /tmp)
#   E2E_RERAIL_NET_NAME  if set, also NCCL_NET=<it> in the rerail run, so NCCL
#                fails instead of silently using another transport
#   E2E_MPS=1    start an MPS daemon first (two processes' kernels then run
#                concurrently instead of time-sliced)
#   NCCL_HOME    folder with lib/libnccl.so.2 to run against; default: the pip
#                package nvidia-nccl-* of python3, else what the loader finds
#
# How two ranks share one GPU: every rank uses device 0 and gets its own
# NCCL_HOSTID. NCCL derives its host hash from NCCL_HOSTID, so the ranks look
# like two hosts: it does not refuse them as a "Duplicate GPU", and between
# different hosts it connects only through a net transport (P2P and SHM
# connect ranks of the same host hash only). NCCL_P2P_DISABLE=1,
# NCCL_SHM_DISABLE=1 and NCCL_NVLS_ENABLE=0 are set as well, belt and braces,
# so that even a NCCL that matched peers some other way could not bypass the
# net; NCCL_IB_DISABLE=1 keeps NCCL's built-in IB transport out of both runs.
# The log check below fails the run if the channels do not go "via NET/...".
#
# Without MPS the two processes' kernels are time-sliced on the GPU: the
# bandwidths measure the transports under that handicap, equally for both
# runs; compare the two runs, not the absolute numbers.
set -u -o pipefail

die() { echo "run_gpu_e2e: error: $*" >&2; exit 2; }

BUILD=build
if [[ $# -gt 0 && $1 != -- ]]; then BUILD=$1; shift; fi
if [[ $# -gt 0 && $1 == -- ]]; then shift; fi
DRIVER_ARGS=("$@")

NRANKS=${E2E_NRANKS:-2}
MODES=${E2E_MODES:-"rerail socket"}
IFNAME=${E2E_IFNAME:-lo}
STEP_TIMEOUT=${E2E_TIMEOUT:-120}
WALL=${E2E_WALL:-900}
OUT=${E2E_OUT:-$(mktemp -d /tmp/rerail-gpu-e2e.XXXXXX)}
mkdir -p "$OUT" || die "cannot create $OUT"
BUILD_ABS=$(cd "$BUILD" 2>/dev/null && pwd) || die "no build folder '$BUILD' (configure and build first: cmake -S . -B build && cmake --build build -j)"
BUILD=$BUILD_ABS

DRIVER=$BUILD/bench/rerail-nccl-e2e
[[ -x $DRIVER ]] || DRIVER=$(find "$BUILD" -name rerail-nccl-e2e -type f -perm -u+x 2>/dev/null | head -n1)
[[ -n $DRIVER && -x $DRIVER ]] || die "rerail-nccl-e2e not built in $BUILD: CMake skips it without the CUDA Toolkit and NCCL (see 'rerail-nccl-e2e' in the cmake output; NCCL_HOME=... helps it find NCCL)"

# --- Libraries: NCCL (the machine's, e.g. 2.30 from pip), CUDA runtime -------
pip_lib_dir() { # first folder under python3's site-packages/nvidia holding $1
  command -v python3 >/dev/null || return 0
  python3 - "$1" <<'PY' 2>/dev/null
import glob, os, site, sys
roots = []
try: roots += site.getsitepackages()
except Exception: pass
try: roots.append(site.getusersitepackages())
except Exception: pass
for r in roots:
    for p in sorted(glob.glob(os.path.join(r, "nvidia", "**", sys.argv[1]), recursive=True)):
        print(os.path.dirname(p)); sys.exit(0)
PY
}
LIBDIRS=()
if [[ -n ${NCCL_HOME:-} ]]; then
  for d in "$NCCL_HOME/lib" "$NCCL_HOME/lib64" "$NCCL_HOME"; do [[ -e $d/libnccl.so.2 ]] && LIBDIRS+=("$d") && break; done
else
  d=$(pip_lib_dir libnccl.so.2); [[ -n $d ]] && LIBDIRS+=("$d")
fi
if ! LD_LIBRARY_PATH=$(IFS=:; echo "${LIBDIRS[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$DRIVER" | grep -q 'libcudart.*=> /'; then
  d=$(pip_lib_dir libcudart.so.13); [[ -n $d ]] && LIBDIRS+=("$d")
fi
BASE_LD=$(IFS=:; echo "${LIBDIRS[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BASE_LD=${BASE_LD#:}

echo "== rerail GPU end-to-end: $NRANKS ranks on one GPU, interface $IFNAME, logs in $OUT"
echo "-- driver: $DRIVER"
missing=$(LD_LIBRARY_PATH=$BASE_LD ldd "$DRIVER" | grep 'not found')
LD_LIBRARY_PATH=$BASE_LD ldd "$DRIVER" | grep -E 'libnccl|libcudart' | sed 's/^/   /'
[[ -z $missing ]] || die "the driver's libraries are missing: $missing (set NCCL_HOME or LD_LIBRARY_PATH)"
command -v nvidia-smi >/dev/null && nvidia-smi -L | sed 's/^/-- /'

find_so() { # $1: where CMake puts it, $2: file name
  if [[ -e $BUILD/$1/$2 ]]; then echo "$BUILD/$1/$2"; else find "$BUILD" -name "$2" 2>/dev/null | head -n1; fi
}
NET_SO=$(find_so net_plugin libnccl-net-rerail.so)
TUNER_SO=$(find_so tuner_plugin libnccl-tuner-rerail.so)
if [[ " $MODES " == *" rerail "* ]]; then
  [[ -n $NET_SO ]] || die "libnccl-net-rerail.so not found under $BUILD"
  [[ -n $TUNER_SO ]] || echo "run_gpu_e2e: warning: libnccl-tuner-rerail.so not found; NCCL will look for the tuner in the net plugin" >&2
  PLUGIN_LD=$(dirname "$NET_SO")${TUNER_SO:+:$(dirname "$TUNER_SO")}
  for so in $NET_SO $TUNER_SO; do
    echo "-- plugin: $so"
    # A plugin whose dependencies do not resolve (libnuma, say) makes NCCL
    # fall back to its own transports with only an INFO line: fail here.
    miss=$(LD_LIBRARY_PATH=$PLUGIN_LD:$BASE_LD ldd "$so" | grep 'not found')
    [[ -z $miss ]] || die "$so cannot load here: $miss"
  done
fi

MPS_STARTED=0
if [[ ${E2E_MPS:-0} == 1 ]]; then
  if command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=$OUT/mps-pipe CUDA_MPS_LOG_DIRECTORY=$OUT/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && MPS_STARTED=1 && echo "-- MPS daemon started"
  else
    echo "run_gpu_e2e: warning: E2E_MPS=1 but nvidia-cuda-mps-control is not installed" >&2
  fi
fi
# shellcheck disable=SC2317 # called from the EXIT trap
stop_mps() { [[ $MPS_STARTED == 1 ]] && echo quit | nvidia-cuda-mps-control; MPS_STARTED=0; }
trap stop_mps EXIT

# --- One run: NRANKS processes, one mode ---------------------------------------
# run_mode MODE -> 0 when every rank exited 0 and NCCL used the expected transport
run_mode() {
  local mode=$1 rdv=$OUT/$1.rendezvous r rc=0 pids=()
  rm -f "$rdv" "$rdv.tmp" "$OUT/$mode".*
  echo
  echo "================ $mode ================"
  for ((r = 0; r < NRANKS; r++)); do
    (
      export NCCL_HOSTID=rerail-e2e-host$r
      export NCCL_SOCKET_IFNAME=$IFNAME RERAIL_SOCKET_IFNAME=$IFNAME
      export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1
      export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV,TUNING
      export NCCL_DEBUG_FILE=$OUT/$mode.nccl.r$r.log
      if [[ $mode == rerail ]]; then
        export LD_LIBRARY_PATH=$PLUGIN_LD${BASE_LD:+:$BASE_LD}
        export NCCL_NET_PLUGIN=rerail NCCL_TUNER_PLUGIN=rerail
        if [[ -n ${E2E_RERAIL_NET_NAME:-} ]]; then export NCCL_NET=$E2E_RERAIL_NET_NAME; else unset NCCL_NET; fi
      else
        export LD_LIBRARY_PATH=$BASE_LD
        unset NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN
        export NCCL_NET=Socket
      fi
      exec timeout --kill-after=10 "$WALL" "$DRIVER" --rank "$r" --nranks "$NRANKS" \
        --rendezvous "$rdv" --device 0 --timeout "$STEP_TIMEOUT" "${DRIVER_ARGS[@]}"
    ) >"$OUT/$mode.r$r.out" 2>"$OUT/$mode.r$r.err" &
    pids+=($!)
  done
  for ((r = 0; r < NRANKS; r++)); do
    wait "${pids[$r]}"
    local st=$?
    [[ $st == 0 ]] || { echo "-- rank $r exited $st"; rc=1; }
  done
  cat "$OUT/$mode.r0.out"
  for ((r = 0; r < NRANKS; r++)); do
    [[ -s $OUT/$mode.r$r.err ]] && { echo "-- rank $r stderr (last lines):"; tail -n 15 "$OUT/$mode.r$r.err" | sed 's/^/   /'; }
  done

  echo "-- transport, from NCCL_DEBUG=INFO (count: line):"
  cat "$OUT/$mode".nccl.r*.log 2>/dev/null | sed -n 's/.*NCCL INFO //p' |
    grep -E 'NET/Plugin|TUNER/Plugin|[Tt]uner|Using network|via NET/|via P2P|via SHM|NCCL version' |
    sed -E 's/^Channel [0-9]+\/[0-9]+ : [0-9]+\[[0-9]+\] -> [0-9]+\[[0-9]+\] /Channel NN : a -> b /' |
    sort | uniq -c | sort -rn | head -n 25 | sed 's/^/   /'
  local nets
  nets=$(cat "$OUT/$mode".nccl.r*.log 2>/dev/null | grep -oE 'via NET/[^/ ]+' | sort -u | sed 's|via NET/||' | tr '\n' ' ')
  nets=${nets% }
  if cat "$OUT/$mode".nccl.r*.log 2>/dev/null | grep -qE 'via (P2P|SHM)'; then
    echo "-- FAIL: some channels bypass the net (P2P/SHM)"; rc=1
  fi
  if [[ -z $nets ]]; then
    echo "-- FAIL: no channel went 'via NET/...' (see $OUT/$mode.nccl.r*.log)"; rc=1
  elif [[ $mode == socket && $nets != Socket ]]; then
    echo "-- FAIL: expected NCCL's Socket transport, channels went via: $nets"; rc=1
  elif [[ $mode == rerail && ( $nets == *Socket* || $nets == *IB* ) ]]; then
    echo "-- FAIL: the rerail plugin was not used, channels went via: $nets"; rc=1
  else
    echo "-- channels went via NET/$nets"
  fi
  return $rc
}

overall=0
declare -A RESULT
for mode in $MODES; do
  case $mode in rerail | socket) ;; *) die "unknown mode '$mode' in E2E_MODES" ;; esac
  if run_mode "$mode"; then RESULT[$mode]=PASS; else RESULT[$mode]=FAIL; overall=1; fi
done

# --- Comparison ------------------------------------------------------------------
if [[ -s $OUT/rerail.r0.out && -s $OUT/socket.r0.out ]]; then
  echo
  echo "================ comparison: busbw GB/s, rerail vs NCCL Socket ================"
  awk '
    FNR == 1 { f++ }
    # table rows: op bytes count time_us algbw busbw errors
    $1 ~ /^(allreduce|allgather|reducescatter)$/ && NF >= 7 {
      k = $1 " " $2
      if (f == 1) { r[k] = $6; order[++n] = k } else { s[k] = $6 }
    }
    $0 ~ /^# avg busbw:/ { avg[f] = $4 }
    END {
      printf "  %-13s %12s %12s %12s %8s\n", "op", "bytes", "rerail", "socket", "ratio"
      for (i = 1; i <= n; i++) {
        k = order[i]; split(k, a, " ")
        ratio = ((k in s) && s[k] + 0 > 0) ? sprintf("%.2f", r[k] / s[k]) : "-"
        printf "  %-13s %12s %12s %12s %8s\n", a[1], a[2], r[k], (k in s) ? s[k] : "-", ratio
      }
      if (avg[1] != "" && avg[2] != "") {
        ratio = (avg[2] + 0 > 0) ? sprintf("%.2f", avg[1] / avg[2]) : "-"
        printf "  avg busbw: rerail %s GB/s, socket %s GB/s, ratio %s\n", avg[1], avg[2], ratio
      }
    }' "$OUT/rerail.r0.out" "$OUT/socket.r0.out"
fi

echo
for mode in $MODES; do echo "== $mode: ${RESULT[$mode]}"; done
echo "== logs: $OUT"
exit $overall
