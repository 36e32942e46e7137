#!/bin/bash
# ctest verbs_flaps: boot the Soft-RoCE lab once and run the verbs rail's fault cases inside it
# (verbs_faults.sh): random flaps on both rails with every message checked, every rail down,
# a dead peer, the telemetry view of a failover, a forged write and a slow rail (CMakeLists.txt
# names the cases). Root, as every lab test.
#   usage: test_verbs_faults.sh HARNESS PLUGIN_DIR RERAIL [CASE...]
#   RERAIL_TEST_SCALE scales the flapping time (CI's sanitizer pass: 0.25)
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_faults: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
[[ $# -ge 3 ]] || { echo "usage: $0 HARNESS PLUGIN_DIR RERAIL [CASE...]" >&2; exit 2; }
exec "$here/rxelab.sh" run --timeout 540 -- "$here/verbs_faults.sh" "$@"
