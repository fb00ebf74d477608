#!/usr/bin/env bash
# Failover and rejoin times with --replicas 2: three ps-server processes and etcd on loopback,
# ps-failover-bench training a probe tensor step after step while each shard holds
# --shard_bytes of model. The script kills shard 1 (SIGKILL), restarts it empty, waits until
# shards 0 and 2 have copied it the partitions it keeps copies of, then kills shard 2 (shard 1
# takes its own partitions back from those copies), and prints:
#   failover_1_ms, failover_2_ms   last step acknowledged before each kill to the first after
#   rejoin_ms                      restart of shard 1 to its being a full backup again
#   copy_ms_from_shard_0/2         how long each copying shard took (its log), of which
#   declare_ms_from_shard_0        shard 1 set the tensors up (allocating its copies)
#   model_declare_ms               the job's declaration of the model (every shard setting
#                                  up its partitions and, replicated, its copies)
#   median_step_ms, longest_step_during_rejoin_ms
#   link_ms                        --shard_bytes over the link at the transport's raw floor
#                                  (ps-bench's push floor at the partition size)
#
#   bench/failover_rejoin.sh [--build_dir build] [--transport grpc|ucx] [--shard_bytes 1G]
#                            [--lease_s 2] [--partition_bytes 16M] [--init zeros|normal]
set -euo pipefail

build_dir=build
transport=grpc
shard_bytes=1G
partition_bytes=16M
lease_s=2
init=zeros
while [ $# -gt 0 ]; do
  case "$1" in
    --build_dir) build_dir=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --shard_bytes) shard_bytes=$2; shift 2 ;;
    --partition_bytes) partition_bytes=$2; shift 2 ;;
    --lease_s) lease_s=$2; shift 2 ;;
    --init) init=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

bytes() { numfmt --from=iec "$1"; }
server="$build_dir/server/ps-server"
driver="$build_dir/bench/ps-failover-bench"
bench="$build_dir/bench/ps-bench"
for program in "$server" "$driver" "$bench"; do
  [ -x "$program" ] || { echo "$program is missing: build first" >&2; exit 1; }
done

