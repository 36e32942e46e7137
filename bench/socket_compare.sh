#!/usr/bin/env bash
# rerail's TCP rail against NCCL's own socket transport (NCCL_NET=Socket) and
# the kernel TCP baseline, in ONE run, on loopback, two processes (issue 13).
# NCCL's transport is taken out of libnccl.so.2 and driven through the same
# proxy-faithful driver as rerail (rerail-net-bench --plugin nccl-socket:LIB:
# 1 connection, 8 requests in flight, receives posted ahead, every message
# checked). Per congestion control, rounds alternate the sides (raw, NCCL,
# rerail[, rerail B]; raw, NCCL, ...) so the machine's drift hits all alike;
# each figure is the best of the rounds. Prints one markdown table per
# congestion control (for bench/RESULTS.md) and the command. The raw side
# also measures the round trip over one connection per direction
# (rerail-pingpong-bench): the kernel's floor for the shape NCCL's comms have.
#
# usage: bench/socket_compare.sh BUILD_DIR [--quick]
#   --quick      sizes 64K,1M,16M, 64 MiB per figure, 2000 round trips, 1 round
#   --report-only  no runs: print the tables again from OUT_DIR (its CSV files)
# environment:
#   ROUNDS=N       alternating rounds per congestion control (default 2)
#   SIZES=LIST     message sizes (default 64K,256K,1M,4M,16M,64M)
#   CCS="bbr cubic"  congestion controls, each a table (default "bbr cubic");
#                  "system" runs with whatever the host has and changes nothing
#   RERAIL_B=DIR   a second rerail build: its plugin (DIR/net_plugin/
#                  libnccl-net-rerail.so) becomes another column, driven by the
#                  same rerail-net-bench (before/after of a data-path change)
#   NCCL_LIB=PATH  libnccl.so.2 (default: the dynamic loader's search, else the
#                  one CMake found for BUILD_DIR)
#   BYTES=S        bytes per bandwidth figure (default 256M)
#   LAT_ITERS=N    8-byte round trips measured per run (default 10000)
#   RAW_ARGS, NET_ARGS  extra arguments of the raw and the plugin benchmark
#   OUT_DIR        where the CSV files go (default: a fresh temp dir)
#
# How each side's congestion control is set: raw with --cc (setsockopt
# TCP_CONGESTION per socket); rerail with RERAIL_TCP_CONGESTION (the same,
# inside the plugin); NCCL's transport has no such knob, so for its runs only
# the host's default net.ipv4.tcp_congestion_control is switched (root), and
# restored right after each run and on any exit (trap).
set -euo pipefail

# shellcheck source=bench/bench_cli.sh
. "$(dirname "$0")/bench_cli.sh"
bench_cli_parse socket_compare.sh "$@"
CMDLINE="bench/socket_compare.sh BUILD_DIR"
if [[ $QUICK == 1 ]]; then CMDLINE+=" --quick"; fi

RAW="$BUILD/bench/rerail-raw-socket-bench"
PINGPONG="$BUILD/bench/rerail-pingpong-bench"
NET="$BUILD/bench/rerail-net-bench"
PLUGIN_A="$BUILD/net_plugin/libnccl-net-rerail.so"
for f in "$RAW" "$PINGPONG" "$NET" "$PLUGIN_A"; do
  [[ -e "$f" ]] || { echo "socket_compare.sh: $f not built (rerail-net-bench needs RERAIL_BUILD_TESTS=ON)" >&2; exit 1; }
done
PLUGIN_B=""
if [[ -n "${RERAIL_B:-}" ]]; then
  PLUGIN_B="$(cd "$RERAIL_B" && pwd)/net_plugin/libnccl-net-rerail.so"
  [[ -e "$PLUGIN_B" ]] || { echo "socket_compare.sh: RERAIL_B: $PLUGIN_B not built" >&2; exit 1; }
fi

# libnccl.so.2: NCCL_LIB, else what the dynamic loader would find, else the
# file CMake found. It must exist: this benchmark is about NCCL's transport.
# shellcheck source=bench/find_libnccl.sh
. "$(dirname "$0")/find_libnccl.sh"
WANT_LIB=${NCCL_LIB:-}
find_libnccl "$BUILD"
if [[ -z "$NCCL_LIB" ]]; then
  echo "socket_compare.sh: libnccl.so.2 not found${WANT_LIB:+ ($WANT_LIB unreadable)}: NCCL's socket transport" \
       "is half of this benchmark. Install NCCL (e.g. the CUDA toolkit's or pip nvidia-nccl-cu13) and set" \
       "NCCL_LIB=/path/to/libnccl.so.2" >&2
  exit 1
