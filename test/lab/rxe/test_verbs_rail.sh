#!/bin/bash
# ctest verbs_rail: boot the Soft-RoCE lab and run the harness over the verbs rail with a NIC
# failure inside it (verbs_harness.sh). Root, as every lab test.
#   usage: test_verbs_rail.sh HARNESS PLUGIN_DIR [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_rail: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 170 -- "$here/verbs_harness.sh" "$@"
