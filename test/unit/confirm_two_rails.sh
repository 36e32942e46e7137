#!/usr/bin/env bash
# Runs test_connect_confirm with two NICs pooled, so every connection has a
# primary and a backup rail (RERAIL_BACKUPS=1): a network namespace with two
# veth interfaces (their peers idle), each its own /24, as two_rails.sh. Root.
#   usage: confirm_two_rails.sh TEST_CONNECT_CONFIRM
set -u
bin=${1:?usage: $0 TEST_CONNECT_CONFIRM}
if [ "$(id -u)" -ne 0 ]; then
  echo "confirm_two_rails: needs root (a network namespace)" >&2
  exit 1
fi
ns=rrconfirm$$
ip netns add "$ns" || exit 1
trap 'ip netns del "$ns" 2>/dev/null' EXIT
ip -n "$ns" link set lo up
for r in 0 1; do
  ip -n "$ns" link add "rr$r" type veth peer name "xp$r"
  ip -n "$ns" addr add "10.79.$r.1/24" dev "rr$r"
  ip -n "$ns" link set "xp$r" up
  ip -n "$ns" link set "rr$r" up
done
ip netns exec "$ns" env RR_TEST_IFNAME=rr RR_TEST_RAILS=2 "$bin" || exit 1
echo "confirm_two_rails: passed"
