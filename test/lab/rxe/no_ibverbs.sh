#!/bin/bash
# no_ibverbs.sh CMD... -- run CMD on this host as if rdma-core were not installed: in a private
# mount namespace, /dev/null is bound over every libibverbs the dynamic loader knows, so
# dlopen("libibverbs.so.1") fails as on a machine without it. Needs root (unshare, mount).
set -euo pipefail
if [[ $# -eq 0 ]]; then
  echo "usage: no_ibverbs.sh CMD..." >&2
  exit 2
fi
libs=$(ldconfig -p | awk '/libibverbs\.so/ {print $NF}' | xargs -r readlink -f | sort -u | tr '\n' ' ')
export RR_HIDE_LIBS=$libs
# shellcheck disable=SC2016
exec unshare --mount --propagation private bash -c '
  for l in $RR_HIDE_LIBS; do mount --bind /dev/null "$l"; done
  unset RR_HIDE_LIBS
  exec "$@"' no_ibverbs "$@"
