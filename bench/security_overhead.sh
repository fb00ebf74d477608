#!/bin/bash
# What the job's token and TLS cost, in one run: ps-bench's push+pull on an embedded cluster with
# security off and with token+TLS, the settings interleaved ROUNDS times on fresh shards, over
# every transport of the build. Certificates are made for the run by deploy/tls/make_certs.sh.
#
# Prints, per transport and size, the medians over the rounds of the push+pull p50 and GB/s
# with security off and with token+tls, and the ratio of token+tls to off (p50: lower is
# better, 1.00 means free; GB/s: higher is better).
#
#   bench/security_overhead.sh [build dir]          # e.g. build
#   ROUNDS=5 SIZES_E=64M bench/security_overhead.sh build
set -euo pipefail

BUILD="${1:-build}"
ROUNDS="${ROUNDS:-3}"
SIZES_B="${SIZES_B:-4K}"
SIZES_E="${SIZES_E:-16M}"
SIZES_F="${SIZES_F:-16}"
DURATION_S="${DURATION_S:-1}"
PS_BENCH="$BUILD/bench/ps-bench"
HERE="$(cd "$(dirname "$0")" && pwd)"

[[ -x "$PS_BENCH" ]] || { echo "security_overhead: $PS_BENCH is not built" >&2; exit 2; }
command -v openssl >/dev/null || { echo "security_overhead: openssl is missing" >&2; exit 2; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$HERE/../deploy/tls/make_certs.sh" "$WORK/tls" 127.0.0.1 >/dev/null

settings=()
for ((round = 0; round < ROUNDS; ++round)); do settings+=(off token+tls); done
list=$(IFS=,; echo "${settings[*]}")

"$PS_BENCH" --op=pushpull -b "$SIZES_B" -e "$SIZES_E" -f "$SIZES_F" --workers=1 --shards=1 \
  --duration_s="$DURATION_S" --security="$list" --tls_dir="$WORK/tls" --csv="$WORK/out.csv" \
  >"$WORK/log" 2>&1 || { cat "$WORK/log" >&2; exit 1; }

# Medians over the rounds, per transport, size and setting; then the ratios.
awk -F, -v setting=security -v base=off -v other=token+tls -f "$HERE/compare_settings.awk" \
  "$WORK/out.csv"
