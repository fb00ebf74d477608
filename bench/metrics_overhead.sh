#!/bin/bash
# What metrics cost, in one run: ps-bench's push+pull on an embedded cluster with --metrics off
# and on (shards and workers serve /metrics, and time every request, update and operation for
# the latency histograms), interleaved ROUNDS times on fresh shards, over every transport of the
# build.
#
# Prints, per transport and size, the medians over the rounds of the push+pull p50 and GB/s
# with metrics off and on, and their ratios (target: 4 KiB p50 within 3%).
#
#   bench/metrics_overhead.sh [build dir]          # e.g. build
#   ROUNDS=7 PIN=0-1 bench/metrics_overhead.sh build
set -euo pipefail

BUILD="${1:-build}"
ROUNDS="${ROUNDS:-5}"
SIZES_B="${SIZES_B:-4K}"
SIZES_E="${SIZES_E:-4K}"
SIZES_F="${SIZES_F:-16}"
DURATION_S="${DURATION_S:-1}"
WORKERS="${WORKERS:-1}"
PS_BENCH="$BUILD/bench/ps-bench"
HERE="$(cd "$(dirname "$0")" && pwd)"

[[ -x "$PS_BENCH" ]] || { echo "metrics_overhead: $PS_BENCH is not built" >&2; exit 2; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

settings=()
for ((round = 0; round < ROUNDS; ++round)); do settings+=(off on); done
list=$(IFS=,; echo "${settings[*]}")

pin=()
[[ -n "${PIN:-}" ]] && pin=(--pin="$PIN")
"$PS_BENCH" --op=pushpull -b "$SIZES_B" -e "$SIZES_E" -f "$SIZES_F" --workers="$WORKERS" \
  --shards=1 --duration_s="$DURATION_S" --metrics="$list" --check "${pin[@]}" \
  --csv="$WORK/out.csv" \
  >"$WORK/log" 2>&1 || { cat "$WORK/log" >&2; exit 1; }

awk -F, -v setting=metrics -v base=off -v other=on -f "$HERE/compare_settings.awk" "$WORK/out.csv"
