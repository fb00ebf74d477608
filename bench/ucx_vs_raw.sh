#!/bin/bash
# hetps over UCX against raw UCX, in one run, with the same CPU pinning: the server side (a
# ps-server shard, or ucx_perftest's responder) on one CPU, the client side (ps-bench, or
# ucx_perftest's initiator) on another. Both over shared memory (UCX's choice between two local
# processes) and over TCP (UCX_TLS=tcp), and in both wait modes: sleeping when idle (hetps's
# default; ucx_perftest -E sleep) and busy polling (--ucx_busy_poll; ucx_perftest -E poll).
#
# Prints, per transport and mode, the medians over the rounds of
#   raw UCX AM round trip p50 (ucx_perftest ucp_am_lat reports half of it; doubled here),
#   hetps 4 KiB push+pull p50 (ps-bench), and their ratio;
#   raw UCX AM bandwidth at 64 MiB (ucp_am_bw), hetps 64 MiB push+pull throughput (bytes both
#   ways over the time), and their ratio;
#   busy polling only: the raw round trip with the payload delivered (ucx-pingpong: each side
#   copies what it receives into its own buffer, as a receiver that keeps the bytes must;
#   ucx_perftest's receiver never reads them), and hetps's ratio to it.
#
#   bench/ucx_vs_raw.sh [build dir]             # e.g. build
#   ROUNDS=5 SERVER_CPU=2 CLIENT_CPU=3 bench/ucx_vs_raw.sh build
#
# Needs ucx_perftest (Debian package ucx-utils) and a build with UCX.
set -euo pipefail

BUILD="${1:-build}"
ROUNDS="${ROUNDS:-3}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-$(($(nproc) > 1 ? 1 : 0))}"
LAT_ITERS="${LAT_ITERS:-20000}"
BW_ITERS="${BW_ITERS:-40}"
DURATION_S="${DURATION_S:-1}"
PS_SERVER="$BUILD/server/ps-server"
PS_BENCH="$BUILD/bench/ps-bench"
PINGPONG="$BUILD/bench/ucx-pingpong"

for tool in "$PS_SERVER" "$PS_BENCH" "$PINGPONG"; do
  [[ -x "$tool" ]] || { echo "ucx_vs_raw: $tool is not built" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "ucx_vs_raw: ucx_perftest is missing (apt-get install ucx-utils)" >&2; exit 2; }

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
export HETPS_LOG_LEVEL=warning

# perftest <env> <mode> <test> <size> <iterations>: prints the -f line's fields.
perftest() {
  local env="$1" mode="$2" test="$3" size="$4" iters="$5"
  local port=$((20000 + RANDOM % 20000))
  env $env timeout 120 taskset -c "$SERVER_CPU" ucx_perftest -p "$port" >"$WORK/perftest_server.log" 2>&1 &
  SERVER_PID=$!
  sleep 0.5
  env $env timeout 120 taskset -c "$CLIENT_CPU" ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
    -s "$size" -n "$iters" -w $((iters / 10 + 1)) -E "$mode" -f 2>"$WORK/perftest_client.log" | tail -1
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# hetps <env> <busy poll: true|false>: prints "p50_us_4K gbps_64M" from ps-bench's CSV.
hetps() {
  local env="$1" busy="$2"
  rm -f "$WORK/port"
  env $env taskset -c "$SERVER_CPU" "$PS_SERVER" --transport=ucx --port_file="$WORK/port" \
    --ucx_busy_poll="$busy" --lifetime_s=300 >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s "$WORK/port" ]] && break; sleep 0.05; done
  env $env taskset -c "$CLIENT_CPU" "$PS_BENCH" --servers="127.0.0.1:$(cat "$WORK/port")" \
    --transport=ucx --ucx_busy_poll="$busy" --op=pushpull -b 4K -e 64M -f 16384 \
    --duration_s="$DURATION_S" --csv="$WORK/out.csv" >"$WORK/bench.log" 2>&1 ||
    { cat "$WORK/bench.log" >&2; exit 1; }
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           $col["bytes"] == 4096 { p50 = $col["p50_us"] }
           $col["bytes"] == 67108864 { gbps = $col["gbps"] }
           END { print p50, gbps }' "$WORK/out.csv"
}

# delivered <env>: the p50 round trip (us) of 4 KiB with the payload delivered, busy polling.
delivered() {
  env $1 timeout 120 "$PINGPONG" --initiator_cpu="$CLIENT_CPU" --responder_cpu="$SERVER_CPU" \
    --size=4096 --iterations="$LAT_ITERS" --warmup=$((LAT_ITERS / 10 + 1)) |
    awk '$1 == "delivered" { print $3 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-6s %-6s | %13s %15s %7s | %12s %14s %7s | %15s %7s\n' transport mode "raw RTT p50us" \
  "hetps 4K p50us" ratio "raw 64M GB/s" "hetps 64M GB/s" ratio "delivered p50us" ratio
for transport in shm tcp; do
  env=""
  [[ "$transport" == tcp ]] && env="UCX_TLS=tcp"
  for mode in sleep poll; do
    busy=false
    [[ "$mode" == poll ]] && busy=true
    : >"$WORK/raw_rtt"; : >"$WORK/raw_bw"; : >"$WORK/ps_p50"; : >"$WORK/ps_gbps"; : >"$WORK/copy_rtt"
    for _ in $(seq "$ROUNDS"); do
      # Fields: iterations, latency p50 / average / overall (us), bandwidth average / overall
      # (MiB/s), message rate average / overall.
      perftest "$env" "$mode" ucp_am_lat 4096 "$LAT_ITERS" | awk '{ print 2 * $2 }' >>"$WORK/raw_rtt"
      perftest "$env" "$mode" ucp_am_bw 67108864 "$BW_ITERS" |
        awk '{ print $6 * 1048576 / 1e9 }' >>"$WORK/raw_bw"
      [[ "$mode" == poll ]] && delivered "$env" >>"$WORK/copy_rtt"
      read -r p50 gbps < <(hetps "$env" "$busy")
      echo "$p50" >>"$WORK/ps_p50"
      echo "$gbps" >>"$WORK/ps_gbps"
    done
    raw_rtt=$(median <"$WORK/raw_rtt"); raw_bw=$(median <"$WORK/raw_bw")
    ps_p50=$(median <"$WORK/ps_p50"); ps_gbps=$(median <"$WORK/ps_gbps")
    copy_rtt=$(median <"$WORK/copy_rtt")
    awk -v t="$transport" -v m="$mode" -v rr="$raw_rtt" -v pp="$ps_p50" -v rb="$raw_bw" \
      -v pg="$ps_gbps" -v cr="$copy_rtt" 'BEGIN {
        printf "%-6s %-6s | %13.2f %15.2f %7.2f | %12.2f %14.2f %7.2f | ", t, m, rr, pp, pp / rr,
               rb, pg, pg / rb
        if (cr == "") printf "%15s %7s\n", "-", "-"; else printf "%15.2f %7.2f\n", cr, pp / cr }'
  done
done
echo "ratios: 4K is hetps p50 / raw round trip p50 (target <= 2.5); 64M is hetps / raw (target >= 0.6);"
echo "        delivered: hetps p50 / raw round trip with the payload copied out on both sides"
echo "rounds $ROUNDS, server side on CPU $SERVER_CPU, client side on CPU $CLIENT_CPU"
