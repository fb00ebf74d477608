#!/bin/bash
# hetps over UCX against raw UCX at every size, in one run, with the same CPU pinning: the server
# side (a ps-server shard, ucx-pingpong's responder, ucx_perftest's responder) on one CPU, the
# client side (ps-bench, the initiators) on another. Over shared memory (UCX's choice between two
# local processes) and over TCP (UCX_TLS=tcp); hetps in both wait modes: sleeping when idle
# (hetps's default) and busy polling (--ucx_busy_poll).
#
# Latency, per transport and size (4 KiB to 64 MiB, x4 steps), medians over the rounds:
#   raw untouched  ucx-pingpong's AM round trip whose receiver never reads the payload (what
#                  ucx_perftest -t ucp_am_lat measures, x2);
#   raw delivered  ucx-pingpong's round trip with the payload copied into each receiver's own
#                  buffer (past UCX's rendezvous threshold both kinds deliver): the yardstick, what
#                  moving the bytes each way costs a receiver that keeps them; and its spread over
#                  the rounds (the largest round's p50 over the smallest: the machine's noise);
#   hetps p50      ps-bench push+pull p50 against one shard, per wait mode, its ratio to the
#                  delivered round trip (target <= 1.3), and its spread (each round is a fresh
#                  pair of processes, so a size that is fast in some processes and slow in others
#                  shows here, above the raw spread).
# Bandwidth, 16 MiB and 64 MiB: ucx_perftest -t ucp_am_bw (streamed, busy polling) against
# hetps's push+pull throughput (both directions' bytes over the time, one operation in flight),
# target >= 0.6.
#
#   bench/ucx_vs_raw.sh [build dir]             # e.g. build
#   ROUNDS=5 SERVER_CPU=2 CLIENT_CPU=3 TRANSPORTS=shm bench/ucx_vs_raw.sh build
#   PIN=0 ROUNDS=8 TRANSPORTS=shm bench/ucx_vs_raw.sh build   # hetps unpinned: where the
#                                   # scheduler places each thread, as a co-located job runs
#   PLOT=ucx_vs_raw.svg bench/ucx_vs_raw.sh build   # also draws the medians (ps-plot)
#   PARTITION_BYTES=524288 bench/ucx_vs_raw.sh build   # hetps's partition size (ps-bench's
#                                   # default otherwise)
#   TCP_CC=reno TRANSPORTS=tcp bench/ucx_vs_raw.sh build   # every process in a network
#                                   # namespace of the run's own whose TCP uses this congestion
#                                   # control (root; the host's is printed at the end): loopback
#                                   # under bbr caps a message's first flight near 1 MiB
#                                   # (bench/PERFORMANCE.md)
#
# Needs ucx_perftest (Debian package ucx-utils) and a build with UCX.
set -euo pipefail

BUILD="${1:-build}"
ROUNDS="${ROUNDS:-3}"
PIN="${PIN:-1}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-$(($(nproc) > 1 ? 1 : 0))}"
TRANSPORTS="${TRANSPORTS:-shm tcp}"
SIZE_B="${SIZE_B:-4K}"
SIZE_E="${SIZE_E:-64M}"
# Round trips per raw measurement: LAT_TIME_US of expected time at ~2 GB/s, within these bounds.
LAT_TIME_US="${LAT_TIME_US:-200000}"
LAT_ITERS_MAX="${LAT_ITERS_MAX:-20000}"
BW_ITERS="${BW_ITERS:-40}"
DURATION_S="${DURATION_S:-0.5}"
PARTITION_BYTES="${PARTITION_BYTES:-}"
PS_SERVER="$BUILD/server/ps-server"
PS_BENCH="$BUILD/bench/ps-bench"
PINGPONG="$BUILD/bench/ucx-pingpong"
PS_PLOT="$BUILD/bench/ps-plot"
PLOT="${PLOT:-}"
TCP_CC="${TCP_CC:-}"

tools=("$PS_SERVER" "$PS_BENCH" "$PINGPONG")
[[ -n "$PLOT" ]] && tools+=("$PS_PLOT")
for tool in "${tools[@]}"; do
  [[ -x "$tool" ]] || { echo "ucx_vs_raw: $tool is not built" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "ucx_vs_raw: ucx_perftest is missing (apt-get install ucx-utils)" >&2; exit 2; }

