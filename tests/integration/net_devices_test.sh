#!/usr/bin/env bash
# A shard and a worker on one machine in network namespaces of their own, as containers with
# their own networks are.
# - UCX's "auto" network devices on a multi-homed machine: each namespace has a link to the
#   other and, created first, an interface that leads nowhere the other side can reach (as a
#   container bridge or a second network does). UCX over TCP offers a peer every interface and
#   connects to any that the peer offers; with "auto" a shard offers the interface of its --host
#   and a worker the one it routes the shard's address through, so every run connects, and over
#   the link. Before, most runs failed with "Destination is unreachable". A shard listening on
#   0.0.0.0 offers the interface of the address it is reached at (its entry in --servers).
# - Shared memory across the namespaces (they share the IPC namespace, as containers run with
#   --ipc=host do): UCX's memory-mapped transports would carry the messages but lose every
#   wake-up (transport/ucx/shared_memory.h), 100 ms a message; the worker connects without them.
#
#   tests/integration/net_devices_test.sh SOURCE_DIR BUILD_DIR
# Needs root and iproute2 (skipped, exit 77, otherwise).
set -euo pipefail

build_dir=$2
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2"
  exit 77
fi
unset UCX_NET_DEVICES UCX_TLS

run_dir=$(mktemp -d)
tag=$$
shard_ns="hetps-nd-shard-$tag"
worker_ns="hetps-nd-worker-$tag"
dead_end_ns="hetps-nd-none-$tag"
pids=()
cleanup() {
  kill_started
  for ns in "$shard_ns" "$worker_ns" "$dead_end_ns"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"
shard_ip=$(pid_subnet_address 232 1)
worker_ip=$(pid_subnet_address 232 2)

for ns in "$shard_ns" "$worker_ns" "$dead_end_ns"; do
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done
# The dead ends first: they come before the link in each namespace's list of interfaces.
dead_end() {  # namespace, interface, address
  ip link add "$2" type veth peer name "$2x"
  ip link set "$2" netns "$1"
  ip link set "$2x" netns "$dead_end_ns"
  ip -n "$1" addr add "$3/30" dev "$2"
  ip -n "$1" link set "$2" up
  ip -n "$dead_end_ns" link set "$2x" up
}
dead_end "$shard_ns" "nd${tag}s" "$(pid_subnet_address 235 1)"
dead_end "$worker_ns" "nd${tag}w" "$(pid_subnet_address 236 2)"
ip link add "nl${tag}s" type veth peer name "nl${tag}w"
ip link set "nl${tag}s" netns "$shard_ns"
ip link set "nl${tag}w" netns "$worker_ns"
ip -n "$shard_ns" addr add "$shard_ip/30" dev "nl${tag}s"
ip -n "$worker_ns" addr add "$worker_ip/30" dev "nl${tag}w"
ip -n "$shard_ns" link set "nl${tag}s" up
ip -n "$worker_ns" link set "nl${tag}w" up

ip netns exec "$shard_ns" "$build_dir/server/ps-server" --transport ucx --host "$shard_ip" \
  --port 0 --port_file "$run_dir/port" --lifetime_s 170 >"$run_dir/shard.log" 2>&1 &
pids+=($!)
await "[ -s $run_dir/port ]" 30
bench() {  # run, UCX_TLS (empty: unset)[, port]; prints the lanes the run's connections used
  local out="$run_dir/bench$1.out" tls=() port=${3:-$(cat "$run_dir/port")}
  [ -n "$2" ] && tls=("UCX_TLS=$2")
  ip netns exec "$worker_ns" env HETPS_LOG_LEVEL=info "${tls[@]}" timeout 60 \
    "$build_dir/bench/ps-bench" --servers "$shard_ip:$port" --transport ucx \
    --op pushpull -b 4K -e 1M -f 16 --duration_s 0.1 --check >"$out" 2>&1 ||
    fail "ps-bench run $1 failed"
  grep -o 'lane\[[0-9]\]: *[0-9]*:[a-z]*/[^ .]*' "$out" | sed 's/.*://' | sort -u | tr '\n' ' '
}
for run in 1 2 3 4; do
  lanes=$(bench "$run" tcp)  # the devices at stake are TCP's
  [ "$lanes" = "tcp/nl${tag}w " ] || fail "ps-bench run $run used '$lanes', not tcp/nl${tag}w"
done
lanes=$(bench 5 "")
[ -n "$lanes" ] || fail "ps-bench run 5 logged no UCX connection"
if grep -qE 'sysv|posix|xpmem' <<<"$lanes"; then fail "memory-mapped lanes across namespaces: $lanes"; fi
grep -q "tcp/nl${tag}w" <<<"$lanes" || fail "ps-bench run 5 did not use the link: $lanes"

# A shard on every interface (a fixed port: the namespace is the test's own).
ip netns exec "$shard_ns" "$build_dir/server/ps-server" --transport ucx --host 0.0.0.0 \
  --port 7000 --port_file "$run_dir/port7000" --servers "$shard_ip:7000" --lifetime_s 170 \
  >"$run_dir/wildcard.log" 2>&1 &
pids+=($!)
await "[ -s $run_dir/port7000 ]" 30
wildcard_pid=${pids[-1]}
# UCX's TCP listeners (not the shard's own port, nor gRPC's bulk one on 0.0.0.0): on the link's
# address alone, not on the dead end's or loopback (where it offered every interface before).
listeners=$(ip netns exec "$shard_ns" ss -ltnpH | grep "pid=$wildcard_pid," |
  awk '{print $4}' | grep -v -e ':7000$' -e '^\*:' -e '^0\.0\.0\.0:' | sed 's/:[0-9]*$//' |
  sort -u | tr '\n' ' ')
[ "$listeners" = "$shard_ip " ] || fail "the shard on 0.0.0.0 offers UCX on '$listeners', not $shard_ip"
for run in 6 7; do
  lanes=$(bench "$run" tcp 7000)
  [ "$lanes" = "tcp/nl${tag}w " ] || fail "ps-bench run $run used '$lanes', not tcp/nl${tag}w"
done
echo "ok: 4 runs over TCP across a multi-homed pair of namespaces used the link (tcp/nl${tag}w);"
echo "ok: a shard on 0.0.0.0 reached at its link address offered UCX there alone, and 2 more runs"
echo "    against it used the link too;"
echo "ok: with every UCX transport allowed, the worker used $lanes"
