#!/usr/bin/env bash
# Runs test_core_loopback's traffic cases with two NICs pooled, so every
# connection has a primary and a backup rail (RERAIL_BACKUPS=1) and, with
# RERAIL_FAILOVER=balance, carries chunks on both: a network namespace with two
# veth interfaces (their peers idle), each its own /24 (traffic between a host's own addresses
# stays on the host; each rail still has its own sockets and device). Root.
# Mode "whole" runs every case of another test program the same way
# (test_connect_confirm: a socket refused after the comm was handed out).
#   usage: two_rails.sh TEST_PROGRAM [chain|balance|whole]
set -u
bin=${1:?usage: $0 TEST_PROGRAM [chain|balance|whole]}
if [ "$(id -u)" -ne 0 ]; then
  echo "two_rails: needs root (a network namespace)" >&2
  exit 1
fi
ns=rr2rails$$
ip netns add "$ns" || exit 1
trap 'ip netns del "$ns" 2>/dev/null' EXIT
ip -n "$ns" link set lo up
for r in 0 1; do
  ip -n "$ns" link add "rr$r" type veth peer name "xp$r"
  ip -n "$ns" addr add "10.79.$r.1/24" dev "rr$r"
  ip -n "$ns" link set "xp$r" up
  ip -n "$ns" link set "rr$r" up
done
mode=${2:-chain}
if [ "$mode" = whole ]; then
  ip netns exec "$ns" env RR_TEST_IFNAME=rr RR_TEST_RAILS=2 "$bin" || exit 1
  echo "two_rails ($mode): passed"
  exit 0
fi
[ "$mode" = balance ] && export RERAIL_FAILOVER=balance
ip netns exec "$ns" env RR_TEST_IFNAME=rr RR_TEST_RAILS=2 \
  RR_TEST_FILTER="test_sends_in_any_tag_order" "$bin" || exit 1
ip netns exec "$ns" env RR_TEST_IFNAME=rr RR_TEST_FILTER="test_grouped" "$bin" || exit 1
ip netns exec "$ns" env RR_TEST_IFNAME=rr RR_TEST_FILTER="test_eager_before_grouped_receive" "$bin" || exit 1
echo "two_rails ($mode): passed"
