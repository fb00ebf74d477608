#!/usr/bin/env bash
# A zone on one machine: every shard in a "cpu" network namespace and every worker in a "gpu"
# one, each joined to a bridge (the zone's switch) by a veth pair whose two directions are
# rate-limited with tc (the machine's NIC: GPU_RATE for workers, CPU_RATE for shards; 500mbit
# by default: at 1gbit a 2-vCPU machine's CPUs saturate in a 2 x 2 zone, and the figures then
# measure them, see bench/PERFORMANCE.md, "Also where a worker's link is as busy"). Then:
#
#  1. Training across the namespaces is correct: the example job's final model (every worker's)
#     equals, bit for bit, the same job's on 127.0.0.1 without shaping.
#  2. ps-bench's push-pull, run by every worker at once, against the bound the shaping sets:
#     each worker moves the model once each way over its NIC (M / GPU_RATE), and each shard
#     carries W/S of every worker's share (W * M / (S * CPU_RATE); more for a shard that holds
#     more of the model's partitions); the larger, plus one round trip where links have delay,
#     is the step's bound and names the link that saturates. Target: p50 within 1.15x of it.
#  3. What ps-plan (deploy/plan/ps-plan) predicts for the same layout, and its error. The
#     partitions are the size ps-plan recommends for the layout and model (printed last on each
#     row), or PARTITION_BYTES: a step's push and pull overlap except for a partition's time at
#     each end, so 1 MiB partitions cost a 2 x 2 zone of 1 Gbit/s links 1.25x at 16 MiB.
#
#   bench/zone_cluster.sh [build dir]
#   SHARDS=2 WORKERS=2 GPU_RATE=1gbit CPU_RATE=1gbit SIZES="1M 16M 64M" bench/zone_cluster.sh build
#
# Needs root and iproute2 (ip, tc); exits 77 without them. DELAY_MS delays every link in each
# direction (a worker's request then reaches a shard 2 x DELAY_MS later: its link, then the
# shard's; a round trip takes 4 x DELAY_MS, which the bound and ps-plan count): with tc netem
# where the kernel has it, else through bench's delay-link (a pair of TAP devices per link,
# one forwarding process each, in place of the veth pair). The links' rates are tbf's. A NIC
# sends at its rate from the first byte, so the token bucket is kept small (TBF_BURST, 128kb:
# the least at which tbf still reaches its rate on this VM; 64kb gave 0.4 of it); at 512kb it
# let 4 ms of each idle moment's traffic through at once, which hid a small model's pipeline.
# TCP_CC=reno (or another the kernel allows in a namespace) sets the namespaces' TCP congestion
# control; they inherit the host's otherwise (printed). TCP_WMEM caps the namespaces' TCP send
# buffers (the largest of net.ipv4.tcp_wmem, bytes): auto (the default) at what ps-plan
# recommends for the layout (where several workers share a shard's link), off never (the
# kernel's autotuning, up to 4 MiB), or a number. TBF_LATENCY: how long a link's queue may be
# (100ms).
# UCX runs over TCP (shared memory would pass between namespaces).
# CHECK=1 has ps-bench check every pulled value (and fail on a wrong one); off by default, as
# the check's time counts in the step. FLOOR=1 also measures each size's plain-TCP floor
# (bench/tcp_exchange.py): every worker exchanges the same bytes with every shard over one TCP
# connection each, both ways at once, in rounds all workers start together, a round as long as
# its slowest worker; it prints the floor's median and hetps's p50 against it.
set -euo pipefail

build_dir=${1:-build}
shards=${SHARDS:-2}
workers=${WORKERS:-2}
gpu_rate=${GPU_RATE:-500mbit}
cpu_rate=${CPU_RATE:-500mbit}
sizes=${SIZES:-1M 16M 64M}
iterations=${ITERATIONS:-10}
transport=${TRANSPORT:-grpc}
delay_ms=${DELAY_MS:-0}
steps=${STEPS:-20}
partition_bytes=${PARTITION_BYTES:-auto}
tcp_cc=${TCP_CC:-}
check=${CHECK:-0}
floor=${FLOOR:-0}
tcp_wmem=${TCP_WMEM:-auto}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "skipped: needs root and iproute2 (ip, tc)"
  exit 77
fi
server="$build_dir/server/ps-server"
delay_link="$build_dir/bench/delay-link"
worker="$build_dir/worker/examples/linear_regression"
exchange="$(dirname "$0")/tcp_exchange.py"
bench="$build_dir/bench/ps-bench"
export UCX_TLS=tcp

