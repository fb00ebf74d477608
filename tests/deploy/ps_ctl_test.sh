#!/usr/bin/env bash
# ps-ctl status against two real shards while a worker trains: JSON and table agree with the
# job (serving, tensors, a connected worker, push-pulls per second); a shard that is gone is
# reported unreachable and the status fails.
#
#   tests/deploy/ps_ctl_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
ctl="$source_dir/deploy/ctl/ps-ctl"
run_dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"
for shard in 0 1; do
  "$build_dir/server/ps-server" --transport grpc --num_shards 2 --shard_index "$shard" \
    --job_id ctl-test --metrics_port 0 --port_file "$run_dir/port$shard" --lifetime_s 120 \
    >"$run_dir/shard$shard.log" 2>&1 &
  pids+=($!)
done
await '[ -s "$run_dir/port0" ] && [ -s "$run_dir/port1" ]' 30
metrics=$(grep -ho 'http://[0-9.]*:[0-9]*/metrics' "$run_dir/shard0.log" "$run_dir/shard1.log" |
  sed 's|http://||; s|/metrics||' | paste -sd, -)
"$build_dir/worker/examples/linear_regression" \
  --servers "127.0.0.1:$(cat "$run_dir/port0"),127.0.0.1:$(cat "$run_dir/port1")" \
  --job_id ctl-test --transport grpc --steps 2000 --compute_ms 5 >"$run_dir/worker.log" 2>&1 &
pids+=($!)
await 'grep -q "step 20 " "$run_dir/worker.log" 2>/dev/null' 60

"$ctl" status --metrics "$metrics" --json --interval 0.5 >"$run_dir/status.json" ||
  fail "status failed: $(cat "$run_dir/status.json")"
python3 - "$run_dir/status.json" <<'PY' || fail "status does not fit the job: $(cat "$run_dir/status.json")"
import json, sys
status = json.load(open(sys.argv[1]))
shards = status["shards"]
assert status["healthy"] and len(shards) == 2
assert sorted(s["shard"] for s in shards) == [0, 1]
assert all(s["serving"] and s["job"] == "ctl-test" and s["num_shards"] == 2 for s in shards)
assert sum(s["tensors"] for s in shards) >= 2            # the weight and the bias
assert max(s["connected_workers"] for s in shards) == 1
assert max(s["max_version"] for s in shards) >= 20
assert sum(s["requests_per_second"]["push_pull"] for s in shards) > 0
assert all(s["errors_per_second"] == 0 for s in shards)
PY
table=$("$ctl" status --metrics "$metrics" --interval 0.2)
grep -q "ctl-test" <<<"$table" || fail "the table names no job: $table"
echo "$table"

kill -KILL "${pids[1]}"
if "$ctl" status --metrics "$metrics" --interval 0.2 >"$run_dir/after.txt"; then
  fail "status succeeded with a shard gone"
fi
grep -q "unreachable" "$run_dir/after.txt" || fail "the gone shard is not reported: $(cat "$run_dir/after.txt")"
echo "PASSED"
