#!/bin/bash
# GPU memory is the NIC's alone (issue 23), inside the Soft-RoCE lab (run by test_verbs_rail.sh
# through rxelab.sh). The lab has no GPU: RERAIL_TEST_HOST_AS_GPU=1 makes the verbs devices take
# host memory registered as NCCL_PTR_CUDA and treat it as GPU memory, and the harness's
# --protect makes that buffer PROT_NONE from isend/irecv until test() (and the flush) say done,
# so any CPU read or write of it by the plugin (a bounce copy, an inline send, an eager copy, a
# TCP rail's send() or recv()) kills the process with SIGSEGV. Sizes 0 B .. 4 MiB, every byte
# checked. Cases (host A = client, sends; host B = server, receives):
#  gpu-gpu-verbs  both NICs verbs, GPU buffers at both ends;
#  host-gpu-mixed each host's rail 0 is TCP (its RDMA device left out of RERAIL_IB_HCA, its
#                 interface named in RERAIL_SOCKET_IFNAME) and rail 1 verbs; RDMA ports are
#                 devices first, so the TCP interface is device 1, and the connection is on
#                 device 1: the TCP rail is the control rail, so small host
#                 messages leave eagerly on it and meet a GPU receive buffer: the receiver must
#                 sink them, the sender send them again over the verbs rail;
#  gpu-gpu-mixed  the same pool, GPU buffers at both ends: only the verbs rail may carry them.
#  nccl-ib        the same sizes and checks through NCCL's own IB transport (libnccl.so.2's
#                 ncclNetIb, bound by the harness as --plugin nccl-ib) between rxe0 and rxe2:
#                 its regMr takes the NCCL_PTR_CUDA type and registers with ibv_reg_mr all the
#                 same (the type only matters for DMA-BUF, which needs an fd), it never inlines
#                 payload, and its iflush is a no-op without nvidia-peermem or DMA-BUF (rxe has
#                 neither, so it reports ptrSupport 0x1: NCCL itself would stage GPU data
#                 through host memory here; the harness hands it CUDA-typed buffers anyway).
#  nccl-socket    the control: NCCL's socket transport send()s and recv()s from the buffer, so
#                 the same protected buffers must fail it (EFAULT), or --protect protects nothing.
# Also: in the mixed pool ptrSupport is per device (TCP 0x1, verbs 0x3).
# usage: verbs_gpu_mem.sh HARNESS PLUGIN_DIR
set -uo pipefail
HARNESS=$1 PLUGIN_DIR=$2
SIZES=0,1,7,4095,4096,4097,8191,65535,65536,131073,1M,4M
work=$(mktemp -d /tmp/verbs-gpumem.XXXXXX)
fails=0
ok()  { echo "verbs_gpu_mem: ok   - $*"; }
bad() { echo "verbs_gpu_mem: FAIL - $*"; fails=$((fails + 1)); }

export LD_LIBRARY_PATH="$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RERAIL_IB_GID_INDEX=1 RERAIL_TEST_HOST_AS_GPU=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET

# pair NAME SENDER_MEM RECEIVER_MEM [HARNESS OPTIONS...]: server (host B) and client (host A)
# with the environments in env_b and env_a; sets crc and src to their exit statuses and took to
# the seconds the pair ran (what each case adds to CI).
pair() {
  local name=$1 smem=$2 rmem=$3 sprot=() rprot=() t0=$SECONDS
  shift 3
  [ "$smem" = cuda ] && sprot=(--protect)
  [ "$rmem" = cuda ] && rprot=(--protect)
  mkdir -p "$work/$name/rdv"
  local common=(--rendezvous "$work/$name/rdv" --conns 1 --inflight 1 --sizes "$SIZES" --iters 24 "$@")
  env "${env_b[@]}" "$HARNESS" --role server --mem "$rmem" "${rprot[@]}" "${common[@]}" >"$work/$name/server.log" 2>&1 &
  local server=$!
  env "${env_a[@]}" "$HARNESS" --role client --mem "$smem" "${sprot[@]}" "${common[@]}" >"$work/$name/client.log" 2>&1
  crc=$?
  wait "$server"; src=$?
  took=$((SECONDS - t0))
}

# report NAME SENDER_MEM RECEIVER_MEM: the verdict of a pair that must pass.
report() {
  local name=$1 smem=$2 rmem=$3
  if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
    ok "$name: sender $smem, receiver $rmem, sizes $SIZES: every byte arrived, nothing faulted (${took} s)"
  else
    bad "$name: client exit $crc, server exit $src (139 = SIGSEGV: the plugin touched protected memory)"
    for side in client server; do
      echo "---- $name $side.log (devices, warnings, tail)"
      grep -iE 'verbs|WARN' "$work/$name/$side.log" | head -8
      tail -n 8 "$work/$name/$side.log"
    done
  fi
}

