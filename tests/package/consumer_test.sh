#!/usr/bin/env bash
# Packaging: installs hetps into a temporary prefix, builds the README's embedding sample as a
# project of its own against the installed package (find_package(hetps)), and runs it against a
# shard started from the installed ps-server.
#
#   consumer_test.sh <hetps build dir> [extra compiler and linker flags, e.g. sanitizers]
set -euo pipefail
build_dir=$(cd "$1" && pwd)
extra_flags=${2:-}
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/ps-server"
test -f "$work/prefix/include/hetps/worker/client.h"

mkdir "$work/consumer"
cp "$build_dir/readme/CMakeLists.txt" "$build_dir/readme/train.cc" "$work/consumer/"
# As on a machine without CUDA: the sample uses hetps::client only, which must not need it.
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_FLAGS="$extra_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$extra_flags" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
if grep -rq "libnccl\|cudart" "$work/consumer/build/CMakeFiles/train.dir/link.txt"; then
  echo "the client-only sample links CUDA or NCCL"
  exit 1
fi
cmake --build "$work/consumer/build" -j2 >/dev/null

"$work/prefix/bin/ps-server" --port 0 --port_file "$work/port" --lifetime_s 120 \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
  [ -s "$work/port" ] && break
  sleep 0.1
done
output=$("$work/consumer/build/train" "127.0.0.1:$(cat "$work/port")")
echo "$output"
# The installed local-cluster script runs the installed programs.
cluster=$("$work/prefix/share/hetps/deploy/cluster.sh" --steps 3 --transport grpc)
grep -q "worker 1.*final loss" <<<"$cluster" || { echo "$cluster"; exit 1; }
# Weights start at 1 2 3 4; three SGD steps of lr 0.5 on a gradient of ones take 1.5 off each.
grep -q "step 2: weights -0.50 0.50 1.50 2.50" <<<"$output"
