#!/bin/bash
# ctest verbs_many: boot the Soft-RoCE lab and run verbs_many.sh inside it: CONNS connections
# per rank pair over the verbs rail, one backup each, checked traffic, then host A's rail-0 NIC
# down: every connection fails over and completes. CI runs 64 connections, past the 42 per NIC
# one shared device CQ used to hold; 256 and more are bench/verbs_conns_bench.sh's (the lab's
# single-threaded setup of hundreds of connections under TCG runs into the listener's 1 s
# handshake limit, see bench/RESULTS.md). Root, as every lab test.
#   usage: test_verbs_many.sh HARNESS PLUGIN_DIR [CONNS [SECONDS]]
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "verbs_many: needs root (the Soft-RoCE lab prepares a kernel and boots it)" >&2
  exit 1
fi
exec "$here/rxelab.sh" run --timeout 200 --mem 1536 -- "$here/verbs_many.sh" "$1" "$2" "${3:-64}" "${4:-6}"
