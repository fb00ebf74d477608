#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU (under 5 minutes on 16 cores): builds with CUDA
# and NCCL (or takes gpu-bundle/ from tests/gpu/bundle.sh, for machines without hetps's Debian
# packages), runs the GPU tests (none may skip), trains the MLP example from GPU memory on a local
# two-shard cluster, runs the Python tests with CUDA tensors, measures staging overlap with
# ps-device-bench (256 MiB push+pull), and last (the longest) times a PyTorch step of a 100 MiB
# model in GPU memory through hetps.torch against gloo's all-reduce (bench/torch_step.py).
#
#   tests/gpu/run.sh     # on the GPU machine
#
# BUILD_DIR (default build-gpu) and JOBS (default: all cores) steer the build; NO_BUILD=1 uses
# BUILD_DIR as it is; BUNDLE (default gpu-bundle; empty: never) names the prebuilt bundle.
# DRY_RUN=1 runs every step without a GPU (tests skip, the example and the benchmark on the CPU):
# the suite does that so the script keeps working.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
bundle=${BUNDLE-gpu-bundle}
dry_run=${DRY_RUN:-0}
export HETPS_LOG_LEVEL=${HETPS_LOG_LEVEL:-warning}
device=cuda
memory=cuda
bench_bytes=268435456
mlp_size=(--hidden 1024 --inputs 512 --batch 256 --steps 200)
torch_step=(--model_mb 100 --steps 6 --warmup 2 --rounds 1 --transport ucx --way_timeout_s 90)
if [ "$dry_run" = 1 ]; then
  device=cpu
  memory=host
  bench_bytes=16777216
  mlp_size=(--steps 50)
  torch_step=(--model_mb 4 --steps 2 --warmup 1 --rounds 1 --ways "allreduce,hetps-sum")
elif ! nvidia-smi -L; then
  echo "tests/gpu/run.sh: no NVIDIA GPU here (nvidia-smi failed)" >&2
  exit 2
fi
if [ -n "$bundle" ] && [ -d "$bundle/build" ]; then
  # Built elsewhere by tests/gpu/bundle.sh: its libraries, CUDA's from the toolkit or from the
  # Python wheels (nvidia-*) where the toolkit lacks them.
  bundle=$(cd "$bundle" && pwd)
  build_dir=$bundle/build
  library_path="$bundle/lib"
  site=$(python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null || true)
  for library in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    # shellcheck disable=SC2086 # $site is a list of folders
    found=$(find /usr/local/cuda/lib64/ $site -name "$library" 2>/dev/null | head -1 || true)
    if [ -n "$found" ]; then library_path="$library_path:$(dirname "$found")"; fi
  done
  # awk reads to the end: leaving early would end ldconfig with SIGPIPE, failing the pipeline.
  system_cxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ && !found {found = $NF}
                                  END {print found}')
  if [ -z "$system_cxx" ] || ! grep -q GLIBCXX_3.4.29 "$system_cxx"; then
    library_path="$library_path:$bundle/lib/cxx"
  fi
  export LD_LIBRARY_PATH="$library_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$bundle/lib/ucx"
  if missing=$(ldd "$build_dir"/tests/gpu_test "$build_dir"/server/ps-server | grep 'not found'); then
    echo "tests/gpu/run.sh: libraries missing for $bundle/:" >&2
    echo "$missing" >&2
    exit 1
  fi
  echo "using $bundle/ (built by tests/gpu/bundle.sh)"
elif [ "${NO_BUILD:-0}" != 1 ]; then
  ./deploy/install_deps.sh
  mkdir -p "$build_dir"
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETPS_WITH_CUDA=ON \
    -DHETPS_WITH_NCCL=ON -DHETPS_BUILD_EXAMPLES=ON >"$build_dir/configure.log" 2>&1 ||
    { cat "$build_dir/configure.log"; exit 1; }
  cmake --build "$build_dir" -j"$jobs" --target gpu_test device_client_test mlp_training \
    ps-server ps-device-bench
  cmake --build "$build_dir" -j"$jobs" --target _hetps >/dev/null 2>&1 ||
    echo "no Python module in this build (HETPS_WITH_PYTHON off, or pybind11 missing)"
fi
build_dir=$(cd "$build_dir" && pwd)

# Every step runs, each bounded, so that one run on a lent machine reports all of them; the
# script fails at the end if any did.
failed=()

echo "== GPU tests (each in its own process, 90 s at most)"
tests=$("$build_dir/tests/gpu_test" --gtest_list_tests |
  awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}')
