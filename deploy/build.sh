#!/usr/bin/env bash
# Configures and builds hetps in ./build (or $BUILD_DIR), RelWithDebInfo.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
cmake --build "$build_dir" -j"$(nproc)"