WORK="$(mktemp -d)"
SERVER_PID=""
NETNS=""
cleanup() {
  [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [[ -n "$NETNS" ]] && ip netns del "$NETNS"
  rm -rf "$WORK"
}
trap cleanup EXIT

# IN_NETNS: what runs a command in the run's own network namespace (none without TCP_CC).
IN_NETNS=()
CC_USED="$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown)"
if [[ -n "$TCP_CC" ]]; then
  NETNS="hetps-ucx-vs-raw-$$"
  ip netns add "$NETNS" || { NETNS=""; echo "ucx_vs_raw: TCP_CC needs root (ip netns)" >&2; exit 2; }
  ip netns exec "$NETNS" ip link set lo up
  ip netns exec "$NETNS" sysctl -q -w net.ipv4.tcp_congestion_control="$TCP_CC" ||
    { echo "ucx_vs_raw: $TCP_CC is not allowed in a namespace (net.ipv4.tcp_allowed_congestion_control)" >&2; exit 2; }
  IN_NETNS=(ip netns exec "$NETNS")
  CC_USED="$TCP_CC (the run's network namespace)"
fi
export HETPS_LOG_LEVEL=warning

source "$(dirname "$0")/sweep_helpers.sh"
sweep_sizes "$SIZE_B" "$SIZE_E"
BW_SIZES=()
for size in 16777216 67108864; do (( size <= SIZES[-1] )) && BW_SIZES+=("$size"); done

# pingpong <env> <size>: appends "size untouched_us delivered_us" to $WORK/raw.
pingpong() {
  local env="$1" size="$2"
  local iters=$((LAT_TIME_US * 2000 / (size + 2000)))
  ((iters > LAT_ITERS_MAX)) && iters=$LAT_ITERS_MAX
  ((iters < 10)) && iters=10
  "${IN_NETNS[@]}" env $env timeout 300 "$PINGPONG" --initiator_cpu="$CLIENT_CPU" --responder_cpu="$SERVER_CPU" \
    --size="$size" --iterations="$iters" --warmup=$((iters / 10 + 1)) |
    awk -v size="$size" '$1 == "untouched" { u = $3 } $1 == "delivered" { d = $3 }
                         END { print size, u, d }' >>"$WORK/raw"
}

# am_bw <env> <size>: appends "size GB/s" (ucx_perftest ucp_am_bw, busy polling) to $WORK/raw_bw.
am_bw() {
  local env="$1" size="$2"
  local port=$((20000 + RANDOM % 20000))
  "${IN_NETNS[@]}" env $env timeout 120 taskset -c "$SERVER_CPU" ucx_perftest -p "$port" >"$WORK/perftest_server.log" 2>&1 &
  SERVER_PID=$!
  sleep 0.5
  # The -f line: iterations, latency p50 / average / overall (us), bandwidth average / overall
  # (MiB/s), message rate average / overall.
  "${IN_NETNS[@]}" env $env timeout 120 taskset -c "$CLIENT_CPU" ucx_perftest 127.0.0.1 -p "$port" -t ucp_am_bw \
    -s "$size" -n "$BW_ITERS" -w $((BW_ITERS / 10 + 1)) -E poll -f 2>"$WORK/perftest_client.log" |
    tail -1 | awk -v size="$size" '{ print size, $6 * 1048576 / 1e9 }' >>"$WORK/raw_bw"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# hetps <env> <mode: sleep|poll>: appends "size p50_us gbps" per size to $WORK/<mode>.
hetps() {
  local env="$1" mode="$2" busy=false
  [[ "$mode" == poll ]] && busy=true
  rm -f "$WORK/port"
  local server_pin=(taskset -c "$SERVER_CPU") client_pin=(taskset -c "$CLIENT_CPU")
  [[ "$PIN" == 0 ]] && server_pin=() && client_pin=()
  "${IN_NETNS[@]}" env $env "${server_pin[@]}" "$PS_SERVER" --transport=ucx --port_file="$WORK/port" \
    --ucx_busy_poll="$busy" --lifetime_s=600 >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s "$WORK/port" ]] && break; sleep 0.05; done
  "${IN_NETNS[@]}" env $env "${client_pin[@]}" "$PS_BENCH" --servers="127.0.0.1:$(cat "$WORK/port")" \
    --transport=ucx --ucx_busy_poll="$busy" --op=pushpull -b "$SIZE_B" -e "$SIZE_E" -f 4 \
    --duration_s="$DURATION_S" ${PARTITION_BYTES:+--partition_bytes="$PARTITION_BYTES"} \
    --csv="$WORK/out.csv" >"$WORK/bench.log" 2>&1 ||
    { cat "$WORK/bench.log" >&2; exit 1; }
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           { print $col["bytes"], $col["p50_us"], $col["gbps"] }' "$WORK/out.csv" >>"$WORK/$mode"
}



