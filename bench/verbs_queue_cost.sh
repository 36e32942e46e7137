#!/bin/bash
# What the provider's queues of one verbs endpoint cost in resident memory, one size at a time,
# in the Soft-RoCE lab (rxe maps its send, receive and completion rings into the process, so
# their depths and WQE sizes are resident memory; docs/memory_per_connection.md).
# usage (root): bench/verbs_queue_cost.sh [N]   N objects of each kind (default 64)
# It compiles bench/verbs_queue_cost.c (needs the libibverbs headers), boots the lab and prints
# one line per shape: rerail's endpoint sizes, the cuts tried, and NCCL 2.28's IB sizes.
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
if [ "${RXELAB:-}" != 1 ]; then
  bin=$(mktemp -d)/verbs-queue-cost
  cc -std=c11 -O2 -Wall -Wextra -o "$bin" "$here/verbs_queue_cost.c" -libverbs
  exec "$here/../test/lab/rxe/rxelab.sh" run --timeout 300 -- env VQC_BIN="$bin" "$here/verbs_queue_cost.sh" "${1:-64}"
fi
n=$1
run() { "$VQC_BIN" rxe0 "$n" "$@"; }
run cq 510        # rerail: an endpoint's CQ (send + receive queue full)
run cq 255
run cq 127
run cq 63
run cq 512        # NCCL 2.28: 2 x 256 requests, both sides
run qp 255 255 64 # rerail: an endpoint's QP
run qp 255 255 48
run qp 255 255 0
run qp 255 0 0
run qp 0 255 0
run qp 127 127 48
run qp 63 63 48
run qp 512 256 0  # NCCL 2.28: send 2 x 256, receive 256, no inline
