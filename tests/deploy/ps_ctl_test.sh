#!/usr/bin/env bash
# ps-ctl status against two real shards while a worker trains: JSON and table agree with the
# job (serving, tensors, a connected worker, push-pulls per second). ps-ctl drop (with the hetps
# Python module) removes the job's tensors from both shards while the worker runs: the worker
# then fails with NOT_FOUND (not with its rank taken over), and status shows no tensor (after
# ps-ctl checkpoint has committed a checkpoint of the next step while it trained). ps-ctl
# stop ends shard 1 (exit status 0); a shard that is gone is reported unreachable and the status
# fails.
#
#   tests/deploy/ps_ctl_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
ctl="$source_dir/deploy/ctl/ps-ctl"
run_dir=$(mktemp -d)
pids=()
cleanup() {
  kill_started
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"
for shard in 0 1; do
  "$build_dir/server/ps-server" --transport grpc --num_shards 2 --shard_index "$shard" \
    --job_id ctl-test --metrics_port 0 --port_file "$run_dir/port$shard" --lifetime_s 120 \
    --checkpoint_dir "$run_dir/checkpoints" \
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

if compgen -G "$build_dir/python/hetps/_hetps*.so" >/dev/null; then
  servers="127.0.0.1:$(cat "$run_dir/port0"),127.0.0.1:$(cat "$run_dir/port1")"
  ctl_py() { PYTHONPATH="$build_dir/python" /usr/bin/python3 "$ctl" "$@"; }
  # A checkpoint while the worker trains: the next step, committed by both shards.
  ctl_py checkpoint --servers "$servers" --job_id ctl-test >"$run_dir/checkpoint.txt" 2>&1 ||
    fail "checkpoint failed: $(cat "$run_dir/checkpoint.txt")"
  step=$(sed -n 's/^checkpoint of step \([0-9]*\) committed$/\1/p' "$run_dir/checkpoint.txt")
  [ -n "$step" ] || fail "checkpoint: $(cat "$run_dir/checkpoint.txt")"
  [ -f "$run_dir/checkpoints/$(printf 'step-%012d' "$step")/MANIFEST" ] ||
    fail "no committed checkpoint of step $step: $(ls -R "$run_dir/checkpoints")"
  ctl_py drop --servers "$servers" --job_id ctl-test --tensor no-such-tensor --json \
    >"$run_dir/none.json" || fail "drop of an unknown tensor failed: $(cat "$run_dir/none.json")"
  grep -q '"dropped_tensors": 0' "$run_dir/none.json" || fail "$(cat "$run_dir/none.json")"
  if ctl_py drop --servers "$servers" --job_id other-job --all >"$run_dir/other.txt" 2>&1; then
    fail "a drop for another job was accepted"
  fi
  grep -q "ctl-test" "$run_dir/other.txt" || fail "$(cat "$run_dir/other.txt")"
  ctl_py drop --servers "$servers" --job_id ctl-test --all --json >"$run_dir/drop.json" ||
    fail "drop failed: $(cat "$run_dir/drop.json")"
  /usr/bin/python3 - "$run_dir/drop.json" <<'PY' || fail "drop: $(cat "$run_dir/drop.json")"
import json, sys
result = json.load(open(sys.argv[1]))
assert result["dropped_tensors"] >= 2 and result["released_bytes"] > 0, result
assert result["tensors_left"] == [0, 0], result
PY
  worker_pid=${pids[2]}
  await '! kill -0 "$worker_pid" 2>/dev/null' 30
  if wait "$worker_pid"; then fail "the worker went on after its tensors were dropped"; fi
  grep -q "NOT_FOUND" "$run_dir/worker.log" ||
    fail "the worker did not fail with NOT_FOUND: $(tail -5 "$run_dir/worker.log")"
  if grep -q "taken over" "$run_dir/worker.log"; then fail "ps-ctl took the worker's rank over"; fi
  "$ctl" status --metrics "$metrics" --json --interval 0.2 >"$run_dir/after_drop.json"
  grep -q '"tensors": 0' "$run_dir/after_drop.json" || fail "$(cat "$run_dir/after_drop.json")"

  # Stopped as SIGTERM would: the process ends by itself, exit status 0.
  ctl_py stop --servers "$servers" --job_id ctl-test --shard 1 >"$run_dir/stop.txt" ||
    fail "stop failed: $(cat "$run_dir/stop.txt")"
  await '! kill -0 "${pids[1]}" 2>/dev/null' 10
  wait "${pids[1]}" || fail "the stopped shard exited with $?: $(tail -3 "$run_dir/shard1.log")"
  grep -q "stop asked for" "$run_dir/shard1.log" || fail "$(tail -3 "$run_dir/shard1.log")"
else
  echo "ps-ctl drop and stop not checked: the hetps Python module was not built"
  kill -KILL "${pids[1]}"
fi

if "$ctl" status --metrics "$metrics" --interval 0.2 >"$run_dir/after.txt"; then
  fail "status succeeded with a shard gone"
fi
grep -q "unreachable" "$run_dir/after.txt" || fail "the gone shard is not reported: $(cat "$run_dir/after.txt")"
echo "PASSED"