run_dir=$(mktemp -d)
tag="z$$"
bridge="${tag}br"
subnet="10.$((200 + $$ % 50)).$(($$ / 50 % 250))"
pids=()
namespaces=()
cleanup() {
  kill_started
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../tests/testing/script_helpers.sh
source "$(dirname "$0")/../tests/testing/script_helpers.sh"
# Bits per second of a tc rate ("1gbit", "500mbit").
bits_per_second() {
  python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1])
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]))' "$1"
}
bytes_of() {
  python3 -c '
import sys
s = sys.argv[1]
print(int(s[:-1]) << {"K": 10, "M": 20, "G": 30}[s[-1]] if s[-1] in "KMG" else int(s))' "$1"
}

ip link add "$bridge" type bridge
ip link set "$bridge" up
# How links get their delay: none, netem, or delay-link's TAP pairs.
delay_by=none
if [ "$delay_ms" != 0 ]; then
  if tc qdisc add dev "$bridge" root netem delay 1ms 2>/dev/null; then
    tc qdisc del dev "$bridge" root
    delay_by=netem
  else
    [ -x "$delay_link" ] || fail "no tc netem in this kernel and no $delay_link: DELAY_MS=0"
    if ! ip tuntap add dev "${tag}probe" mode tap 2>/dev/null; then
      echo "skipped: DELAY_MS needs tc netem or TAP devices (/dev/net/tun), and this machine" \
        "has neither"
      exit 77
    fi
    ip link del "${tag}probe"
    delay_by=delay-link
  fi
fi
delay_note="no delay (DELAY_MS=0)"
[ "$delay_by" != none ] && delay_note="${delay_ms} ms per link each way ($delay_by)"

# Shapes one direction: `dev` in namespace `ns` ("" for the host) sends at `rate`.
shape() {
  local ns=$1 dev=$2 rate=$3
  local run=(tc)
  [ -n "$ns" ] && run=(tc -n "$ns")
  if [ "$delay_by" = netem ]; then
    "${run[@]}" qdisc add dev "$dev" root netem delay "${delay_ms}ms" rate "$rate" limit 100000
  else
    "${run[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst "${TBF_BURST:-128kb}" \
      latency "${TBF_LATENCY:-100ms}"
  fi
}
host_number=1
# Adds namespace `name` with an address on the bridge, its link shaped at `rate`; prints the
# address.
add_node() {
  local name=$1 rate=$2
  local ns="${tag}-${name}"
  local host_end="${tag}${name}h" node_end="${tag}${name}n"
  ip netns add "$ns"
  namespaces+=("$ns")
  if [ "$delay_by" = delay-link ]; then
    "$delay_link" --outer "$host_end" --inner "$node_end" --netns "$ns" --delay_ms "$delay_ms" \
      --ready_file "$run_dir/link-$name" --lifetime_s 1800 >>"$run_dir/link-$name.log" 2>&1 &
    pids+=($!)
    await "[ -s '$run_dir/link-$name' ]" 10
  else
    ip link add "$host_end" type veth peer name "$node_end"
    ip link set "$node_end" netns "$ns"
  fi
  ip link set "$host_end" master "$bridge" up
  ip -n "$ns" link set lo up
  [ -n "$tcp_cc" ] && ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$tcp_cc"
  ip -n "$ns" addr add "$subnet.$host_number/24" dev "$node_end"
  ip -n "$ns" link set "$node_end" up
  shape "$ns" "$node_end" "$rate"  # what the node sends
  shape "" "$host_end" "$rate"     # what it receives
  node_address="$subnet.$host_number"
  host_number=$((host_number + 1))
}
shard_addresses=()
for ((i = 0; i < shards; ++i)); do
  add_node "c$i" "$cpu_rate"
  shard_addresses+=("$node_address")
done
worker_addresses=()
for ((i = 0; i < workers; ++i)); do
  add_node "g$i" "$gpu_rate"
  worker_addresses+=("$node_address")
done
echo "zone: $shards shard(s) at $cpu_rate, $workers worker(s) at $gpu_rate, $delay_note," \
  "$transport, TCP congestion control" \
  "$(ip netns exec "${namespaces[0]}" sysctl -n net.ipv4.tcp_congestion_control)"

# The round trip the links set, and what a TCP ping-pong of one byte between the first worker's
# namespace and the first shard's takes through them (the floor of a small push+pull).
if [ "$delay_by" != none ]; then
  # No `timeout` in between: the pid must be the server's, for kill_started to end it.
  ip netns exec "${tag}-c0" python3 "$exchange" serve "${shard_addresses[0]}" 7999 1 \
    >>"$run_dir/pingpong.log" 2>&1 &
  pids+=($!)
  echo "round trip: $(python3 -c "print(4 * $delay_ms)") ms set by the links," \
    "$(ip netns exec "${tag}-g0" timeout 60 python3 "$exchange" pingpong \
      "${shard_addresses[0]}:7999" 50) ms measured (TCP ping-pong, median of 50)"
fi

