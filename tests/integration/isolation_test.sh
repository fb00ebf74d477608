#!/usr/bin/env bash
# Isolation (--replicas 2): shard 0 runs in a network namespace of its own, joined to the host
# by a veth pair; etcd, shards 1 and 2 and two workers run on the host. Mid-training the veth
# goes down: shard 0 is cut off from etcd, from its backup (shard 1) and from the workers at
# once, as a partitioned machine is. It must stop acknowledging within its lease, shard 1 takes
# its partitions over, the workers go on there, and the job ends bitwise equal to an
# undisturbed run of it: no worker got an OK for a push that the surviving copy lacks. Once the
# link is back, shard 0 learns that its partitions were taken over and serves nothing.
#
#   tests/integration/isolation_test.sh SOURCE_DIR BUILD_DIR [grpc|ucx]
# Needs root and iproute2 (skipped, exit 77, otherwise). UCX is limited to TCP (shared memory
# would pass between namespaces).
set -euo pipefail

source_dir=$1
build_dir=$2
transport=${3:-grpc}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v etcd >/dev/null; then
  echo "skipped: needs root, iproute2 and etcd (etcd-server)"
  exit 77
fi
server="$build_dir/server/ps-server"
worker="$build_dir/worker/examples/linear_regression"
export UCX_TLS=tcp
steps=200

run_dir=$(mktemp -d)
ns="hetps-iso-$$"
pids=()
cleanup() {
  kill_started
  ip netns del "$ns" 2>/dev/null || true
  ip link del "veth-$$" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"
host_ip=$(pid_subnet_address 231 1)
ns_ip=$(pid_subnet_address 231 2)

ip netns add "$ns"
ip link add "veth-$$" type veth peer name "veth-$$-ns"
ip link set "veth-$$-ns" netns "$ns"
ip addr add "$host_ip/30" dev "veth-$$"
ip link set "veth-$$" up
ip netns exec "$ns" ip addr add "$ns_ip/30" dev "veth-$$-ns"
ip netns exec "$ns" ip link set "veth-$$-ns" up
ip netns exec "$ns" ip link set lo up
# As on a real machine, the namespace routes everything through its link.
ip netns exec "$ns" ip route add default via "$host_ip"
# UCX over TCP would use every interface of the host, other tests' veths too, whose deletion
# mid-run breaks the connections it laid over them: the processes on the host use this test's.
export UCX_NET_DEVICES="veth-$$"

# One cluster: etcd and shards 1, 2 on the host's end of the veth, shard 0 in the namespace.
# `cut` set: shard 0 runs in the namespace (the undisturbed run has all on the host).
start_cluster() {  # name, cut
  local name=$1 dir="$run_dir/$1" client peer
  mkdir -p "$dir/etcd"
  client=$(free_port "$host_ip")
  peer=$(free_port "$host_ip")
  etcd --name="$name" --data-dir="$dir/etcd/data" --listen-client-urls="http://$host_ip:$client" \
    --advertise-client-urls="http://$host_ip:$client" --listen-peer-urls="http://$host_ip:$peer" \
    --initial-advertise-peer-urls="http://$host_ip:$peer" \
    --initial-cluster="$name=http://$host_ip:$peer" --election-timeout=500 \
    --heartbeat-interval=50 --log-level=warn >"$run_dir/$name-etcd.log" 2>&1 &
  pids+=($!)
  await "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://$host_ip:$client/health\", timeout=1)' 2>/dev/null" 30
  local hosts=()
  for i in 0 1 2; do
    local prefix=() host=$host_ip
    if [ "$i" = 0 ] && [ "$2" = cut ]; then
      prefix=(ip netns exec "$ns" env UCX_NET_DEVICES="veth-$$-ns")
      host=$ns_ip
    fi
    "${prefix[@]}" "$server" --host "$host" --port 0 --port_file "$dir/port$i" --shard_index "$i" \
      --num_shards 3 --num_workers 2 --transport "$transport" --replicas 2 \
      --etcd "$host_ip:$client" --lease_s 1 --lifetime_s 300 >"$run_dir/$name-shard$i.log" 2>&1 &
    pids+=($!)
    hosts+=("$host")
  done
  servers=""
  for i in 0 1 2; do
    await "[ -s $dir/port$i ]" 30
    servers+="${servers:+,}${hosts[$i]}:$(cat "$dir/port$i")"
  done
}
start_workers() {  # name, servers; the workers' pids in worker_pids
  worker_pids=()
  for r in 0 1; do
    "$worker" --servers "$2" --rank "$r" --world_size 2 --steps "$steps" --sync bsp \
      --transport "$transport" --dim 1000 --samples 2000 --lr 0.2 --partition_bytes 1024 \
      --compute_ms 10 --output "$run_dir/$1-model$r" >"$run_dir/$1-worker$r.log" 2>&1 &
    worker_pids+=($!)
    pids+=($!)
  done
}

start_cluster cut cut
start_workers cut "$servers"
await "grep -q 'rank 0 step 60 ' $run_dir/cut-worker0.log || ! kill -0 ${worker_pids[0]} 2>/dev/null" 120
grep -q 'rank 0 step 60 ' "$run_dir/cut-worker0.log" || fail "worker 0 ended before step 60"
ip netns exec "$ns" ip link set "veth-$$-ns" down
for pid in "${worker_pids[@]}"; do wait "$pid" || fail "a worker of the cut cluster failed"; done
# Shard 0 notices that it lost its lease (within a lease of the cut, but not necessarily
# before the workers ended).
await "grep -qE 'not renewed|could not be renewed' $run_dir/cut-shard0.log" 30
grep -q "shard 0 is gone" "$run_dir/cut-shard1.log" || fail "shard 1 did not take shard 0's partitions over"
# The link comes back: shard 0 reaches etcd again, finds its partitions taken over, and takes
# no new lease (its copies are out of date): it serves nothing until it is restarted.
ip netns exec "$ns" ip link set "veth-$$-ns" up
await "grep -q 'no lease may replace' $run_dir/cut-shard0.log" 60
kill_started
pids=()

start_cluster whole whole
start_workers whole "$servers"
for pid in "${worker_pids[@]}"; do wait "$pid" || fail "a worker of the undisturbed cluster failed"; done
for r in 0 1; do
  cmp "$run_dir/cut-model$r" "$run_dir/whole-model$r" ||
    fail "worker $r: the weights differ from the undisturbed run's"
done
echo "ok: shard 0 cut off at step 60 ($transport); the job ended bitwise equal to an undisturbed run"
