#!/usr/bin/env bash
# Two "hosts" on this machine for bench/run dp: network namespaces troupe0 and troupe1 joined by a
# veth pair (10.77.0.1 <-> 10.77.0.2) whose both ends are limited by tc (tbf) to 1 Gbit/s, like the
# article's cluster link, or to RATE (tc's units: 100mbit).
# usage: bench/netns.sh up [RATE] | down   (needs root: ip netns, tc)
set -euo pipefail
case "${1:-}" in
  up)
    "$0" down 2>/dev/null || true
    ip netns add troupe0
    ip netns add troupe1
    ip link add troupe-a type veth peer name troupe-b
    ip link set troupe-a netns troupe0
    ip link set troupe-b netns troupe1
    ip -n troupe0 addr add 10.77.0.1/24 dev troupe-a
    ip -n troupe1 addr add 10.77.0.2/24 dev troupe-b
    for ns in troupe0 troupe1; do ip -n "$ns" link set lo up; done
    ip -n troupe0 link set troupe-a up
    ip -n troupe1 link set troupe-b up
    rate="${2:-1gbit}"
    ip netns exec troupe0 tc qdisc add dev troupe-a root tbf rate "$rate" burst 256kb latency 100ms
    ip netns exec troupe1 tc qdisc add dev troupe-b root tbf rate "$rate" burst 256kb latency 100ms
    ;;
  down)
    ip netns del troupe0 2>/dev/null || true
    ip netns del troupe1 2>/dev/null || true
    ;;
  *) echo "usage: bench/netns.sh up [RATE] | down" >&2; exit 2 ;;
esac