fi
NCCL_VERSION=$(libnccl_version "$NCCL_LIB")

ROUNDS=${ROUNDS:-$([[ $QUICK == 1 ]] && echo 1 || echo 2)}
SIZES=${SIZES:-$([[ $QUICK == 1 ]] && echo 64K,1M,16M || echo 64K,256K,1M,4M,16M,64M)}
BYTES=${BYTES:-$([[ $QUICK == 1 ]] && echo 64M || echo 256M)}
LAT_ITERS=${LAT_ITERS:-$([[ $QUICK == 1 ]] && echo 2000 || echo 10000)}
LAT_WARMUP=$((LAT_ITERS / 10))
CCS=${CCS:-bbr cubic}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/rerail-socket-compare.XXXXXX)}
mkdir -p "$OUT_DIR"

# Both transports on loopback; NCCL's reads these, rerail its own.
export NCCL_SOCKET_IFNAME=lo RERAIL_SOCKET_IFNAME=lo
NCCL_THREADS_ENV="NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-unset} NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-unset}"

CC_SYSCTL=net.ipv4.tcp_congestion_control
ORIG_CC=$(sysctl -n $CC_SYSCTL 2>/dev/null || echo unknown)
CC_SWITCHED=0
restore_cc() {
  if [[ $CC_SWITCHED == 1 ]]; then
    sysctl -q -w "$CC_SYSCTL=$ORIG_CC" >/dev/null || echo "socket_compare.sh: could not restore $CC_SYSCTL=$ORIG_CC" >&2
    CC_SWITCHED=0
  fi
}
BG_PID=""   # NCCL's run, in the background while its threads are counted
stop_bg() { if [[ -n $BG_PID ]]; then kill "$BG_PID" 2>/dev/null || true; BG_PID=""; fi; }
trap 'stop_bg; restore_cc' EXIT
trap 'stop_bg; restore_cc; exit 130' INT TERM
set_system_cc() {   # for NCCL's runs only
  local cc=$1
  [[ $cc == system || $cc == "$ORIG_CC" ]] && return 0
  sysctl -q -w "$CC_SYSCTL=$cc" >/dev/null ||
    { echo "socket_compare.sh: cannot set $CC_SYSCTL=$cc (needs root; NCCL's transport has no per-socket knob)" >&2; exit 1; }
  CC_SWITCHED=1
}

