#!/bin/bash
# ctest verbs_rail: boot the Soft-RoCE lab and run the harness over the verbs rail inside it
# three times (verbs_harness.sh): across a NIC going down and up (the receiver flushing every
# receive by RDMA reads, as for GPU memory), across a rail going silent (RoCE dropped, links and
# ports up), then the NIC case again with two QPs per rail (RERAIL_IB_QPS_PER_RAIL=2: chunks
# spread over both, put back in order) and adaptive routing forced on (RERAIL_IB_ADAPTIVE_ROUTING=1:
# writes above 8 KiB go split, a plain RDMA WRITE and a write with immediate, on rxe); then orderly closes (verbs_close.sh: one side closes as
# soon as its schedule is done, 10 runs each way, zero errors); then GPU memory
# (verbs_gpu_mem.sh: buffers registered as NCCL_PTR_CUDA with RERAIL_TEST_HOST_AS_GPU=1 and
# PROT_NONE while the plugin owns them, 0 B..4 MiB, pure verbs and a TCP+verbs pool: nothing
# faults, every byte arrives; NCCL's own IB transport passes the same, NCCL's socket transport
# must fail it); then the traffic class on the wire (verbs_qos.sh: RERAIL_IB_TC, NCCL_IB_TC or
# the communicator's trafficClass 106 put DSCP 26 on every RoCE packet). Root, as every lab test.
#   usage: test_verbs_rail.sh HARNESS PLUGIN_DIR [SECONDS per case [RERAIL_TOOL]]
#   (the rerail tool: verbs_harness.sh reads the devices' ptrSupport from `rerail devices --json`)
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_rail: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 270 -- bash -c '
  export RERAIL_CLI="$7"
  "$0" "$1" "$2" "$3" link gpuflush; link=$?
  "$0" "$1" "$2" "$3" silent; silent=$?
  RERAIL_IB_QPS_PER_RAIL=2 RERAIL_IB_ADAPTIVE_ROUTING=1 "$0" "$1" "$2" "$3" link; qps=$?
  "$4" "$1" "$2" 10; close=$?
  "$5" "$1" "$2"; gpumem=$?
  "$6" "$1" "$2"; qos=$?
  exit $((link || silent || qps || close || gpumem || qos))' "$here/verbs_harness.sh" "$1" "$2" "${3:-12}" "$here/verbs_close.sh" \
  "$here/verbs_gpu_mem.sh" "$here/verbs_qos.sh" "${4:-}"