# Starts the shards (fresh: every run starts its job over) in their namespaces, or on
# 127.0.0.1 with `local`; sets `servers`.
shard_pids=()
start_shards() {
  local where=$1
  shard_pids=()
  local list=()
  for ((i = 0; i < shards; ++i)); do
    local port_file="$run_dir/port-$where-$i-$RANDOM"
    local host="${shard_addresses[$i]}" run=(ip netns exec "${tag}-c$i")
    if [ "$where" = local ]; then host=127.0.0.1; run=(); fi
    "${run[@]}" "$server" --host "$host" --port 0 --port_file "$port_file" \
      --shard_index "$i" --num_shards "$shards" --num_workers "$workers" \
      --transport "$transport" --lifetime_s 600 >>"$run_dir/shard-$where-$i.log" 2>&1 &
    shard_pids+=($!)
    pids+=($!)
    await "[ -s '$port_file' ]" 30
    list+=("$host:$(cat "$port_file")")
  done
  servers=$(IFS=,; echo "${list[*]}")
}
stop_shards() {
  for pid in "${shard_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${shard_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# 1. Training across the zone equals training on loopback, bit for bit.
train() {
  local where=$1
  start_shards "$where"
  local worker_pids=()
  for ((i = 0; i < workers; ++i)); do
    local run=(ip netns exec "${tag}-g$i")
    [ "$where" = local ] && run=()
    "${run[@]}" "$worker" --servers "$servers" --rank "$i" --world_size "$workers" \
      --transport "$transport" --steps "$steps" --optimizer adam --lr 0.01 \
      --output "$run_dir/model-$where-$i" >"$run_dir/worker-$where-$i.log" 2>&1 &
    worker_pids+=($!)
    pids+=($!)
  done
  for pid in "${worker_pids[@]}"; do wait "$pid" || fail "a worker failed ($where)"; done
  stop_shards
}
train local
train zone
for ((i = 0; i < workers; ++i)); do
  cmp -s "$run_dir/model-local-0" "$run_dir/model-zone-$i" ||
    fail "worker $i's model across the zone differs from the loopback run's"
done
echo "training: $workers worker(s) x $steps Adam steps across the zone end bitwise equal to" \
  "the loopback run ($(grep -h 'final loss' "$run_dir/worker-zone-0.log"))"

# The plain-TCP floor of a step of `bytes` (FLOOR=1): see the top of this file.
measure_floor() {
  local size=$1 bytes=$2
  local share=$(((bytes + shards - 1) / shards)) servers_pids=() exchange_pids=() list=""
  for ((i = 0; i < shards; ++i)); do
    ip netns exec "${tag}-c$i" python3 "$exchange" serve "${shard_addresses[$i]}" 7998 "$share" \
      >>"$run_dir/floor-c$i.log" 2>&1 &
    servers_pids+=($!)
    pids+=($!)
    list+="${list:+,}${shard_addresses[$i]}:7998"
  done
  # Rounds start every three bounds' time (plus set-up), so none runs into the next.
  local period start
  period=$(python3 -c "print(3 * $bytes * 8 / min($gpu_bps, $cpu_bps) * max($workers / $shards, 1) \
    + 4 * $rtt_ms / 1e3 + 0.5)")
  start=$(python3 -c "import time; print(time.time() + 2)")
  for ((i = 0; i < workers; ++i)); do
    ip netns exec "${tag}-g$i" timeout 600 python3 "$exchange" exchange "$list" "$share" \
      "$iterations" "$start" "$period" "$run_dir/floor-$size-$i.out" \
      >>"$run_dir/floor-g$i.log" 2>&1 &
    exchange_pids+=($!)
    pids+=($!)
  done
  for pid in "${exchange_pids[@]}"; do wait "$pid" || fail "the TCP floor failed at $size"; done
  for pid in "${servers_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  local floor_ms p50 bound
  floor_ms=$(python3 "$exchange" slowest "$run_dir"/floor-"$size"-*.out)
  read -r p50 bound <"$run_dir/p50-$size"
  python3 -c "
print(f'floor  | {$floor_ms:11.2f} ms over plain TCP (x bound {$floor_ms / $bound:.2f}); '
      f'hetps p50 x floor {$p50 / $floor_ms:.2f}')"
}

# Caps every namespace's TCP send buffers at `recommended` bytes (ps-plan's; none: empty) or
# what TCP_WMEM says; sockets opened later follow. Sets `send_buffers` for the rows.
initial_wmem_max=""
cap_send_buffers() {
  local recommended=$1 cap="" ns wmem_min wmem_default wmem_max
  case "$tcp_wmem" in
    auto) cap=$recommended ;;
    off) ;;
    *) cap=$tcp_wmem ;;
  esac
  for ns in "${namespaces[@]}"; do
    # A namespace starts from the kernel's defaults (4096 16384 4194304), not the host's.
    read -r wmem_min wmem_default wmem_max < <(ip netns exec "$ns" sysctl -n net.ipv4.tcp_wmem)
    [ -n "$initial_wmem_max" ] || initial_wmem_max=$wmem_max
    ip netns exec "$ns" sysctl -q -w \
      net.ipv4.tcp_wmem="$wmem_min $wmem_default ${cap:-$initial_wmem_max}"
  done
  local how="the kernel's autotuning"
  [ -n "$cap" ] && how="capped, TCP_WMEM=$tcp_wmem"
  read -r _ _ wmem_max < <(ip netns exec "${namespaces[0]}" sysctl -n net.ipv4.tcp_wmem)
  send_buffers="TCP send buffers: up to $wmem_max bytes ($how)"
}

