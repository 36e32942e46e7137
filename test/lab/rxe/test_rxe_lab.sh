#!/bin/bash
# ctest rxe_lab: boot the Soft-RoCE lab and run lab_checks.sh inside it (needs root: it
# prepares the cached kernel on first use; CI runs as root). Optional arguments: the paths of
# the verbs_probe and verbs_smoke binaries built from this tree.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "rxe_lab: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 150 -- "$here/lab_checks.sh" "$@"
