#!/usr/bin/env bash
# Metrics end to end: two shards (ps-server --metrics_port) and a worker (the example job with
# --metrics_port) train while a real Prometheus server scrapes all three every second. promtool
# checks each page, and Prometheus' query API must return the shards' push-pull counter and
# latency quantiles of the shards and the worker computed from the scraped histograms. The job
# must still train to the end. The Grafana dashboard's queries (deploy/grafana/) are checked
# against the same Prometheus (tests/deploy/check_dashboard.py).
#
#   tests/integration/prometheus_test.sh SOURCE_DIR BUILD_DIR [grpc|ucx]
# Skipped (exit 77) without Debian's prometheus package (prometheus, promtool).
set -euo pipefail

source_dir=$1
build_dir=$2
transport=${3:-grpc}
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null ||
  ! command -v curl >/dev/null; then
  echo "skipped: needs prometheus and promtool (Debian's prometheus package) and curl"
  exit 77
fi
server="$build_dir/server/ps-server"
worker="$build_dir/worker/examples/linear_regression"

run_dir=$(mktemp -d)
pids=()
cleanup() {
  kill_started
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"
# The metrics address a program logged ("... http://127.0.0.1:PORT/metrics").
metrics_address() {
  grep -o 'http://[0-9.]*:[0-9]*/metrics' "$1" | head -n 1 | sed 's|http://||; s|/metrics||'
}

for shard in 0 1; do
  "$server" --transport "$transport" --num_shards 2 --shard_index "$shard" --num_workers 1 \
    --metrics_port 0 --port_file "$run_dir/port$shard" --lifetime_s 300 \
    >"$run_dir/shard$shard.log" 2>&1 &
  pids+=($!)
done
await '[ -s "$run_dir/port0" ] && [ -s "$run_dir/port1" ]' 30
servers="127.0.0.1:$(cat "$run_dir/port0"),127.0.0.1:$(cat "$run_dir/port1")"
shard_metrics=("$(metrics_address "$run_dir/shard0.log")" "$(metrics_address "$run_dir/shard1.log")")

# Long enough for several scrapes: 1500 steps of at least 20 ms.
"$worker" --servers "$servers" --transport "$transport" --steps 1500 --compute_ms 20 \
  --metrics_port 0 --metrics_host 127.0.0.1 >"$run_dir/worker.log" 2>&1 &
worker_pid=$!
pids+=($worker_pid)
await '[ -n "$(metrics_address "$run_dir/worker.log")" ]' 30
worker_metrics=$(metrics_address "$run_dir/worker.log")

for target in "${shard_metrics[@]}" "$worker_metrics"; do
  curl -sf "http://$target/metrics" >"$run_dir/page.txt" || fail "cannot fetch http://$target/metrics"
  promtool check metrics <"$run_dir/page.txt" || fail "promtool rejects http://$target/metrics"
done
echo "promtool accepts the pages of both shards and the worker"

prometheus_port=$(free_port)
cat >"$run_dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: hetps-shard
    static_configs:
      - targets: ['${shard_metrics[0]}', '${shard_metrics[1]}']
  - job_name: hetps-worker
    static_configs:
      - targets: ['$worker_metrics']
EOF
promtool check config "$run_dir/prometheus.yml" >/dev/null || fail "promtool rejects the config"
prometheus --config.file="$run_dir/prometheus.yml" --storage.tsdb.path="$run_dir/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$run_dir/prometheus.log" 2>&1 &
pids+=($!)

# The value of a PromQL query's first result, or nothing (no result yet, NaN).
query() {
  curl -sfG "http://127.0.0.1:$prometheus_port/api/v1/query" --data-urlencode "query=$1" |
    python3 -c '
import json, math, sys
result = json.load(sys.stdin)["data"]["result"]
if result and not math.isnan(float(result[0]["value"][1])):
    print(result[0]["value"][1])' 2>/dev/null || true
}
positive() { python3 -c "import sys; sys.exit(0 if float('$1' or 0) > 0 else 1)"; }

pushes='sum(hetps_shard_requests_total{method="push_pull",code="OK"})'
shard_p50='histogram_quantile(0.5, sum by (le) (rate(hetps_shard_request_duration_seconds_bucket{method="push_pull"}[10s])))'
apply_p99='histogram_quantile(0.99, sum by (le) (rate(hetps_shard_optimizer_apply_duration_seconds_bucket[10s])))'
worker_p50='histogram_quantile(0.5, sum by (le) (rate(hetps_client_operation_duration_seconds_bucket{op="push_pull"}[10s])))'
targets_up='count(up == 1)'
await 'positive "$(query "$pushes")"' 60
await '[ "$(query "$targets_up")" = 3 ]' 60
await 'positive "$(query "$shard_p50")"' 60
await 'positive "$(query "$apply_p99")"' 60
await 'positive "$(query "$worker_p50")"' 60
echo "Prometheus: push-pull requests $(query "$pushes"), shard p50 $(query "$shard_p50") s," \
  "apply p99 $(query "$apply_p99") s, worker p50 $(query "$worker_p50") s"
# The worker's waits on the PS are there too.
await 'positive "$(query "hetps_client_ps_wait_seconds_total")"' 30
python3 "$source_dir/tests/deploy/check_dashboard.py" "$source_dir" \
  "http://127.0.0.1:$prometheus_port" || fail "the Grafana dashboard does not fit the metrics"

await '! kill -0 "$worker_pid" 2>/dev/null' 240
wait "$worker_pid" || fail "the worker failed"
grep -q "final loss" "$run_dir/worker.log" || fail "the worker did not finish training"
echo "PASSED"