# 2. Push-pull against the bound.
gpu_bps=$(bits_per_second "$gpu_rate")
rtt_ms=0
[ "$delay_by" != none ] && rtt_ms=$(python3 -c "print(4 * $delay_ms)")
cpu_bps=$(bits_per_second "$cpu_rate")
plan="$(cd "$(dirname "$0")/.." && pwd)/deploy/plan/ps-plan"
printf '%-6s | %11s %11s | %11s %-8s | %6s | %10s %6s | %s\n' size "p50 (ms)" "GB/s/wkr" \
  "bound (ms)" link "x bound" "plan (ms)" "error" partition
for size in $sizes; do
  bytes=$(bytes_of "$size")
  # What ps-plan predicts for this layout, and the partition size it recommends for it.
  plan_json=$("$plan" --params "$((bytes / 4))" --workers "$workers" \
    --worker_nic "$(python3 -c "print($gpu_bps / 1e9)")" --shards "$shards" \
    --shard_nic "$(python3 -c "print($cpu_bps / 1e9)")" --partition_bytes "$partition_bytes" \
    --rtt_ms "$rtt_ms" --json)
  read -r planned partition send_buffer < <(python3 -c '
import json, sys
option = json.load(sys.stdin)["options"][0]
print(option["communication_ms"], option["partition_bytes"],
      option["tcp_send_buffer_bytes"] or "")' <<<"$plan_json")
  cap_send_buffers "$send_buffer"
  start_shards zone
  bench_pids=()
  for ((i = 0; i < workers; ++i)); do
    ip netns exec "${tag}-g$i" "$bench" --servers "$servers" --rank "$i" \
      --world_size "$workers" --transport "$transport" --op pushpull -b "$size" -f 1 \
      --iterations "$iterations" --warmup 2 --timeout_s 120 --partition_bytes "$partition" \
      --json "$run_dir/bench-$size-$i.json" $([ "$check" = 1 ] && echo --check) \
      >"$run_dir/bench-$size-$i.log" 2>&1 &
    bench_pids+=($!)
    pids+=($!)
  done
  for pid in "${bench_pids[@]}"; do wait "$pid" || fail "ps-bench failed at $size"; done
  stop_shards
  python3 - "$run_dir" "$size" "$bytes" "$workers" "$shards" "$gpu_bps" "$cpu_bps" \
    "$partition" "$planned" "$rtt_ms" <<'EOF'
import json, math, statistics, sys
run_dir, size, model, workers, shards, gpu_bps, cpu_bps, partition, planned, rtt = sys.argv[1:]
planned, rtt = float(planned), float(rtt)
model, workers, shards, partition = int(model), int(workers), int(shards), int(partition)
gpu_bps, cpu_bps = float(gpu_bps), float(cpu_bps)
p50 = statistics.median(
    json.load(open(f"{run_dir}/bench-{size}-{rank}.json"))["results"][0]["p50_us"] / 1e3
    for rank in range(workers))
worker_link = model * 8 / gpu_bps * 1e3
# The busiest shard carries its partitions of every worker's share: W/S of the model when the
# partitions spread evenly, more when there are fewer partitions than shards.
partitions = math.ceil(model / partition)
shard_share = math.ceil(partitions / shards) / partitions
shard_link = workers * model * shard_share * 8 / cpu_bps * 1e3
bound, link = max((worker_link, "gpu NIC"), (shard_link, "cpu NIC"))
bound += rtt  # the last pull's answer leaves a shard only after its push arrived
print(f"{size:<6} | {p50:11.2f} {model / p50 / 1e6:11.3f} | {bound:11.2f} {link:<8} | "
      f"{p50 / bound:6.2f} | {planned:10.2f} {(planned - p50) / p50 * 100:+5.0f}% | "
      f"{partition >> 10}K")
with open(f"{run_dir}/p50-{size}", "w") as f:
    f.write(f"{p50} {bound}\n")
EOF
  echo "tcp    | $send_buffers"
  if [ "$floor" = 1 ]; then measure_floor "$size" "$bytes"; fi
done
echo "PASSED"
