#!/usr/bin/env bash
# The GPU machine's path through a bundle, on the CPU: packs this build as tests/gpu/bundle.sh
# does for a GPU machine (NO_BUILD=1) into a temporary folder, runs tests/gpu/run.sh from it with
# DRY_RUN=1 and checks that every step ran from the bundle, the Python package's too where the
# build has it.
#
#   tests/gpu/bundle_dry_run_test.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
scripts=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bundle=$work/gpu-bundle

NO_BUILD=1 BUILD_DIR="$build_dir" BUNDLE="$bundle" "$scripts/bundle.sh" >"$work/bundle.log" 2>&1 ||
  { cat "$work/bundle.log"; exit 1; }
out=$(DRY_RUN=1 BUNDLE="$bundle" "$scripts/run.sh" 2>&1) || { echo "$out"; exit 1; }
echo "$out"

fail() { echo "bundle_dry_run_test: $*" >&2; exit 1; }
grep -qF "using $bundle/" <<<"$out" || fail "run.sh did not take the bundle"
grep -q 'worker 0 final loss' <<<"$out" || fail "the MLP example did not finish"
[ "$(grep -c 'ratio device/max' <<<"$out")" = 2 ] || fail "ps-device-bench did not run twice"
if compgen -G "$build_dir/python/hetps/_hetps*.so" >/dev/null; then
  [ -n "$(compgen -G "$bundle/build/python/hetps/_hetps*.so")" ] || fail "no Python module packed"
  grep -qE '^[0-9]+ passed' <<<"$out" || fail "the Python tests did not run from the bundle"
  grep -qE '^hetps-sum +[0-9.]+ ' <<<"$out" || fail "bench/torch_step.py did not run"
fi
