#!/bin/bash
# ctest verbs_qos: boot the Soft-RoCE lab and check the traffic class on the wire
# (verbs_qos.sh): RERAIL_IB_TC=106, NCCL_IB_TC=106 alone, and the communicator's trafficClass
# 106 each put DSCP 26 on every RoCE packet of checked traffic; nothing set puts none. Root,
# as every lab test.
#   usage: test_verbs_qos.sh HARNESS PLUGIN_DIR
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_qos: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 100 -- "$here/verbs_qos.sh" "$1" "$2"
