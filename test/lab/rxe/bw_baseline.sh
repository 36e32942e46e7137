#!/bin/bash
# The verbs baseline, run inside the rxe lab: ib_write_bw (perftest, RC RDMA WRITE) between two
# rxe devices of different "hosts" on one rail, rxe2 (B) -> rxe0 (A), for each size given
# (default 65536 1048576 4194304), ITERS iterations each (default 200). Prints perftest's
# table lines: bytes, iterations, peak and average MB/s. Used for the figures in README.md:
#   test/lab/rxe/rxelab.sh run [--mtu 9000] -- test/lab/rxe/bw_baseline.sh [SIZES...]
set -uo pipefail
iters=${ITERS:-200}
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(65536 1048576 4194304)
port=18600
echo "bw_baseline: ib_write_bw rxe2 -> rxe0, MTU $(cat /sys/class/net/vethA0/mtu), $iters iterations, $(nproc) vCPUs"
for s in "${sizes[@]}"; do
  port=$((port + 1))
  ib_write_bw -d rxe0 -x 1 -s "$s" -n "$iters" -F -p "$port" >/dev/null 2>&1 &
  srv=$!
  for ((i = 0; i < 100; i++)); do [[ -n $(ss -Hltn "sport = :$port") ]] && break; sleep 0.1; done
  timeout 300 ib_write_bw -d rxe2 -x 1 -s "$s" -n "$iters" -F -p "$port" 10.55.0.1 |
    awk -v s="$s" '$1 == s'
  wait "$srv"
done
