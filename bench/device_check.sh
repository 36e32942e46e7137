#!/usr/bin/env bash
# device_check.sh: the one prepared GPU check (issue 24). Run once on a GPU
# machine lent for ~15 minutes (one H100/H200, 16 cores, CUDA and NCCL in
# python3's nvidia-* packages, no RDMA NIC, no network), as root, it
#   1 preflight  finds the GPU (else fails within seconds, one line), NCCL,
#                the CUDA runtime, the compilers and tools
#   2 build      configures and builds what the check needs (the plugins, the
#                harness, the benchmarks, rerail-nccl-e2e) with the machine's
#                compilers and nothing from the internet
#   3 e2e        stock NCCL, two ranks on the one GPU (NCCL_HOSTID per rank),
#                all-reduce, all-gather and reduce-scatter, every result
#                checked: through rerail (net + tuner) and through NCCL's own
#                socket transport (bench/run_gpu_e2e.sh)
#   4 nccl-log   NCCL's own log: every channel via NET/rerail, rerail's tuner
#                loaded (bench/nccl_log_check.sh)
#   5 failover   the two ranks in two network namespaces joined by two veth
#                rails (test/lab/netlab.sh); the rail carrying the traffic goes
#                down during an all-reduce loop and comes back: the job must
#                finish with every result correct, and rerail must report the
#                failover
#   6 bench      the TCP side by side on the machine's cores: rerail against
#                NCCL's socket transport with NCCL_SOCKET_NTHREADS and
#                NCCL_NSOCKS_PERTHREAD tuned, then with NCCL's defaults
#                (bench/socket_compare.sh --quick)
# then prints one summary: a PASS/FAIL line per step, where the logs are, and
# the lines worth pasting into bench/RESULTS.md. The logs folder (--out) keeps
# one log per step, summary.txt, summary.tsv (step, result, seconds, detail:
# for scripts), results.md (the RESULTS.md lines), the e2e run's and the
# failover run's NCCL logs and rank outputs, the bench tables.
#
# Every step runs under its own time limit, all of them under one budget
# (default 440 s: the whole run stays under 8 minutes even when every step
# hangs), so a hang in one step cannot eat the machine's slot.
#
# usage: bench/device_check.sh [options]
#   --no-gpu          (or DEVICE_CHECK_DRY=1) every step that needs no GPU: the
#                     build, the log check against the canned logs in
#                     test/integration/nccl_logs/, the failover in the lab with
#                     the harness driving rerail instead of NCCL, a short bench.
#                     ctest device_check_dry runs this.
#   --build-dir DIR   build here (default: build-device/ in the source tree). A
#                     DIR already configured is built, not reconfigured.
#   --prebuilt DIR    build nothing: use the binaries of a build made elsewhere
#                     (configured with -DRERAIL_LIBNUMA=OFF, so the plugins need
#                     nothing but libc)
#   --deps DIR        a folder made by --pack-deps on a development machine:
#                     libsodium's headers and static library, the CUDA runtime
#                     and NCCL headers rerail-nccl-e2e includes, libcudart;
#                     searched before the machine's own (CMAKE_PREFIX_PATH)
#   --out DIR         logs and results (default: a new folder under /tmp)
#   --budget S        seconds for the whole run (default 440; 240 with --no-gpu)
#   --pack-deps DIR   no check: copy the build dependencies a GPU machine may
#                     lack out of a configured build (--build-dir, default
#                     build/) into DIR, to carry there; then exit
# environment:
#   DC_NCCL_NTHREADS, DC_NCCL_NSOCKS  the tuned NCCL socket transport of the
#                     bench (default 4 and 4: 16 sockets, one helper thread
#                     per 4, on 16 cores)
#   DC_LOOP_SECONDS   the all-reduce loop of the failover step (default 20;
#                     --no-gpu: the harness's run, 8)
#   DC_E2E_MAX        the largest size of the e2e sweep (default 32M)
#   DC_CMAKE_ARGS     more arguments for a fresh configure (split at spaces)
#   NCCL_HOME         a folder with lib/libnccl.so.2 (default: python3's
#                     nvidia-nccl-* package, as bench/run_gpu_e2e.sh)
#   CUDA_HOME         the CUDA toolkit or runtime (default: nvcc on PATH, else
#                     python3's nvidia-cuda-runtime package)
#   DEVICE_CHECK_ASSUME_GPU=1  test knob: skip the GPU probe (the GPU steps then
#                     fail at CUDA's initialisation), to test this script's
#                     GPU path on a machine without one
# Exit status: 0 every step passed (--no-gpu: skipped the GPU step), 1 a step
# failed, 2 preflight failed (no GPU, not root, a tool missing) or bad usage.
set -u -o pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
TOP=$(cd "$(dirname "$SELF")/.." && pwd)
NETLAB=$TOP/test/lab/netlab.sh
LAB=dcheck
STEPS=(build e2e nccl-log failover bench)

say() { echo "device_check: $*"; }
die() { echo "device_check: FAIL: $*" >&2; exit 2; }

# ---- discovery helpers (shared by preflight and the steps) -------------------

# python3's site-packages folders, one a line (the pip nvidia-* packages live there).
pip_roots() {
  command -v python3 >/dev/null || return 0
  python3 - <<'PY' 2>/dev/null
import site
roots = []
try: roots += site.getsitepackages()
except Exception: pass
try: roots.append(site.getusersitepackages())
except Exception: pass
for r in roots: print(r)
PY
}
# first file under <site-packages>/nvidia/ named $1 (a glob), or nothing
pip_find() {
  local r f
  while read -r r; do
    [[ -d $r/nvidia ]] || continue
    f=$(find "$r/nvidia" -name "$1" \( -type f -o -type l \) 2>/dev/null | sort | head -n1)
    [[ -n $f ]] && { echo "$f"; return 0; }
  done < <(pip_roots)
  return 0
}

# The cmake to use: PATH, else the pip package's (python3 -m pip install cmake).
find_cmake() {
  if command -v cmake >/dev/null; then command -v cmake; return 0; fi
  local d
  d=$(python3 -c 'import cmake; print(cmake.CMAKE_BIN_DIR)' 2>/dev/null) || true
  [[ -n $d && -x $d/cmake ]] && echo "$d/cmake"
  return 0
}

