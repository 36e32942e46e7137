#!/bin/bash
# ctest verbs_many: boot the Soft-RoCE lab and run verbs_many.sh inside it: CONNS connections
# per rank pair over the verbs rail, one backup each, checked traffic, then host A's rail-0 NIC
# down: every connection fails over and completes. CI runs 256 connections (the issue's count
# per rank pair; both ranks in one 3 GiB guest), far past the 42 per NIC one shared device CQ
# used to hold; 2,048 are bench/verbs_conns_bench.sh's. Root, as every lab test.
#   usage: test_verbs_many.sh HARNESS PLUGIN_DIR [CONNS [SECONDS]]
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_many: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 200 --mem 3072 -- "$here/verbs_many.sh" "$1" "$2" "${3:-256}" "${4:-6}"