# Threads of a process and its children (NCCL's transport may start helpers),
# into TREE_THREADS. Bash builtins only (the loop around it starts one `sleep`
# per look), so looking costs NCCL's timed run next to nothing.
tree_threads() {
  local p kids="" tasks more
  TREE_THREADS=0
  shopt -s nullglob
  for tasks in /proc/"$1"/task/*/children; do read -r -a more <"$tasks" || true; kids+=" ${more[*]}"; done
  for p in "$1" $kids; do
    tasks=(/proc/"$p"/task/*)
    TREE_THREADS=$((TREE_THREADS + ${#tasks[@]}))
  done
  shopt -u nullglob
}

NET_COMMON=(--fork --csv --sizes "$SIZES" --bytes "$BYTES" --lat-iters "$LAT_ITERS" --lat-warmup "$LAT_WARMUP" --no-multi)
run_side() {   # side cc round
  local side=$1 cc=$2 r=$3 out="$OUT_DIR/$1.$2.$3.csv" ccarg=()
  case $side in
    raw)
      [[ $cc != system ]] && ccarg=(--cc "$cc")
      # shellcheck disable=SC2086
      "$RAW" --fork --csv --sizes "$SIZES" --bytes "$BYTES" --streams 1,2,4 --lat-iters "$LAT_ITERS" \
        --lat-warmup "$LAT_WARMUP" "${ccarg[@]}" ${RAW_ARGS:-} >"$out"
      # the round trip's floor in NCCL's shape: one connection per direction (RESULTS 8.6)
      "$PINGPONG" --conns 2 --recv spin --iters "$LAT_ITERS" --warmup "$LAT_WARMUP" --csv >"$OUT_DIR/raw2.$cc.$r.csv" ;;
    nccl)
      set_system_cc "$cc"
      # shellcheck disable=SC2086
      "$NET" "${NET_COMMON[@]}" --plugin "nccl-socket:$NCCL_LIB" ${NET_ARGS:-} >"$out" &
      local pid=$! peak=0 t
      BG_PID=$pid
      # the most threads seen (looked at every 0.5 s): NCCL's helper threads live as long as its connections
      while kill -0 $pid 2>/dev/null; do
        tree_threads $pid
        t=$TREE_THREADS
        ((t > peak)) && peak=$t
        sleep 0.5
      done
      BG_PID=""
      wait $pid || { restore_cc; echo "socket_compare.sh: NCCL socket run failed (cc $cc, round $r)" >&2; exit 1; }
      restore_cc
      echo "$peak" >"$OUT_DIR/nccl.$cc.$r.threads" ;;
    rerail|rerailB)
      local p=$PLUGIN_A
      [[ $side == rerailB ]] && p=$PLUGIN_B
      # shellcheck disable=SC2086
      if [[ $cc == system ]]; then
        env -u RERAIL_TCP_CONGESTION "$NET" "${NET_COMMON[@]}" --plugin "$p" ${NET_ARGS:-} >"$out"
      else
        RERAIL_TCP_CONGESTION=$cc "$NET" "${NET_COMMON[@]}" --plugin "$p" ${NET_ARGS:-} >"$out"
      fi ;;
  esac
}

SIDES=(raw nccl rerail)
[[ -n "$PLUGIN_B" ]] && SIDES+=(rerailB)
if [[ $REPORT_ONLY == 1 ]]; then
  [[ -r "$OUT_DIR/meta" ]] || { echo "socket_compare.sh: --report-only: no $OUT_DIR/meta (set OUT_DIR)" >&2; exit 2; }
  # shellcheck disable=SC1091
  . "$OUT_DIR/meta"
  read -r -a SIDES <<<"$SIDES_RUN"
else
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u +%Y-%m-%dT%H:%MZ)
for cc in $CCS; do
  for ((r = 0; r < ROUNDS; r++)); do
    order=("${SIDES[@]}")
    # with a second rerail build, the two swap places every other round (no position bias)
    if [[ -n "$PLUGIN_B" ]] && ((r % 2)); then order=(raw nccl rerailB rerail); fi
    for side in "${order[@]}"; do
      echo "socket_compare.sh: cc $cc round $((r + 1))/$ROUNDS: $side ..." >&2
      run_side "$side" "$cc" "$r" || { echo "socket_compare.sh: $side failed (cc $cc, round $r)" >&2; exit 1; }
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
{
  printf 'START=%q\nLOAD_BEFORE=%q\nLOAD_AFTER=%q\nROUNDS=%q\nCCS=%q\nSIZES=%q\nBYTES=%q\n' \
    "$START" "$LOAD_BEFORE" "$LOAD_AFTER" "$ROUNDS" "$CCS" "$SIZES" "$BYTES"
  printf 'LAT_ITERS=%q\nSIDES_RUN=%q\nORIG_CC=%q\nNCCL_THREADS_ENV=%q\nRAW_ARGS=%q\nNET_ARGS=%q\n' \
    "$LAT_ITERS" "${SIDES[*]}" "$ORIG_CC" "$NCCL_THREADS_ENV" "${RAW_ARGS:-}" "${NET_ARGS:-}"
} >"$OUT_DIR/meta"
echo "socket_compare.sh: CSV in $OUT_DIR" >&2
fi

CPU=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || echo unknown)
python3 - "$OUT_DIR" "$ROUNDS" "$CCS" "${SIDES[*]}" <<PY
import csv, glob, os, statistics, sys
out, rounds, ccs, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def human(n):
    for u, s in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= u and n % u == 0: return f"{n // u} {s}"
    return f"{n} B"
def load(side, cc):
    bw, p50, p99 = {}, [], []
    for r in range(rounds):
        path = os.path.join(out, f"{side}.{cc}.{r}.csv")
        for row in csv.reader(open(path)):
            if not row: continue
            if side == "raw":
                if row[0] == "bw_best": bw.setdefault(int(row[1]), []).append(float(row[5]))
                if row[0] == "lat_best": p50.append(float(row[6])); p99.append(float(row[7]))
            else:
                if row[0] == "bw": bw.setdefault(int(row[1]), []).append(float(row[3]))
                if row[0] == "lat": p50.append(float(row[4])); p99.append(float(row[5]))
    for s, v in bw.items():
        if len(v) != rounds: sys.exit(f"socket_compare.sh: {side} {cc}: {human(s)} measured in {len(v)} of {rounds} rounds")
    if len(p50) != rounds: sys.exit(f"socket_compare.sh: {side} {cc}: round trip missing")
    # best of the rounds: the highest bandwidth, the lowest round trip (p50 and p99 each)
    spread = sorted(max(v) / min(v) for v in bw.values() if min(v) > 0)
    return {s: max(v) for s, v in bw.items()}, min(p50), min(p99), spread[len(spread) // 2] if spread else 0, bw, p50
name = {"raw": "raw TCP best of 1/2/4 streams", "nccl": "NCCL socket", "rerail": "rerail", "rerailB": "rerail B"}
print(f"Measured $START on \`$(hostname)\` ($CPU, $(nproc) cores, Linux $(uname -r)); load average "
      f"$LOAD_BEFORE before, $LOAD_AFTER after. NCCL ${NCCL_VERSION:-?} (\`$NCCL_LIB\`), "
      f"its transport's threads: $NCCL_THREADS_ENV. GB/s = 1e9 B/s; best of {rounds} alternating round(s).\n")
for cc in ccs:
    data = {side: load(side, cc) for side in sides}
    threads = sorted({open(f).read().strip() for f in glob.glob(os.path.join(out, f"nccl.{cc}.*.threads"))})
    label = "the host's default ($ORIG_CC)" if cc == "system" else cc
    print(f"### Congestion control: {label}\n")
    hdr = ["size", name["raw"], "NCCL socket", "rerail", "rerail / NCCL", "rerail / raw"]
    if "rerailB" in sides: hdr += ["rerail B", "B / NCCL", "B / raw", "B / rerail", "B / rerail, paired median"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---:|" * len(hdr))
    raw, nc, ra = data["raw"][0], data["nccl"][0], data["rerail"][0]
    for s in sorted(ra):
        cells = [human(s), f"{raw.get(s, 0):.2f}", f"{nc[s]:.2f}", f"{ra[s]:.2f}", f"{ra[s] / nc[s]:.2f}",
                 f"{ra[s] / raw[s]:.2f}" if raw.get(s) else "—"]
        if "rerailB" in sides:
            rb = data["rerailB"][0]
            # per round B over A (the two ran next to each other), median over rounds
            pairs = sorted(y / x for x, y in zip(data["rerail"][4][s], data["rerailB"][4][s]) if x > 0)
            cells += [f"{rb[s]:.2f}", f"{rb[s] / nc[s]:.2f}", f"{rb[s] / raw[s]:.2f}" if raw.get(s) else "—",
                      f"{rb[s] / ra[s]:.2f}", f"{statistics.median(pairs):.2f}" if pairs else "—"]
        print("| " + " | ".join(cells) + " |")
    for k, what in ((1, "p50"), (2, "p99")):
        r, n, a = data["raw"][k], data["nccl"][k], data["rerail"][k]
        cells = [f"8-byte round trip {what} (µs)", f"{r:.2f} (busy poll)", f"{n:.2f}", f"{a:.2f}",
                 f"{a / n:.2f}× NCCL's", f"{a / r:.2f}× raw"]
        if "rerailB" in sides:
            b = data["rerailB"][k]
            cells += [f"{b:.2f}", f"{b / n:.2f}× NCCL's", f"{b / r:.2f}× raw", f"{b / a:.2f}× rerail's"]
            if k == 1:
                pairs = [y / x for x, y in zip(data["rerail"][5], data["rerailB"][5]) if x > 0]
                cells += [f"{statistics.median(pairs):.2f}× rerail's" if pairs else "—"]
            else:
                cells += [""]
        print("| " + " | ".join(cells) + " |")
    # the raw round trip over one connection per direction (NCCL's comms' shape), where measured
    raw2 = []
    for r in range(rounds):
        f = os.path.join(out, f"raw2.{cc}.{r}.csv")
        if os.path.exists(f): raw2 += [float(row[2]) for row in csv.reader(open(f)) if row]
    if len(raw2) == rounds:
        r2, a = min(raw2), data["rerail"][1]
        cells = ["8-byte round trip p50 (µs), raw over one connection per direction", f"{r2:.2f} (busy poll)",
                 "", "", "", f"{a / r2:.2f}× raw"]
        if "rerailB" in sides: cells += ["", "", f"{data['rerailB'][1] / r2:.2f}× raw", "", ""]
        print("| " + " | ".join(cells) + " |")
    if rounds > 1:
        print("\nSpread between rounds (the highest GB/s over the lowest of a size, median over sizes): " +
              ", ".join(f"{name[x]} {data[x][3]:.2f}" for x in sides) + ".")
    print(f"\nNCCL's two benchmark processes held at most {' or '.join(threads) or '?'} thread(s) in all "
          f"during its runs (looked at every 0.5 s; 2 = each rank's main thread, no helpers).\n")
print("Command: \`" + ("RERAIL_B=BUILD_DIR_B " if "rerailB" in sides else "") +
      "CCS='$CCS' ROUNDS=$ROUNDS SIZES=$SIZES BYTES=$BYTES LAT_ITERS=$LAT_ITERS " +
      ("RAW_ARGS='${RAW_ARGS:-}' " if "${RAW_ARGS:-}" else "") + ("NET_ARGS='${NET_ARGS:-}' " if "${NET_ARGS:-}" else "") +
      "$CMDLINE\`")
PY