for test in $tests; do
  status=0
  out=$(HETPS_BINARY_DIR="$build_dir" timeout 90 "$build_dir/tests/gpu_test" \
    --gtest_filter="$test" 2>&1) || status=$?
  if [ "$status" != 0 ]; then
    echo "$out" | tail -30
    echo "FAILED: $test (exit $status$([ "$status" = 124 ] && echo ': timed out'))"
    failed+=("gpu_test $test")
    continue
  fi
  echo "$out" | grep -E '^\[ +(OK|SKIPPED) +\] [^ ]+ \('
  if [ "$dry_run" != 1 ] && grep -q '^\[  SKIPPED \]' <<<"$out"; then
    echo "$out" | grep -A3 '^\[  SKIPPED \]' || true
    failed+=("gpu_test $test skipped on a GPU machine")
  fi
done
HETPS_BINARY_DIR="$build_dir" timeout 120 "$build_dir/tests/device_client_test" \
  --gtest_brief=1 || failed+=(device_client_test)

echo "== MLP example from $device memory, 2 shards, 2 workers"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for i in 0 1; do
  "$build_dir/server/ps-server" --port 0 --port_file "$work/port$i" --shard_index "$i" \
    --num_shards 2 --num_workers 2 --lifetime_s 120 >"$work/shard$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do [ -s "$work/port0" ] && [ -s "$work/port1" ] && break; sleep 0.1; done
servers="127.0.0.1:$(cat "$work/port0"),127.0.0.1:$(cat "$work/port1")"
for rank in 0 1; do
  timeout 120 "$build_dir/worker/examples/mlp_training" --servers "$servers" --rank "$rank" \
    --world_size 2 --device="$device" "${mlp_size[@]}" \
    >"$work/worker$rank.log" 2>&1 &
  pids+=($!)
done
if wait "${pids[2]}" && wait "${pids[3]}"; then
  grep -E 'training on|step (0|1|10|100|199) |final' "$work/worker0.log"
else
  tail -20 "$work"/worker*.log "$work"/shard*.log
  failed+=("the MLP example")
fi

echo "== Python: GPU arrays through the device client"
# Debian's interpreter here; on a GPU machine without it, the first python3 that has torch and
# loads the module (built for one Python version: tests/gpu/bundle.sh's PYTHON).
python=
for candidate in ${PYTHON:-} /usr/bin/python3 python3; do
  if PYTHONPATH="$build_dir/python" "$candidate" -c "import numpy, pytest, torch, hetps" 2>/dev/null
  then python=$candidate; break; fi
done
if [ -n "$python" ]; then
  # Debian's torch has no CUDA: its tests skip; the __cuda_array_interface__ ones must run.
  out=$(PYTHONPATH="$build_dir/python:$PWD/tests/python" HETPS_PS_SERVER="$build_dir/server/ps-server" \
    timeout 240 "$python" -m pytest -q -p no:cacheprovider -rs tests/python/test_device.py 2>&1) ||
    { echo "$out" | tail -60; failed+=("tests/python/test_device.py"); }
  echo "with $python ($("$python" --version 2>&1))"
  echo "$out" | tail -8
  if [ "$dry_run" != 1 ] && grep -q "SKIPPED.*no CUDA device here" <<<"$out"; then
    failed+=("tests/python/test_device.py: the GPU array tests were skipped on a GPU machine")
  fi
elif [ "$dry_run" != 1 ] && compgen -G "$build_dir/python/hetps/_hetps*.so" >/dev/null; then
  failed+=("no python3 with numpy, pytest and torch loads $build_dir's module (built for another
    Python version? tests/gpu/bundle.sh's PYTHON)")
else
  echo "skipped: no python3 here with numpy, pytest and torch that loads $build_dir's module"
fi

echo "== Staging overlap: $((bench_bytes >> 20)) MiB push+pull"
for transport in ucx grpc; do
  timeout 180 "$build_dir/bench/ps-device-bench" --memory="$memory" --bytes="$bench_bytes" \
    --reps=5 --transport="$transport" || failed+=("ps-device-bench --transport=$transport")
done

echo "== A PyTorch step from $device memory: hetps.torch against gloo's all-reduce"
if [ -n "$python" ]; then
  timeout 400 "$python" bench/torch_step.py --build "$build_dir" --device "$device" \
    "${torch_step[@]}" || failed+=("bench/torch_step.py --device $device")
else
  echo "skipped: no python3 with torch that loads the module (above)"
fi

if [ "${#failed[@]}" != 0 ]; then
  echo "tests/gpu/run.sh: ${#failed[@]} step(s) failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "tests/gpu/run.sh: every step passed"
