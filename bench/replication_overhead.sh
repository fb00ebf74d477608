#!/bin/bash
# What replication costs, in one run: ps-bench's push+pull on an embedded cluster of 2 shards
# with --replicas 1 and --replicas 2 (every partition's changes also applied by the next shard
# before the push is acknowledged), interleaved ROUNDS times on fresh shards, over every
# transport of the build. Starts an etcd for the run (deploy/local/etcd.sh).
#
# Prints, per transport and size, the medians over the rounds of the push+pull p50 and GB/s
# with 1 and 2 replicas, and their ratios (targets: 4 KiB p50 at most 1.5x; 64 MiB GB/s at
# least 0.70).
#
#   bench/replication_overhead.sh [build dir]          # e.g. build
#   ROUNDS=5 SIZES_E=16M bench/replication_overhead.sh build
set -euo pipefail

BUILD="${1:-build}"
ROUNDS="${ROUNDS:-3}"
SIZES_B="${SIZES_B:-4K}"
SIZES_E="${SIZES_E:-64M}"
SIZES_F="${SIZES_F:-16384}"
DURATION_S="${DURATION_S:-1}"
WORKERS="${WORKERS:-1}"
PS_BENCH="$BUILD/bench/ps-bench"
HERE="$(cd "$(dirname "$0")" && pwd)"

[[ -x "$PS_BENCH" ]] || { echo "replication_overhead: $PS_BENCH is not built" >&2; exit 2; }

WORK="$(mktemp -d)"
ETCD_PID=""
trap '[ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null; wait; rm -rf "$WORK"' EXIT
# shellcheck source=../deploy/local/etcd.sh
source "$HERE/../deploy/local/etcd.sh"
mkdir -p "$WORK/etcd"
start_etcd "$WORK/etcd"

settings=()
for ((round = 0; round < ROUNDS; ++round)); do settings+=(1 2); done
list=$(IFS=,; echo "${settings[*]}")

"$PS_BENCH" --op=pushpull -b "$SIZES_B" -e "$SIZES_E" -f "$SIZES_F" --workers="$WORKERS" \
  --shards=2 --duration_s="$DURATION_S" --replicas="$list" --etcd="$ETCD_ENDPOINT" --check \
  --csv="$WORK/out.csv" \
  >"$WORK/log" 2>&1 || { cat "$WORK/log" >&2; exit 1; }

awk -F, -v setting=replicas -v base=1 -v other=2 -f "$HERE/compare_settings.awk" "$WORK/out.csv"
