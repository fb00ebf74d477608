#!/usr/bin/env bash
# Proves that the build types the test suite does not run under (Release and Debug; the suite
# builds RelWithDebInfo) configure and compile, tests and examples included, with warnings as
# errors. Builds into build-release/ and build-debug/ (or $BUILD_TYPES_DIR/<type>).
#
#   tests/build_types.sh              # Release and Debug
#   tests/build_types.sh Release      # one of them
#   RUN_TESTS=1 tests/build_types.sh  # and run the suite in each
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh

types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Release Debug)
for type in "${types[@]}"; do
  dir=${BUILD_TYPES_DIR:+$BUILD_TYPES_DIR/}build-${type,,}
  echo "== $type in $dir"
  start=$SECONDS
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DHETPS_WERROR=ON ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$dir" -j"$(nproc)"
  echo "== $type built in $((SECONDS - start)) s"
  if [ "${RUN_TESTS:-0}" = 1 ]; then
    ctest --test-dir "$dir" -j"$(nproc)" --output-on-failure
  fi
done