run_dir=$(mktemp -d)
declare -a shard_pids=(0 0 0) ports=(0 0 0)
driver_pid=""
ETCD_PID=""
cleanup() {
  for pid in "${shard_pids[@]}" $driver_pid $ETCD_PID; do
    [ "$pid" != 0 ] && kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  [ -n "${FAILOVER_LOGS:-}" ] && cp "$run_dir"/*.log "$run_dir/acks" "$FAILOVER_LOGS"/ 2>/dev/null
  rm -rf "$run_dir"
}
trap cleanup EXIT
now_ms() { date +%s%3N; }
# Waits (up to $2 s) until the command in $1 succeeds.
await() {
  local deadline=$(($(date +%s) + $2))
  until eval "$1"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "timed out waiting for: $1" >&2
      tail -n 20 "$run_dir"/shard*.log "$run_dir/driver.log" >&2
      exit 1
    fi
    sleep 0.02
  done
}

source "$(dirname "$0")/../deploy/local/etcd.sh"
mkdir -p "$run_dir/etcd"
start_etcd "$run_dir/etcd"

start_shard() {  # index, port (0: pick one)
  "$server" --host 127.0.0.1 --port "$2" --port_file "$run_dir/port$1" --shard_index "$1" \
    --num_shards 3 --num_workers 1 --transport "$transport" --replicas 2 \
    --etcd "$ETCD_ENDPOINT" --lease_s "$lease_s" --lifetime_s 1800 >>"$run_dir/shard$1.log" 2>&1 &
  shard_pids[$1]=$!
}
for i in 0 1 2; do start_shard "$i" 0; done
for i in 0 1 2; do
  await "[ -s $run_dir/port$i ]" 30
  ports[$i]=$(cat "$run_dir/port$i")
done
servers="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"

acks="$run_dir/acks"
"$driver" --servers "$servers" --transport "$transport" --shard_bytes "$(bytes "$shard_bytes")" \
  --partition_bytes "$(bytes "$partition_bytes")" --init "$init" --ack_log "$acks" \
  --stop_file "$run_dir/stop" >"$run_dir/driver.log" 2>&1 &
driver_pid=$!
await "[ -s $acks ] && [ \$(wc -l <$acks) -ge 50 ]" 300

# The pause a kill costs: the longest wait between acknowledged steps from the last one before
# the kill until steps flow again after the takeover (`$2` logs it).
kill_and_measure() {  # shard, log of the shard that takes over
  local killed_at resumed_at
  kill -KILL "${shard_pids[$1]}"
  killed_at=$(now_ms)
  await "grep -q 'shard $1 is gone' $2" 120
  resumed_at=$(now_ms)
  await "[ \$(tail -n 1 $acks) -gt $resumed_at ]" 120
  awk -v t="$killed_at" '$1 <= t { prev = $1; next }
                         prev { if ($1 - prev > m) m = $1 - prev; prev = $1 } END { print m + 0 }' "$acks"
}
failover_1=$(kill_and_measure 1 "$run_dir/shard2.log")
shard_pids[1]=0

: >"$run_dir/shard1.log"
restarted_at=$(now_ms)
start_shard 1 "${ports[1]}"
await "grep -q 'shard 1 is a full backup of the partitions placed on shard 0 again' $run_dir/shard0.log" 600
await "grep -q 'shard 1 is a full backup of the partitions placed on shard 1 again' $run_dir/shard2.log" 600
rejoined_at=$(now_ms)
# A duration in absl's format ("1.5s", "850ms", "1m2.5s") in ms.
to_ms() {
  awk '{ v = $1; ms = 0
         if (v ~ /ms$/) { sub(/ms$/, "", v); ms = v }
         else { if (v ~ /m/) { split(v, p, "m"); ms += p[1] * 60000; v = p[2] }
                sub(/s$/, "", v); ms += v * 1000 }
         printf "%.0f", ms }'
}
copy_ms() {  # log: "... full backup ... again (N partitions copied in 1.234s)"
  sed -n 's/.*shard 1 is a full backup.*copied in \([^)]*\)).*/\1/p' "$1" | tail -n 1 | to_ms
}
declare_ms() {  # log: "shard 1 declared N tensors in 1.234s"
  sed -n 's/.*shard 1 declared [0-9]* tensors in \(.*\)$/\1/p' "$1" | tail -n 1 | to_ms
}
model_declare=$(sed -n 's/^model declared in \(.*\)$/\1/p' "$run_dir/driver.log" | to_ms)
copy_0=$(copy_ms "$run_dir/shard0.log")
copy_2=$(copy_ms "$run_dir/shard2.log")
declare_0=$(declare_ms "$run_dir/shard0.log")
failover_2=$(kill_and_measure 2 "$run_dir/shard0.log")
shard_pids[2]=0
touch "$run_dir/stop"
wait "$driver_pid" || { cat "$run_dir/driver.log" >&2; exit 1; }
driver_pid=""

steps=$(awk 'NR > 1 { print $1 - prev } { prev = $1 }' "$acks")
median_step=$(sort -n <<<"$steps" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
longest_during_rejoin=$(awk -v a="$restarted_at" -v b="$rejoined_at" \
  'NR > 1 && $1 > a && prev < b { d = $1 - prev; if (d > m) m = d } { prev = $1 } END { print m + 0 }' "$acks")

# The link: ps-bench's raw floor for a push of one partition, shards and worker in one process.
"$bench" --transport "$transport" --shards 1 --workers 1 --op push -b "$partition_bytes" \
  -e "$partition_bytes" --duration_s 1 --csv "$run_dir/floor.csv" >/dev/null
floor_gbps=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "floor_gbps") c = i; next }
                      { print $c; exit }' "$run_dir/floor.csv")
link_ms=$(awk -v b="$(bytes "$shard_bytes")" -v g="$floor_gbps" 'BEGIN { printf "%.0f", b / (g * 1e6) }')

echo "transport=$transport shard_bytes=$shard_bytes partition_bytes=$partition_bytes lease_s=$lease_s init=$init"
echo "model_declare_ms=$model_declare"
echo "failover_1_ms=$failover_1"
echo "failover_2_ms=$failover_2"
echo "rejoin_ms=$((rejoined_at - restarted_at))"
echo "copy_ms_from_shard_0=$copy_0"
echo "copy_ms_from_shard_2=$copy_2"
echo "declare_ms_from_shard_0=$declare_0"
echo "median_step_ms=$median_step"
echo "longest_step_during_rejoin_ms=$longest_during_rejoin"
echo "link_floor_gbps=$floor_gbps"
echo "link_ms=$link_ms"