: >"$WORK/plot.tsv"
for transport in $TRANSPORTS; do
  latency_panel="$transport: push+pull p50 and raw round trip (us)"
  ratio_panel="$transport: hetps p50 / raw delivered (target <= 1.3)"
  printf 'panel\t%s\tlog\npanel\t%s\tlinear\n' "$latency_panel" "$ratio_panel" >>"$WORK/plot.tsv"
  env=""
  [[ "$transport" == tcp ]] && env="UCX_TLS=tcp"
  : >"$WORK/raw"; : >"$WORK/raw_bw"; : >"$WORK/sleep"; : >"$WORK/poll"
  for _ in $(seq "$ROUNDS"); do
    for size in "${SIZES[@]}"; do pingpong "$env" "$size"; done
    for size in "${BW_SIZES[@]}"; do am_bw "$env" "$size"; done
    hetps "$env" sleep
    hetps "$env" poll
  done
  printf '%-6s %5s | %9s %9s %6s | %10s %6s %6s | %10s %6s %6s\n' transport size "raw untch" \
    "delivered" spread "sleep p50" "x del" spread "poll p50" "x del" spread
  for size in "${SIZES[@]}"; do
    read -r untouched _ < <(stats "$WORK/raw" "$size" 2)
    read -r delivered raw_spread < <(stats "$WORK/raw" "$size" 3)
    read -r sleep_p50 sleep_spread < <(stats "$WORK/sleep" "$size" 2)
    read -r poll_p50 poll_spread < <(stats "$WORK/poll" "$size" 2)
    awk -v t="$transport" -v s="$(human "$size")" -v u="$untouched" -v d="$delivered" \
      -v rs="$raw_spread" \
      -v sp="$sleep_p50" -v ss="$sleep_spread" -v pp="$poll_p50" -v ps="$poll_spread" 'BEGIN {
        printf "%-6s %5s | %9.2f %9.2f %6.2f | %10.2f %6.2f %6.2f | %10.2f %6.2f %6.2f\n",
               t, s, u, d, rs, sp, sp / d, ss, pp, pp / d, ps }'
    awk -v lp="$latency_panel" -v rp="$ratio_panel" -v n="$size" -v d="$delivered" \
      -v sp="$sleep_p50" -v pp="$poll_p50" 'BEGIN { OFS = "\t"
        print lp, "raw delivered", n, d, "dashed"; print lp, "hetps sleeping", n, sp
        print lp, "hetps polling", n, pp
        print rp, "hetps sleeping", n, sp / d; print rp, "hetps polling", n, pp / d }' \
      >>"$WORK/plot.tsv"
  done
  for size in "${BW_SIZES[@]}"; do
    read -r raw_gbps _ < <(stats "$WORK/raw_bw" "$size" 2)
    read -r sleep_gbps _ < <(stats "$WORK/sleep" "$size" 3)
    read -r poll_gbps _ < <(stats "$WORK/poll" "$size" 3)
    awk -v t="$transport" -v s="$(human "$size")" -v r="$raw_gbps" -v sg="$sleep_gbps" \
      -v pg="$poll_gbps" 'BEGIN {
        printf "%-6s %5s bandwidth | raw am_bw %6.2f GB/s | sleep %6.2f GB/s %5.2fx | poll %6.2f GB/s %5.2fx\n",
               t, s, r, sg, sg / r, pg, pg / r }'
  done
done
echo "x del: hetps push+pull p50 / raw round trip with the payload delivered (target <= 1.3);"
echo "spread: the slowest round's p50 / the fastest's (1.0: the same in every process; raw's shows"
echo "        the machine's noise)"
echo "bandwidth: hetps push+pull GB/s (both ways) / raw streamed AM bandwidth (target >= 0.6)"
echo "TCP congestion control: $CC_USED"
describe_partitions "$PS_BENCH"
draw_plot "$BUILD" "$WORK/plot.tsv"
if [[ "$PIN" == 0 ]]; then
  echo "rounds $ROUNDS, hetps unpinned; raw: server side on CPU $SERVER_CPU, client side on CPU $CLIENT_CPU"
else
  echo "rounds $ROUNDS, server side on CPU $SERVER_CPU, client side on CPU $CLIENT_CPU"
fi
