#!/usr/bin/env bash
# Starts a local hetps cluster on 127.0.0.1, trains the example job (linear regression on
# synthetic data) with worker processes against it, prints each worker's loss per step, and
# stops the shards. Ports are picked by the shards and printed.
#
#   deploy/local/cluster.sh [--build_dir build | --prefix DIR] [--shards 2] [--workers 2]
#                           [--steps 30] [--sync bsp|asp] [--transport ucx|grpc]
#                           [--auth_token_file FILE] [--replicas 1|2]
# --prefix runs what `cmake --install` put there (DIR/bin/ps-server and the example job in
# DIR/libexec/hetps); installed (DIR/share/hetps/deploy/cluster.sh), that is the default.
# With --replicas 2 every partition also lives on the next shard, and an etcd is started for
# the run (deploy/local/etcd.sh), where the shards hold their leases.
# The transport defaults to UCX where hetps is built with it. The job's token comes from
# --auth_token_file, else $HETPS_AUTH_TOKEN, else a new random one for this run.
set -euo pipefail

build_dir=build
prefix=""
here=$(cd "$(dirname "$0")" && pwd)
# Installed as <prefix>/share/hetps/deploy/cluster.sh: run the installed programs.
if [ -x "$here/../../../bin/ps-server" ] && [ "$(basename "$(dirname "$here")")" = hetps ]; then
  prefix=$(cd "$here/../../.." && pwd)
fi
shards=2
workers=2
steps=30
sync=bsp
transport=()
token_file=""
replicas=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build_dir) build_dir=$2; prefix=""; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --sync) sync=$2; shift 2 ;;
    --transport) transport=(--transport "$2"); shift 2 ;;
    --auth_token_file) token_file=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [ -n "$prefix" ]; then
  server="$prefix/bin/ps-server"
  worker="$prefix/libexec/hetps/linear_regression"
else
  server="$build_dir/server/ps-server"
  worker="$build_dir/worker/examples/linear_regression"
fi
for program in "$server" "$worker"; do
  if [ ! -x "$program" ]; then
    echo "$program is missing: build first (deploy/build.sh), or give --prefix" >&2
    exit 1
  fi
done

run_dir=$(mktemp -d)
server_pids=()
ETCD_PID=""
cleanup() {
  for pid in "${server_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${server_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  # After the shards, which end their leases there.
  if [ -n "$ETCD_PID" ]; then
    kill "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  rm -rf "$run_dir"
}
trap cleanup EXIT

replication=(--replicas "$replicas")
if [ "$replicas" -gt 1 ]; then
  # shellcheck source=etcd.sh
  source "$here/etcd.sh"
  mkdir -p "$run_dir/etcd"
  start_etcd "$run_dir/etcd"
  echo "etcd for the shards' leases on $ETCD_ENDPOINT"
  replication+=(--etcd "$ETCD_ENDPOINT")
fi

# Only this job's workers may reach its shards: they share a token, given or made here.
if [ -z "$token_file" ]; then
  token_file="$run_dir/job.token"
  (umask 077 && if [ -n "${HETPS_AUTH_TOKEN:-}" ]; then printf '%s\n' "$HETPS_AUTH_TOKEN"; else
    head -c 32 /dev/urandom | base64; fi >"$token_file")
fi
auth=(--auth_token_file "$token_file")

for ((i = 0; i < shards; i++)); do
  # --lifetime_s: the shards end by themselves even if this script is killed.
  "$server" --host 127.0.0.1 --port 0 --port_file "$run_dir/port$i" --shard_index "$i" \
    --num_shards "$shards" --num_workers "$workers" --lifetime_s 900 "${transport[@]}" "${auth[@]}" \
    "${replication[@]}" \
    >"$run_dir/shard$i.log" 2>&1 &
  server_pids+=($!)
done

addresses=()
for ((i = 0; i < shards; i++)); do
  for _ in $(seq 300); do
    [ -s "$run_dir/port$i" ] && break
    if ! kill -0 "${server_pids[$i]}" 2>/dev/null; then
      echo "shard $i failed to start:" >&2
      cat "$run_dir/shard$i.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [ ! -s "$run_dir/port$i" ]; then
    echo "shard $i did not start within 30 s" >&2
    exit 1
  fi
  addresses+=("127.0.0.1:$(cat "$run_dir/port$i")")
  echo "hetps shard $i of $shards listening on ${addresses[$i]}"
done
servers=$(IFS=,; echo "${addresses[*]}")

echo "training: $workers workers, $steps steps, $sync, --servers $servers"
worker_pids=()
for ((r = 0; r < workers; r++)); do
  # Output goes through sed for a prefix; $! is still the worker, so its exit code counts.
  "$worker" --servers "$servers" --rank "$r" --world_size "$workers" --steps "$steps" \
    --sync "$sync" "${transport[@]}" "${auth[@]}" > >(sed -u "s/^/[worker $r] /") 2>&1 &
  worker_pids+=($!)
done
status=0
for pid in "${worker_pids[@]}"; do
  wait "$pid" || status=1
done
if [ "$status" -ne 0 ]; then
  echo "a worker failed; shard logs:" >&2
  cat "$run_dir"/shard*.log >&2
  exit 1
fi
echo "done: the cluster on $servers trained $steps steps and is stopping"
