#!/usr/bin/env bash
# Long fuzzing runs: builds tests/fuzz/ with clang, libFuzzer, ASan and UBSan into build-fuzz/
# (or $BUILD_DIR) and runs each target (or those named) for $RUNS inputs on a copy of its seed
# corpus. Prints libFuzzer's final figures; exits non-zero on the first crash or sanitizer
# report (the reproducer is left in the work directory it names).
#
#   tests/fuzz/run.sh                          # every target, 1,000,000 inputs each
#   RUNS=20000 tests/fuzz/run.sh shard_fuzzer
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/install_deps.sh clang-15 libfuzzer-15-dev
dir=${BUILD_DIR:-build-fuzz}
runs=${RUNS:-1000000}
CC=clang-15 CXX=clang++-15 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHETPS_FUZZ=ON -DHETPS_SANITIZE=ON -DHETPS_WITH_CUDA=OFF -DHETPS_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)" --target fuzz_targets

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for corpus in tests/fuzz/corpus/*/; do
    name=$(basename "$corpus")
    [ -x "$dir/tests/$name" ] && targets+=("$name")
  done
fi
for name in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/"
  echo "== $name: $runs inputs (work corpus $work)"
  start=$SECONDS
  (cd "$work" && "$OLDPWD/$dir/tests/$name" -runs="$runs" -print_final_stats=1 -timeout=60 \
     -rss_limit_mb=4096 "$work" 2>&1) | grep -E "^(stat::|Done|==[0-9]+==ERROR|SUMMARY)" || true
  echo "== $name: $((SECONDS - start)) s"
  if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* >/dev/null 2>&1; then
    echo "== $name: reproducers in $work" >&2
    exit 1
  fi
  rm -rf "$work"
done