# run NAME TRANSPORT HCA_A HCA_B SENDER_MEM RECEIVER_MEM DEV: rerail between hosts A and B.
run() {
  local name=$1 transport=$2 hca_a=$3 hca_b=$4 smem=$5 rmem=$6 dev=$7
  env_b=(RERAIL_TRANSPORT="$transport" "RERAIL_SOCKET_IFNAME==vethB0,vethB1" RERAIL_IB_HCA="$hca_b"
         RERAIL_HEALTH_PATH=/dev/shm/rr-health-B)
  env_a=(RERAIL_TRANSPORT="$transport" "RERAIL_SOCKET_IFNAME==vethA0,vethA1" RERAIL_IB_HCA="$hca_a"
         RERAIL_HEALTH_PATH=/dev/shm/rr-health-A)
  pair "$name" "$smem" "$rmem" --dev "$dev" --timeout 120
  report "$name" "$smem" "$rmem"
}

run gpu-gpu-verbs verbs =rxe0,rxe1 =rxe2,rxe3 cuda cuda 0
run host-gpu-mixed mixed =rxe1 =rxe3 host cuda 1
run gpu-gpu-mixed mixed =rxe1 =rxe3 cuda cuda 1

# NCCL's own transports between rxe0 (A) and rxe2 (B): NCCL_IB_HCA picks the port, GID index 1
# is the lab's RoCE v2 IPv4 GID, and the out-of-band connection runs over lo, the lab hosts'
# shared management network (as for rerail in verbs_harness.sh).
env_b=(NCCL_IB_HCA==rxe2:1 NCCL_IB_GID_INDEX=1 NCCL_SOCKET_IFNAME=lo)
env_a=(NCCL_IB_HCA==rxe0:1 NCCL_IB_GID_INDEX=1 NCCL_SOCKET_IFNAME=lo)
pair nccl-ib cuda cuda --plugin nccl-ib --timeout 60
report nccl-ib cuda cuda
# ... and it was NCCL's IB transport on the lab's RDMA ports, not some fallback.
if grep -q '^device 0: name rxe0 ' "$work/nccl-ib/client.log" && grep -q '^device 0: name rxe2 ' "$work/nccl-ib/server.log" &&
   grep -q 'plugin IB (' "$work/nccl-ib/client.log"; then ok "nccl-ib: NCCL's IB transport on rxe0 -> rxe2"
else bad "nccl-ib: not NCCL's IB transport on rxe0 -> rxe2: $(grep -h '^device 0:' "$work/nccl-ib/"*.log | cut -c1-40 | tr '\n' ' ')"; fi
# The control: a transport whose CPU touches the buffer must fail on these same buffers, with
# an error (exit 1) rather than a crash or a hang, while it passes on unprotected host buffers
# (so the failure is the protection's). NCCL's socket transport refuses iflush.
pair nccl-socket-host host host --plugin nccl-socket --no-flush --timeout 30
report nccl-socket-host host host
pair nccl-socket cuda cuda --plugin nccl-socket --no-flush --timeout 30
if [ "$crc" -ne 0 ] && [ "$src" -ne 0 ] && { [ "$crc" -eq 1 ] || [ "$src" -eq 1 ]; } &&
   [ "$crc" -ne 139 ] && [ "$src" -ne 139 ]; then
  ok "control: NCCL's socket transport, whose CPU copies the payload, fails on the protected buffers (client exit $crc, server exit $src, ${took} s)"
else bad "control: NCCL's socket transport on protected buffers: client exit $crc, server exit $src (want an error, exit 1, on both ends)"; fi

# Per-device ptrSupport in the mixed pool: the TCP device host only, the verbs one with CUDA.
log="$work/gpu-gpu-mixed/client.log"
if grep -q 'device 0: name rxe1:1 .*ptrSupport 0x3 ' "$log" && grep -q 'device 1: name vethA0 .*ptrSupport 0x1 ' "$log"; then
  ok "ptrSupport per device: verbs rxe1:1 0x3, TCP vethA0 0x1"
else bad "ptrSupport: $(grep -o 'device [0-9]: name [a-zA-Z0-9:]* .*ptrSupport 0x[0-9a-f]*' "$log" | sed 's/ pci.*ptrSupport/ ptrSupport/' | tr '\n' ' ')"; fi

echo "verbs_gpu_mem: $fails failure(s)"
exit $((fails != 0))