# GPU_DESC on success; GPU_WHY on failure.
gpu_probe() {
  local out devs=()
  GPU_DESC="" GPU_WHY=""
  shopt -s nullglob
  devs=(/dev/nvidia[0-9]*)
  shopt -u nullglob
  if command -v nvidia-smi >/dev/null; then
    if out=$(timeout 10 nvidia-smi -L 2>&1) && grep -q '^GPU ' <<<"$out"; then
      GPU_DESC=$(grep -m1 '^GPU ' <<<"$out" | sed 's/ (UUID.*//')
      local n; n=$(grep -c '^GPU ' <<<"$out")
      ((n > 1)) && GPU_DESC+=" (+$((n - 1)) more; device 0 is used)"
      local drv
      drv=$(timeout 10 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)
      [[ -n $drv ]] && GPU_DESC+=", driver $drv"
      return 0
    fi
    GPU_WHY="nvidia-smi -L failed: $(head -n1 <<<"$out")"
  else
    GPU_WHY="no nvidia-smi"
  fi
  if [[ ${#devs[@]} -gt 0 ]]; then
    GPU_DESC="${devs[0]} (${GPU_WHY})"
    return 0
  fi
  GPU_WHY+=", no /dev/nvidia[0-9]*"
  return 1
}

# ---- --pack-deps ---------------------------------------------------------------
# Copies out of a configured and built tree what a GPU machine without the dev
# packages needs to build rerail: libsodium (headers, static library), the
# CUDA runtime and NCCL headers rerail-nccl-e2e includes (from the compiler's
# own dependency file) and libcudart. Paths come from the tree's CMakeCache.txt.
pack_deps() {
  local dst=$1 build=$2 cache f root rel n=0
  cache=$build/CMakeCache.txt
  [[ -r $cache ]] || die "--pack-deps: $build is not a configured build (no CMakeCache.txt); configure and build it first (tools/build.sh)"
  cachevar() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n1; }
  mkdir -p "$dst/include" "$dst/lib" || die "--pack-deps: cannot create $dst"
  local sinc slib
  sinc=$(cachevar SODIUM_INCLUDE_DIR) slib=$(cachevar SODIUM_STATIC_LIB)
  [[ -r $sinc/sodium.h && -r $slib ]] || die "--pack-deps: libsodium not found through $cache (SODIUM_INCLUDE_DIR, SODIUM_STATIC_LIB)"
  if ! { cp -L "$sinc/sodium.h" "$dst/include/" && cp -rL "$sinc/sodium" "$dst/include/" &&
    cp -L "$slib" "$dst/lib/libsodium.a"; }; then
    die "--pack-deps: copying libsodium failed"
  fi
  echo "libsodium: $sinc/sodium.h, $slib" >"$dst/MANIFEST"
  # The driver's headers: every file of its depfile under one of its -I/-isystem folders.
  local dd=$build/bench/CMakeFiles/rerail-nccl-e2e.dir
  if [[ -r $dd/nccl_e2e.c.o.d && -r $dd/flags.make ]]; then
    local roots=()
    read -r -a roots < <(sed -n 's/^C_INCLUDES = //p' "$dd/flags.make" | sed 's/-isystem //g; s/-I//g')
    while read -r f; do
      for root in "${roots[@]}"; do
        root=${root%/}
        if [[ $f == "$root"/* ]]; then
          rel=${f#"$root"/}
          mkdir -p "$dst/include/$(dirname "$rel")" && cp -L "$f" "$dst/include/$rel" && n=$((n + 1))
          break
        fi
      done
    done < <(sed 's/\\$//' "$dd/nccl_e2e.c.o.d" | tr ' ' '\n' | grep '^/.*\.h[a-z]*$' | sort -u)
    echo "CUDA runtime and NCCL headers: $n files under ${roots[*]}" >>"$dst/MANIFEST"
    local cudart
    cudart=$(cachevar CUDA_cudart_LIBRARY)
    [[ -n $cudart && -e $cudart ]] || cudart=$(cachevar RERAIL_CUDART_LIBRARY)
    if [[ -n $cudart && -e $cudart ]]; then
      local so
      so=$(objdump -p "$(readlink -f "$cudart")" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
      [[ -n $so ]] || so=$(basename "$(readlink -f "$cudart")")
      cp -L "$cudart" "$dst/lib/$so" && echo "CUDA runtime: $cudart as lib/$so" >>"$dst/MANIFEST"
    fi
  else
    echo "no CUDA/NCCL headers: rerail-nccl-e2e is not built in $build" >>"$dst/MANIFEST"
  fi
  pack_ip_tool "$dst"
  echo "made by bench/device_check.sh --pack-deps on $(hostname) ($(uname -m)), $(date -u +%Y-%m-%dT%H:%MZ)" >>"$dst/MANIFEST"
  cat "$dst/MANIFEST"
  say "packed into $dst ($(du -sh "$dst" | cut -f1)): carry it to the GPU machine, run bench/device_check.sh --deps $dst"
}

# The failover step's lab needs iproute2's `ip`, which a GPU machine's image may
# lack (the first lent one did). Packed: the binary, the libraries it needs
# beyond glibc (the machine's own glibc is as new or newer), and bin/ip, which
# runs it through the machine's loader with --library-path, so nothing ip
# starts (`ip netns exec`) inherits a changed library path.
pack_ip_tool() {
  local dst=$1 ip lib
  ip=$(command -v ip) || { echo "no ip here: the failover step needs the GPU machine's own" >>"$dst/MANIFEST"; return 0; }
  mkdir -p "$dst/tools/lib" "$dst/bin" && cp -L "$ip" "$dst/tools/ip" || die "--pack-deps: copying $ip failed"
  while read -r lib; do
    case $(basename "$lib") in libc.so.* | libm.so.* | ld-linux*) continue ;; esac
    cp -L "$lib" "$dst/tools/lib/" || die "--pack-deps: copying $lib failed"
  done < <(ldd "$ip" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  cat >"$dst/bin/ip" <<'WRAP'
#!/bin/sh
# ip packed by bench/device_check.sh --pack-deps, run with its own libraries.
here=$(cd "$(dirname "$0")/.." && pwd)
for ld in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1; do
  [ -x "$ld" ] && exec "$ld" --library-path "$here/tools/lib" "$here/tools/ip" "$@"
done
echo "ip (packed): no dynamic loader found" >&2
exit 127
WRAP
  chmod +x "$dst/bin/ip"
  echo "ip: $ip and $(ls "$dst/tools/lib" | wc -l) libraries, run by bin/ip (used only where the machine has no ip)" >>"$dst/MANIFEST"
}

# ---- the steps (each runs as its own process: bash device_check.sh __step NAME) --
# A step writes one line of detail to $DC_OUT/steps/NAME.detail, lines for
# bench/RESULTS.md to $DC_OUT/steps/NAME.results, and exits 0 (PASS), 77 (SKIP)
# or anything else (FAIL). Its output goes to $DC_OUT/NAME.log; fd 3 is the
# console, for the few lines worth watching.

detail() { echo "$*" >"$DC_OUT/steps/$STEP.detail"; }
result() { printf '%s\n' "$@" >>"$DC_OUT/steps/$STEP.results"; }
note() { echo "   $*" >&3; echo "$*"; }

plugin_dir() { dirname "$(find_built net_plugin libnccl-net-rerail.so)"; }
find_built() { # $1: where CMake puts it, $2: file name
  if [[ -e $DC_BUILD/$1/$2 ]]; then echo "$DC_BUILD/$1/$2"; else find "$DC_BUILD" -name "$2" -type f 2>/dev/null | head -n1; fi
}

step_build() {
  local cmake_bin targets t missing=()
  targets=(nccl-net-rerail nccl-tuner-rerail rerail-harness rerail-net-bench rerail-raw-socket-bench
    rerail-pingpong-bench rerail)
  if [[ -n $DC_PREBUILT ]]; then
    for t in net_plugin/libnccl-net-rerail.so tuner_plugin/libnccl-tuner-rerail.so test/harness/rerail-harness \
      bench/rerail-net-bench bench/rerail-raw-socket-bench bench/rerail-pingpong-bench; do
      [[ -n $(find_built "$(dirname "$t")" "$(basename "$t")") ]] || missing+=("$t")
    done
    [[ $DC_MODE == gpu && -z $(find_built bench rerail-nccl-e2e) ]] && missing+=(bench/rerail-nccl-e2e)
    if [[ ${#missing[@]} -gt 0 ]]; then detail "prebuilt $DC_BUILD lacks ${missing[*]}"; return 1; fi
    detail "nothing built: prebuilt $DC_BUILD"
    return 77
  fi
  cmake_bin=$(find_cmake)
  local t0=$SECONDS how=built
  if [[ ! -r $DC_BUILD/CMakeCache.txt ]]; then
    how="configured and built"
    local args=(-S "$DC_TOP" -B "$DC_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRERAIL_BUILD_TESTS=ON
      -DRERAIL_BUILD_BENCH=ON -DRERAIL_UNIT_TESTS=OFF -DRERAIL_FUZZ=OFF -DRERAIL_LIBNUMA=AUTO -DRERAIL_WERROR=OFF)
    # The machine's own NCCL and CUDA first, then what --deps carried for what it lacks.
    local prefix=()
    [[ -n $DC_NCCL_ROOT ]] && prefix+=("$DC_NCCL_ROOT") && args+=("-DNCCL_HOME=$DC_NCCL_ROOT")
    [[ -n $DC_CUDA_ROOT ]] && prefix+=("$DC_CUDA_ROOT") && args+=("-DCUDA_HOME=$DC_CUDA_ROOT")
    [[ -n $DC_DEPS ]] && prefix+=("$DC_DEPS")
    [[ ${#prefix[@]} -gt 0 ]] && args+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${prefix[*]}")")
    if ! command -v make >/dev/null && command -v ninja >/dev/null; then args+=(-G Ninja); fi
    local extra=()
    read -r -a extra <<<"${DC_CMAKE_ARGS:-}"
    args+=("${extra[@]}")
    echo "+ $cmake_bin ${args[*]}"
    if ! "$cmake_bin" "${args[@]}"; then
      if grep -q "SODIUM" "$DC_OUT/build.log"; then
        detail "cmake: libsodium (sodium.h, libsodium.a) not found: install libsodium-dev, or run" \
          "'bench/device_check.sh --pack-deps DIR' on a development machine, carry DIR here and pass --deps DIR"
      else
        detail "cmake configure failed: $(grep -m1 -A1 'CMake Error' "$DC_OUT/build.log" | tail -n1 | sed 's/^ *//')"
      fi
      return 1
    fi
  fi
  local help
  help=$("$cmake_bin" --build "$DC_BUILD" --target help 2>/dev/null)
  if grep -qw rerail-nccl-e2e <<<"$help"; then
    targets+=(rerail-nccl-e2e)
  fi
  echo "+ $cmake_bin --build $DC_BUILD -j $DC_JOBS --target ${targets[*]}"
  if ! "$cmake_bin" --build "$DC_BUILD" -j "$DC_JOBS" --target "${targets[@]}"; then
    detail "build failed: $(grep -m1 -E 'error:|Error [0-9]' "$DC_OUT/build.log" | cut -c1-200)"
    return 1
  fi
  local so bad="" miss
  for so in "$(find_built net_plugin libnccl-net-rerail.so)" "$(find_built tuner_plugin libnccl-tuner-rerail.so)"; do
    miss=$(ldd "$so" 2>&1 | grep 'not found' | tr -s ' \t' ' ')
    [[ -z $miss ]] || bad+=" $(basename "$so"):$miss"
  done
  [[ -z $bad ]] || { detail "built, but a plugin cannot load here:$bad"; return 1; }
  local cache=$DC_BUILD/CMakeCache.txt numa sodium drv
  case $(sed -n 's/^RERAIL_LIBNUMA:[A-Z]*=//p' "$cache") in
    OFF) numa="libnuma off (sysfs)" ;;
    *) numa=$(ldd "$(find_built net_plugin libnccl-net-rerail.so)" 2>&1)
       if [[ $numa == *libnuma* ]]; then numa="libnuma"; else numa="no libnuma (sysfs distances)"; fi ;;
  esac
  sodium=$(sed -n 's/^SODIUM_STATIC_LIB:FILEPATH=//p' "$cache")
  drv="rerail-nccl-e2e: not built"
  if [[ " ${targets[*]} " == *" rerail-nccl-e2e "* ]]; then
    drv="rerail-nccl-e2e against $(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$cache")/nccl.h"
  fi
  detail "$how in $((SECONDS - t0)) s, -j$DC_JOBS: $("$cmake_bin" --version | head -n1), $(cc --version 2>/dev/null | head -n1);" \
    "libsodium $sodium; $numa; $drv"
  if [[ $DC_MODE == gpu && " ${targets[*]} " != *" rerail-nccl-e2e "* ]]; then
    detail "plugins built, but not rerail-nccl-e2e: $(grep -m1 'rerail-nccl-e2e skipped' "$DC_OUT/build.log" | sed 's/^-- //')" \
      "(CUDA_HOME, NCCL_HOME or --deps)"
    return 1
  fi
  return 0
}

step_e2e() {
  if [[ $DC_MODE != gpu ]]; then detail "needs a GPU"; return 77; fi
  local rc out=$DC_OUT/e2e wall
  wall=$(((DC_STEP_BUDGET - 10) / 2))
  ((wall < 20)) && wall=20
  note "two ranks on one GPU, rerail then NCCL's Socket, sizes 1K..$DC_E2E_MAX, every result checked"
  E2E_OUT=$out E2E_WALL=$wall E2E_TIMEOUT=40 E2E_RERAIL_NET_NAME=rerail E2E_IFNAME=lo \
    bash "$DC_TOP/bench/run_gpu_e2e.sh" "$DC_BUILD" -- --max-bytes "$DC_E2E_MAX" --iters 10 --warmup 2
  rc=$?
  local avg
  avg=$(grep -h '^  avg busbw:' "$DC_OUT/e2e.log" | sed 's/^ *//')
  if grep -q '== comparison: busbw' "$DC_OUT/e2e.log"; then
    {
      echo "**Stock NCCL, two ranks on one GPU (bench/run_gpu_e2e.sh), every result checked:**"
      grep -h -m2 -E '^# (rerail-nccl-e2e|NCCL [0-9])' "$out/rerail.r0.out" 2>/dev/null | sed 's/^# /    /'
      echo '```'
      sed -n '/== comparison: busbw/,/avg busbw:/p' "$DC_OUT/e2e.log"
      echo '```'
    } >>"$DC_OUT/steps/e2e.results"
  fi
  if [[ $rc == 0 ]]; then
    detail "all results correct through rerail and NCCL's Socket; ${avg:-no comparison}"
  else
    detail "run_gpu_e2e.sh exited $rc: $(grep -h -E '^== (rerail|socket):' "$DC_OUT/e2e.log" | tr '\n' ' ')" \
      "first error: $(grep -h -m1 -E 'error|FAIL' "$DC_OUT/e2e.log" | sed 's/^ *//' | cut -c1-180)"
  fi
  return $rc
}

step_nccl_log() {
  # shellcheck source=bench/nccl_log_check.sh
  . "$DC_TOP/bench/nccl_log_check.sh"
  if [[ $DC_MODE != gpu ]]; then
    # The checker against canned logs (test/integration/nccl_logs/README.md): it
    # must pass the good pair and fail every bad one.
    local d=$DC_TOP/test/integration/nccl_logs f rc wrong=()
    nccl_log_check "$d"/rerail_ok.r*.log || wrong+=("rerail_ok (should pass)")
    for f in "$d"/socket_fallback.r0.log "$d"/no_tuner.r0.log "$d"/p2p_bypass.r0.log "$d"/mixed_nets.r0.log; do
      nccl_log_check "$f"
      rc=$?
      [[ $rc == 1 ]] || wrong+=("$(basename "$f") (rc $rc, should fail)")
    done
    nccl_log_check --net Socket --no-tuner "$d"/socket_fallback.r0.log || wrong+=("socket_fallback as Socket (should pass)")
    if [[ ${#wrong[@]} -gt 0 ]]; then detail "the checker misjudged canned logs: ${wrong[*]}"; return 1; fi
    detail "canned logs judged right: 1 good pair passes, 4 bad logs fail (no real NCCL log without a GPU)"
    return 0
  fi
  local logs=("$DC_OUT"/e2e/rerail.nccl.r*.log) line rc
  [[ -e ${logs[0]} ]] || { detail "no NCCL log from the e2e step ($DC_OUT/e2e/rerail.nccl.r*.log)"; return 1; }
  nccl_log_check "${logs[@]}" | tee "$DC_OUT/nccl-log.summary"
  rc=${PIPESTATUS[0]}
  line=$(tail -n1 "$DC_OUT/nccl-log.summary" | sed 's/^nccl_log_check: //')
  local sock=("$DC_OUT"/e2e/socket.nccl.r*.log)
  [[ -e ${sock[0]} ]] && { nccl_log_check --net Socket --no-tuner "${sock[@]}" || rc=1; }
  detail "$line"
  result "NCCL's log, rerail run (bench/nccl_log_check.sh): $line" \
    "NCCL's own lines: $(grep -h -m1 -E 'NET/Plugin: Loaded net plugin rerail' "${logs[@]}" | sed 's/.*NCCL INFO //' | head -n1);" \
    "$(grep -h -m1 -E 'TUNER/Plugin: Using rerail' "${logs[@]}" | sed 's/.*NCCL INFO //' | head -n1)"
  return "$rc"
}

lab_down() { "$NETLAB" --name "$LAB" down >/dev/null 2>&1; }
# Every rail of both hosts has carrier and every switch port forwards.
lab_ready() {
  local h r
  for h in 0 1; do
    for r in 0 1; do
      [[ $(ip -n "$LAB-h$h" link show "rail$r") == *LOWER_UP* ]] || return 1
      [[ $(ip -n "$LAB-sw" -d link show "h$h-r$r") == *"state forwarding"* ]] || return 1
    done
  done
}

# The rail that has carried the most so far: bytes sent over railN by both ranks
# (rerail_rail_bytes_total, tx, in the .prom files of the job), else rail 0.
busiest_rail() {
  local files=("$1"/*.prom)
  [[ -e ${files[0]} ]] || { echo 0; return; }
  awk '/^rerail_rail_bytes_total\{/ && /direction="tx"/ {
         if (match($0, /nic="rail[0-9]+"/)) { n = substr($0, RSTART + 9, RLENGTH - 10); b[n] += $NF }
       }
       END { best = 0
             for (n in b) { printf "rail%s: %d bytes sent so far\n", n, b[n] > "/dev/stderr"; if (b[n] > b[best] || !(best in b)) best = n }
             print best + 0 }' "${files[@]}"
}

step_failover() {
  local dir=$DC_OUT/failover loop=$DC_LOOP_SECONDS wl r pids=() rcs=() t0
  wl=$([[ $DC_MODE == gpu ]] && echo nccl || echo harness)
  if [[ -n $DC_LAB_WHY ]]; then detail "cannot build the lab: $DC_LAB_WHY"; return 1; fi
  mkdir -p "$dir/rdv" "$dir/telemetry"
  trap 'lab_down' EXIT
  trap 'exit 143' TERM INT
  "$NETLAB" --name "$LAB" up --hosts 2 --rails 2 --mgmt || { detail "netlab.sh up failed"; return 1; }
  local tries=0
  until lab_ready; do
    ((++tries < 50)) || { detail "the lab's rails did not come up"; return 1; }
    sleep 0.1
  done
  local plug
  plug=$(plugin_dir)
  export RERAIL_SOCKET_IFNAME=rail RERAIL_HEALTH_PATH=$dir/health RERAIL_TELEMETRY_DIR=$dir/telemetry \
    RERAIL_LOG_LEVEL=warn RERAIL_TELEMETRY_INTERVAL=500
  note "lab: 2 hosts (namespaces) x 2 veth rails + mgmt; $wl ranks, ${loop} s of checked traffic"
  for r in 1 0; do
    if [[ $wl == nccl ]]; then
      ip netns exec "$LAB-h$r" env LD_LIBRARY_PATH="$plug:$(dirname "$(find_built tuner_plugin libnccl-tuner-rerail.so)")${DC_GPU_LD:+:$DC_GPU_LD}" \
        NCCL_HOSTID="dcheck-host$r" NCCL_SOCKET_IFNAME=mgmt NCCL_NET_PLUGIN=rerail NCCL_TUNER_PLUGIN=rerail NCCL_NET=rerail \
        NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 \
        NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV,TUNING NCCL_DEBUG_FILE="$dir/nccl.r$r.log" \
        timeout -k 5 $((loop + 60)) "$(find_built bench rerail-nccl-e2e)" --rank "$r" --nranks 2 \
        --rendezvous "$dir/rdv/id" --device 0 --loop-seconds "$loop" --max-bytes 32M --timeout 30 \
        >"$dir/rank$r.out" 2>"$dir/rank$r.err" &
    else
      ip netns exec "$LAB-h$r" env LD_LIBRARY_PATH="$plug" \
        timeout -k 5 $((loop + 60)) "$(find_built test/harness rerail-harness)" \
        --role "$([[ $r == 0 ]] && echo client || echo server)" --rendezvous "$dir/rdv" --conns 2 \
        --duration "$loop" --max-size 4M --quiet --json --timeout $((loop + 45)) \
        >"$dir/rank$r.out" 2>"$dir/rank$r.err" &
    fi
    pids[r]=$!
  done
  # Traffic flows once rank 0's .prom file has a rail to its peer.
  t0=$SECONDS
  until grep -qs '^rerail_rail_state{' "$dir"/telemetry/*.prom; do
    if ! kill -0 "${pids[0]}" 2>/dev/null || ! kill -0 "${pids[1]}" 2>/dev/null || ((SECONDS - t0 > 45)); then
      break
    fi
    sleep 0.2
  done
  local ready=$((SECONDS - t0)) fail_rail=none down_at=- up_at=-
  if grep -qs '^rerail_rail_state{' "$dir"/telemetry/*.prom && kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; then
    sleep "$(awk -v l="$loop" 'BEGIN { printf "%.1f", l / 4 }')"
    fail_rail=$(busiest_rail "$dir/telemetry")
    down_at=$((SECONDS - t0))
    note "rail$fail_rail of host 0 goes down (ip link set rail$fail_rail down), ${down_at} s after the first connection"
    "$NETLAB" --name "$LAB" link 0 "$fail_rail" down
    sleep "$(awk -v l="$loop" 'BEGIN { printf "%.1f", l / 3 }')"
    up_at=$((SECONDS - t0))
    note "rail$fail_rail comes back at ${up_at} s"
    "$NETLAB" --name "$LAB" link 0 "$fail_rail" up
  else
    note "no traffic after ${ready} s (a rank ended or never connected): no fault injected"
  fi
  for r in 0 1; do
    wait "${pids[r]}"
    rcs[r]=$?
  done
  local events failovers failbacks what
  events=$(cat "$dir"/telemetry/*.jsonl* 2>/dev/null)
  failovers=$(grep -c '"kind":"failover"' <<<"$events")
  failbacks=$(grep -c '"kind":"failback"' <<<"$events")
  local ok=1 why=()
  for r in 0 1; do
    [[ ${rcs[r]} == 0 ]] || { ok=0; why+=("rank $r exited ${rcs[r]} ($(grep -m1 -iE 'error|mismatch|fail' "$dir/rank$r.err" | cut -c1-140))"); }
  done
  ((failovers > 0)) || { ok=0; why+=("rerail reported no failover (telemetry events)"); }
  if [[ $wl == nccl ]]; then
    # shellcheck source=bench/nccl_log_check.sh
    . "$DC_TOP/bench/nccl_log_check.sh"
    local logs=("$dir"/nccl.r*.log)
    if [[ -e ${logs[0]} ]]; then
      nccl_log_check "${logs[@]}" >"$dir/nccl-log.summary" || { ok=0; why+=("NCCL's log: $(tail -n1 "$dir/nccl-log.summary" | sed 's/^nccl_log_check: //')"); }
      cat "$dir/nccl-log.summary"
    else
      ok=0 why+=("no NCCL log")
    fi
    what="$(grep -h '^# loop done' "$dir/rank0.out" | sed 's/^# //')"
  else
    local sent recv errs
    sent=$(grep -ho '"send":{"ops":[0-9]*,"msgs":[0-9]*,"bytes":[0-9]*' "$dir/rank0.out" | grep -o '[0-9]*$')
    recv=$(grep -ho '"recv":{"ops":[0-9]*,"msgs":[0-9]*,"bytes":[0-9]*' "$dir/rank1.out" | grep -o '[0-9]*$')
    errs=$(grep -ho '"errors":[0-9]*' "$dir/rank0.out" "$dir/rank1.out" | awk -F: '{ s += $2 } END { print s + 0 }')
    [[ -n $recv && $recv == "$sent" && $recv -gt 0 ]] || { ok=0; why+=("bytes sent ${sent:-?} != received ${recv:-?}"); }
    ((errs == 0)) || { ok=0; why+=("$errs harness error(s)"); }
    what="harness: ${recv:-?} bytes over 2 connections, every byte checked, $errs errors"
  fi
  local summary="2 namespaces x 2 veth rails, rail$fail_rail of rank 0 down at ${down_at} s, up at ${up_at} s"
  [[ $fail_rail == none ]] && summary="2 namespaces x 2 veth rails, no fault injected"
  summary+=" (traffic from ${ready} s): ${what:-no result}; $failovers failover(s), $failbacks fail-back(s); exit ${rcs[0]}/${rcs[1]}"
  if ((ok)); then
    detail "$summary"
    [[ $wl == nccl ]] && result "**Failover under stock NCCL (bench/device_check.sh, ${loop} s all-reduce loop of 32 MiB, every result checked):** $summary"
    return 0
  fi
  detail "$(printf '%s; ' "${why[@]}")-- $summary"
  return 1
}

step_bench() {
  local rc=0 tuned="NCCL_SOCKET_NTHREADS=$DC_NCCL_NTHREADS NCCL_NSOCKS_PERTHREAD=$DC_NCCL_NSOCKS" args=() env_common=()
  [[ -n $DC_NCCL_LIB ]] && env_common+=("NCCL_LIB=$DC_NCCL_LIB")
  if [[ $DC_MODE == gpu ]]; then
    # cubic, the usual default (socket_compare.sh switches the host's for NCCL's runs and
    # restores it, as root); without root or sysctl, whatever the host has.
    args=(--quick) env_common+=(ROUNDS=1 "CCS=$([[ $(id -u) == 0 ]] && command -v sysctl >/dev/null && echo cubic || echo system)")
  else
    env_common+=(CCS=system ROUNDS=1 "SIZES=4K,256K" BYTES=4M LAT_ITERS=200 "RAW_ARGS=--streams 1 --sockbuf 0 --window 4")
  fi
  note "rerail vs NCCL's socket transport tuned ($tuned) on $(nproc) cores"
  # shellcheck disable=SC2086
  env "${env_common[@]}" $tuned OUT_DIR="$DC_OUT/bench.tuned" bash "$DC_TOP/bench/socket_compare.sh" "$DC_BUILD" "${args[@]}" \
    >"$DC_OUT/bench.tuned.md" || rc=1
  cat "$DC_OUT/bench.tuned.md"
  local ran="tuned"
  # NCCL's defaults too (0 helper threads on a NIC without a cloud vendor id), when time is left.
  if [[ $DC_MODE == gpu && $rc == 0 ]] && (($(date +%s) + 60 < DC_STEP_END)); then
    note "rerail vs NCCL's socket transport with its defaults"
    env -u NCCL_SOCKET_NTHREADS -u NCCL_NSOCKS_PERTHREAD "${env_common[@]}" OUT_DIR="$DC_OUT/bench.auto" \
      bash "$DC_TOP/bench/socket_compare.sh" "$DC_BUILD" "${args[@]}" >"$DC_OUT/bench.auto.md" || rc=1
    cat "$DC_OUT/bench.auto.md"
    ran+=" and default"
  fi
  # The largest size's row: | size | raw | NCCL | rerail | rerail/NCCL | rerail/raw |
  local row
  row=$(grep -E '^\| [0-9]+ (KiB|MiB|B) \|' "$DC_OUT/bench.tuned.md" | tail -n1 | awk -F'|' '{ gsub(/ /, ""); printf "%s: rerail %s GB/s, NCCL %s GB/s, rerail/NCCL %s", $2, $5, $4, $6 }')
  if [[ $rc == 0 ]]; then
    detail "NCCL $ran ran; tuned ($tuned): ${row:-?}"
    if [[ $DC_MODE == gpu ]]; then
      result "**TCP side by side on $(nproc) cores, NCCL's socket transport tuned ($tuned), bench/socket_compare.sh --quick:**" ""
      result "$(cat "$DC_OUT/bench.tuned.md")"
      [[ -s $DC_OUT/bench.auto.md ]] && result "" "**The same with NCCL's defaults:**" "" "$(cat "$DC_OUT/bench.auto.md")"
    fi
    return 0
  fi
  detail "socket_compare.sh failed: $(grep -h 'socket_compare.sh:' "$DC_OUT/bench.log" | grep -v ' round ' | tail -n1)"
  return 1
}

run_step_body() {
  STEP=$1
  # shellcheck disable=SC1090
  . "$2"
  case $STEP in
    build) step_build ;;
    e2e) step_e2e ;;
    nccl-log) step_nccl_log ;;
    failover) step_failover ;;
    bench) step_bench ;;
    *) echo "unknown step $STEP" >&2; return 2 ;;
  esac
}

if [[ ${1:-} == __step ]]; then
  run_step_body "$2" "$3"
  exit $?
fi

# ---- options ---------------------------------------------------------------------
MODE=gpu BUILD="" PREBUILT="" DEPS="" OUT="" BUDGET="" PACK=""
[[ ${DEVICE_CHECK_DRY:-0} == 1 ]] && MODE=dry
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-gpu) MODE=dry; shift ;;
    --build-dir) BUILD=${2:?--build-dir needs a folder}; shift 2 ;;
    --prebuilt) PREBUILT=${2:?--prebuilt needs a folder}; shift 2 ;;
    --deps) DEPS=${2:?--deps needs a folder}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --pack-deps) PACK=${2:?--pack-deps needs a folder}; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [[ -n $PACK ]]; then
  pack_deps "$PACK" "${BUILD:-$TOP/build}"
  exit 0
fi
[[ -z $BUDGET || $BUDGET =~ ^[0-9]+$ ]] || die "--budget must be whole seconds"
BUDGET=${BUDGET:-$([[ $MODE == gpu ]] && echo 440 || echo 240)}
[[ -n $PREBUILT && -n $BUILD ]] && die "--prebuilt and --build-dir exclude each other"
if [[ -n $PREBUILT ]]; then
  BUILD=$(cd "$PREBUILT" 2>/dev/null && pwd) || die "--prebuilt: no folder $PREBUILT"
fi
BUILD=${BUILD:-$TOP/build-device}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD
if [[ -n $DEPS ]]; then DEPS=$(cd "$DEPS" 2>/dev/null && pwd) || die "--deps: no folder $DEPS"; fi

# ---- preflight: fail within seconds, with one line -------------------------------
START=$SECONDS
START_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
if [[ $MODE == gpu && ${DEVICE_CHECK_ASSUME_GPU:-0} != 1 ]]; then
  gpu_probe || die "no NVIDIA GPU on this machine ($GPU_WHY): run it where one is, or run 'bench/device_check.sh --no-gpu' for the steps that need none"
elif [[ $MODE == gpu ]]; then
  GPU_DESC="assumed (DEVICE_CHECK_ASSUME_GPU=1)"
else
  GPU_DESC="not used (--no-gpu)"
fi
for t in timeout awk python3 find ldd; do
  command -v "$t" >/dev/null || die "$t is not installed (this script needs it)"
done
# The lab's needs fail the failover step alone, not the whole check.
LAB_WHY=""
[[ $(id -u) == 0 ]] || LAB_WHY="not root (network namespaces need it)"
# A packed ip (--pack-deps) stands in only where the machine has none.
if ! command -v ip >/dev/null && [[ -n $DEPS && -x $DEPS/bin/ip ]] && "$DEPS/bin/ip" -V >/dev/null 2>&1; then
  PATH=$DEPS/bin:$PATH
  say "the machine has no ip: using the packed one ($("$DEPS/bin/ip" -V 2>&1 | head -n1))"
fi
for t in ip sysctl; do command -v "$t" >/dev/null || LAB_WHY+="${LAB_WHY:+, }no $t"; done
CMAKE_BIN=""
if [[ -z $PREBUILT ]]; then
  CMAKE_BIN=$(find_cmake)
  [[ -n $CMAKE_BIN ]] || die "no cmake (not on PATH, no pip cmake package): install cmake, or build elsewhere and pass --prebuilt DIR"
  command -v cc >/dev/null || die "no C compiler (cc): install gcc, or build elsewhere and pass --prebuilt DIR"
  command -v make >/dev/null || command -v ninja >/dev/null || die "neither make nor ninja is installed: CMake cannot build"
fi
# NCCL: NCCL_HOME, else python3's nvidia-nccl-* package, else the loader's (find_libnccl.sh).
NCCL_LIB_FOUND="" NCCL_ROOT="" NCCL_FROM=""
if [[ -n ${NCCL_HOME:-} ]]; then
  for d in "$NCCL_HOME/lib" "$NCCL_HOME/lib64" "$NCCL_HOME"; do
    [[ -e $d/libnccl.so.2 ]] && { NCCL_LIB_FOUND=$d/libnccl.so.2; NCCL_FROM="NCCL_HOME"; break; }
  done
  [[ -n $NCCL_LIB_FOUND ]] || die "NCCL_HOME=$NCCL_HOME has no lib/libnccl.so.2"
  NCCL_ROOT=$NCCL_HOME
else
  NCCL_LIB_FOUND=$(pip_find libnccl.so.2)
  if [[ -n $NCCL_LIB_FOUND ]]; then
    NCCL_FROM="python3 package"
    NCCL_ROOT=$(dirname "$(dirname "$NCCL_LIB_FOUND")")
  else
    # shellcheck source=bench/find_libnccl.sh
    . "$TOP/bench/find_libnccl.sh"
    find_libnccl "$BUILD"
    NCCL_LIB_FOUND=$NCCL_LIB NCCL_FROM="the dynamic loader / CMake"
  fi
fi
if [[ -z $NCCL_LIB_FOUND ]]; then
  [[ $MODE == gpu ]] && die "libnccl.so.2 not found (no NCCL_HOME, no python3 nvidia-nccl-* package, none the loader knows)"
  NCCL_DESC="not found (the bench step will fail)"
else
  # shellcheck source=bench/find_libnccl.sh
  . "$TOP/bench/find_libnccl.sh"
  NCCL_DESC="NCCL $(libnccl_version "$NCCL_LIB_FOUND") ($NCCL_FROM: $NCCL_LIB_FOUND)"
fi
# The CUDA runtime: a toolkit (nvcc, CUDA_HOME) needs nothing from us; else python3's nvidia-cuda-runtime.
CUDA_ROOT="" CUDA_DESC="" GPU_LD=""
if [[ -n ${CUDA_HOME:-} ]]; then
  CUDA_ROOT=$CUDA_HOME CUDA_DESC="CUDA_HOME=$CUDA_HOME"
elif command -v nvcc >/dev/null; then
  CUDA_DESC="toolkit $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
else
  h=$(pip_find cuda_runtime.h)
  l=$(pip_find 'libcudart.so.[0-9]*')
  if [[ -n $h && -n $l ]]; then
    CUDA_ROOT=$(dirname "$(dirname "$h")") CUDA_DESC="python3 package: $CUDA_ROOT"
    GPU_LD=$(dirname "$l")
  elif [[ -n $l ]]; then
    CUDA_DESC="python3 package runtime $l, no headers"
    GPU_LD=$(dirname "$l")
  else
    CUDA_DESC="none found"
  fi
fi
[[ -n $NCCL_LIB_FOUND ]] && GPU_LD=$(dirname "$NCCL_LIB_FOUND")${GPU_LD:+:$GPU_LD}

mkdir -p "$BUILD" || die "cannot create $BUILD"
BUILD=$(cd "$BUILD" && pwd)
if [[ -z $OUT ]]; then OUT=$(mktemp -d /tmp/rerail-device-check.XXXXXX) || die "cannot create a log folder"; fi
mkdir -p "$OUT/steps" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/steps/* "$OUT/summary.tsv"
JOBS=$(nproc)
DEADLINE=$((START + BUDGET))
{
  for v in "DC_MODE=$MODE" "DC_TOP=$TOP" "DC_BUILD=$BUILD" "DC_OUT=$OUT" "DC_DEPS=$DEPS" "DC_PREBUILT=$PREBUILT" \
    "DC_NCCL_LIB=$NCCL_LIB_FOUND" "DC_NCCL_ROOT=$NCCL_ROOT" "DC_CUDA_ROOT=$CUDA_ROOT" "DC_GPU_LD=$GPU_LD" \
    "DC_JOBS=$JOBS" "DC_NCCL_NTHREADS=${DC_NCCL_NTHREADS:-4}" "DC_NCCL_NSOCKS=${DC_NCCL_NSOCKS:-4}" \
    "DC_LOOP_SECONDS=${DC_LOOP_SECONDS:-$([[ $MODE == gpu ]] && echo 20 || echo 8)}" "DC_E2E_MAX=${DC_E2E_MAX:-32M}" \
    "DC_CMAKE_ARGS=${DC_CMAKE_ARGS:-}" "DC_LAB_WHY=$LAB_WHY"; do
    printf 'export %s=%q\n' "${v%%=*}" "${v#*=}"
  done
} >"$OUT/env.sh"
# Per-step limits (seconds). GPU: 140+100+10+80+100 = 430 of the 440 (preflight
# takes the rest); each is also cut to what is left of the budget when the step
# starts, and a step that ignores TERM is killed 5 s later: at most ~465 s.
declare -A LIMIT
if [[ $MODE == gpu ]]; then
  LIMIT=([build]=140 [e2e]=100 [nccl-log]=10 [failover]=80 [bench]=100)
else
  LIMIT=([build]=150 [e2e]=5 [nccl-log]=10 [failover]=50 [bench]=40)
fi
declare -A RES SECS DETAIL
PRE_DETAIL="GPU: $GPU_DESC; $NCCL_DESC; CUDA runtime: $CUDA_DESC; $(nproc) cores, Linux $(uname -r)${LAB_WHY:+; lab: $LAB_WHY}"
say "rerail device check ($([[ $MODE == gpu ]] && echo "GPU" || echo "no GPU: --no-gpu")), budget ${BUDGET} s, logs in $OUT"
say "  PASS preflight: $PRE_DETAIL"
RES[preflight]=PASS SECS[preflight]=$((SECONDS - START)) DETAIL[preflight]=$PRE_DETAIL

cleanup_main() { "$NETLAB" --name "$LAB" down >/dev/null 2>&1; }
trap cleanup_main EXIT
trap 'echo "device_check: interrupted" >&2; exit 130' INT TERM

n=0
for s in "${STEPS[@]}"; do
  n=$((n + 1))
  left=$((DEADLINE - SECONDS))
  lim=${LIMIT[$s]}
  ((lim > left)) && lim=$left
  if [[ ${RES[build]:-} == FAIL && $s != nccl-log ]]; then
    RES[$s]=FAIL SECS[$s]=0 DETAIL[$s]="not run: the build failed"
    say "  FAIL $s: ${DETAIL[$s]}"
    continue
  fi
  if ((lim < 5)); then
    RES[$s]=FAIL SECS[$s]=0 DETAIL[$s]="not started: the ${BUDGET} s budget is spent"
    say "  FAIL $s: ${DETAIL[$s]}"
    continue
  fi
  say "[$n/${#STEPS[@]}] $s (limit ${lim} s, log $OUT/$s.log)"
  t0=$SECONDS
  DC_STEP_BUDGET=$lim DC_STEP_END=$(($(date +%s) + lim)) \
    timeout -k 5 "$lim" bash "$SELF" __step "$s" "$OUT/env.sh" 3>&1 >"$OUT/$s.log" 2>&1
  rc=$?
  SECS[$s]=$((SECONDS - t0))
  DETAIL[$s]=$(cat "$OUT/steps/$s.detail" 2>/dev/null)
  case $rc in
    0) RES[$s]=PASS ;;
    77) RES[$s]=SKIP ;;
    124 | 137) RES[$s]=FAIL DETAIL[$s]="timed out after ${lim} s${DETAIL[$s]:+ (${DETAIL[$s]})}" ;;
    *) RES[$s]=FAIL DETAIL[$s]=${DETAIL[$s]:-"exited $rc (see $OUT/$s.log)"} ;;
  esac
  say "  ${RES[$s]} $s (${SECS[$s]} s): ${DETAIL[$s]}"
done
cleanup_main

# ---- summary ------------------------------------------------------------------
npass=0 nfail=0 nskip=0
for s in preflight "${STEPS[@]}"; do
  case ${RES[$s]} in PASS) npass=$((npass + 1)) ;; SKIP) nskip=$((nskip + 1)) ;; *) nfail=$((nfail + 1)) ;; esac
  printf '%s\t%s\t%s\t%s\n' "$s" "${RES[$s]}" "${SECS[$s]}" "${DETAIL[$s]}" >>"$OUT/summary.tsv"
done
verdict=$([[ $nfail == 0 ]] && echo PASS || echo FAIL)
{
  echo
  echo "================ rerail device check: $verdict ($([[ $MODE == gpu ]] && echo "GPU" || echo "--no-gpu")) ================"
  for s in preflight "${STEPS[@]}"; do
    printf '  %-9s %-4s %4s s  %s\n' "$s" "${RES[$s]}" "${SECS[$s]}" "${DETAIL[$s]}"
  done
  echo "  total: $npass passed, $nfail failed, $nskip skipped in $((SECONDS - START)) s (budget $BUDGET s)"
  echo "  logs: $OUT (<step>.log per step, summary.txt, summary.tsv, results.md, e2e/, failover/, bench.*)"
} | tee "$OUT/summary.txt"
if [[ $MODE == gpu ]]; then
  {
    echo "### GPU device check, $START_DATE: \`bench/device_check.sh\` ($verdict)"
    echo
    echo "On \`$(hostname)\`: $GPU_DESC; $(nproc) cores ($(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)), Linux $(uname -r); $NCCL_DESC; CUDA runtime: $CUDA_DESC; rerail at $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo
    for s in "${STEPS[@]}"; do
      if [[ -s $OUT/steps/$s.results ]]; then cat "$OUT/steps/$s.results"; echo; fi
    done
    echo "Steps: $(for s in preflight "${STEPS[@]}"; do printf '%s %s (%s s); ' "$s" "${RES[$s]}" "${SECS[$s]}"; done | sed 's/; $//')."
  } >"$OUT/results.md"
  echo "---------------- for bench/RESULTS.md (also in $OUT/results.md) ----------------"
  cat "$OUT/results.md"
  echo "-------------------------------------------------------"
fi
[[ $nfail == 0 ]]
