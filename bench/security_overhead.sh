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
awk -F, '
  NR == 1 { for (i = 1; i <= NF; ++i) column[$i] = i; next }
  {
    key = $column["transport"] SUBSEP $column["bytes"] SUBSEP $column["security"]
    p50[key] = p50[key] " " $column["p50_us"]
    gbps[key] = gbps[key] " " $column["gbps"]
    if (!($column["transport"] SUBSEP $column["bytes"] in seen)) {
      seen[$column["transport"] SUBSEP $column["bytes"]] = 1
      order[++rows] = $column["transport"] SUBSEP $column["bytes"]
    }
  }
  function median(list,    values, n, i, j, t) {
    n = split(list, values, " ")
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j)
      if (values[j] + 0 < values[i] + 0) { t = values[i]; values[i] = values[j]; values[j] = t }
    return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
  }
  END {
    printf "%-9s %9s | %12s %14s %6s | %10s %12s %6s\n", "transport", "bytes",
           "p50 off(us)", "p50 token+tls", "x p50", "GB/s off", "GB/s tok+tls", "x GB/s"
    for (r = 1; r <= rows; ++r) {
      split(order[r], part, SUBSEP)
      off = order[r] SUBSEP "off"; on = order[r] SUBSEP "token+tls"
      p_off = median(p50[off]); p_on = median(p50[on])
      g_off = median(gbps[off]); g_on = median(gbps[on])
      printf "%-9s %9d | %12.1f %14.1f %6.2f | %10.3f %12.3f %6.2f\n", part[1], part[2],
             p_off, p_on, p_on / p_off, g_off, g_on, g_on / g_off
    }
  }' "$WORK/out.csv"
