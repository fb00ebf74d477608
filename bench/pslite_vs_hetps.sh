#!/bin/bash
# hetps against dmlc/ps-lite in one run: the same push+pull (one worker, one server, one operation
# in flight, the server adding each gradient into what it keeps), the same sizes, the same
# pinning (the server side on one CPU, the worker on another), rounds interleaved. ps-lite rides
# ZeroMQ over TCP; hetps is measured over gRPC (TCP), UCX over TCP (UCX_TLS=tcp) and UCX as it
# picks between two local processes (shared memory). `grpc-one` is gRPC with every call on one
# connection (ps-server --grpc_bulk_port=-1), as hetps had it before its bulk connection.
# Beside them, the floor of everything that rides TCP: tcp-pingpong's round trip of the same
# payload over one loopback connection, delivered both ways, pinned the same way.
#
# ps-lite is not part of hetps: fetch its source yourself (github.com/dmlc/ps-lite) and name its
# folder. The script builds it (Debian's libzmq3-dev, protobuf-compiler and libprotobuf-dev) and
# bench/pslite/pslite_bench.cc, its driver, under <build dir>/pslite.
#
#   bench/pslite_vs_hetps.sh <ps-lite source> [build dir]
#   ROUNDS=5 TRANSPORTS="grpc ucx" SIZE_B=4K SIZE_E=64M bench/pslite_vs_hetps.sh ~/ps-lite build
#   PLOT=pslite.svg bench/pslite_vs_hetps.sh ~/ps-lite build   # also draws the medians (ps-plot)
#   PARTITION_BYTES=524288 bench/pslite_vs_hetps.sh ~/ps-lite build   # hetps's partition size
#
# Per size, medians over the rounds: ps-lite's push+pull p50; per hetps transport its p50 and
# the speed-up over ps-lite (ps-lite p50 / hetps p50: above 1, hetps is faster); for gRPC also
# its ratio to the raw gRPC round trip with the same payload (ps-bench's floor); the raw TCP
# round trip, and for the transports over TCP (grpc, grpc-one, ucx-tcp) their ratio to it.
set -euo pipefail

PSLITE_SRC="${1:?usage: bench/pslite_vs_hetps.sh <ps-lite source> [build dir]}"
BUILD="${2:-build}"
ROUNDS="${ROUNDS:-3}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-$(($(nproc) > 1 ? 1 : 0))}"
TRANSPORTS="${TRANSPORTS:-grpc ucx-tcp ucx}"
SIZE_B="${SIZE_B:-4K}"
SIZE_E="${SIZE_E:-64M}"
DURATION_S="${DURATION_S:-0.5}"
PARTITION_BYTES="${PARTITION_BYTES:-}"  # empty: ps-bench's default (ClientOptions::partition_bytes)
PS_SERVER="$BUILD/server/ps-server"
PS_BENCH="$BUILD/bench/ps-bench"
PS_PLOT="$BUILD/bench/ps-plot"
TCP_PINGPONG="$BUILD/bench/tcp-pingpong"
PLOT="${PLOT:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"

[[ -f "$PSLITE_SRC/include/ps/ps.h" ]] || { echo "pslite_vs_hetps: $PSLITE_SRC is not a ps-lite source tree" >&2; exit 2; }
tools=("$PS_SERVER" "$PS_BENCH" "$TCP_PINGPONG")
[[ -n "$PLOT" ]] && tools+=("$PS_PLOT")
for tool in "${tools[@]}"; do
  [[ -x "$tool" ]] || { echo "pslite_vs_hetps: $tool is not built" >&2; exit 2; }
done
[[ -f /usr/include/zmq.h ]] || { echo "pslite_vs_hetps: ZeroMQ is missing (apt-get install libzmq3-dev)" >&2; exit 2; }
command -v protoc >/dev/null || { echo "pslite_vs_hetps: protoc is missing (apt-get install protobuf-compiler libprotobuf-dev)" >&2; exit 2; }

# Build ps-lite (its library only) and the driver.
PSLITE_BUILD="$BUILD/pslite"
DRIVER="$PSLITE_BUILD/pslite-bench"
if [[ ! -x "$DRIVER" || "$HERE/pslite/pslite_bench.cc" -nt "$DRIVER" ]]; then
  cmake -S "$PSLITE_SRC" -B "$PSLITE_BUILD/lib" -DCMAKE_BUILD_TYPE=Release >"$PSLITE_BUILD.log" 2>&1 &&
    cmake --build "$PSLITE_BUILD/lib" --target pslite -j"$(nproc)" >>"$PSLITE_BUILD.log" 2>&1 ||
    { tail -30 "$PSLITE_BUILD.log" >&2; echo "pslite_vs_hetps: building ps-lite failed ($PSLITE_BUILD.log)" >&2; exit 1; }
  g++ -O2 -std=c++17 -I"$PSLITE_SRC/include" -I"$PSLITE_BUILD/lib" "$HERE/pslite/pslite_bench.cc" \
    "$PSLITE_BUILD/lib/libpslite.a" -lzmq -lprotobuf -lpthread -o "$DRIVER"
fi

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
export HETPS_LOG_LEVEL=warning

source "$(dirname "$0")/sweep_helpers.sh"
sweep_sizes "$SIZE_B" "$SIZE_E"

# pslite: appends "size p50_us" per size to $WORK/pslite. Scheduler and server on the server
# side's CPU, the worker on the client side's.
pslite() {
  local port=$((20000 + RANDOM % 20000))
  local common=(DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1
                DMLC_PS_ROOT_PORT="$port" DMLC_NODE_HOST=127.0.0.1 DMLC_INTERFACE=lo)
  PIDS=()
  env "${common[@]}" DMLC_ROLE=scheduler timeout 300 taskset -c "$SERVER_CPU" "$DRIVER" \
    >"$WORK/scheduler.log" 2>&1 &
  PIDS+=($!)
  env "${common[@]}" DMLC_ROLE=server timeout 300 taskset -c "$SERVER_CPU" "$DRIVER" \
    >"$WORK/server.log" 2>&1 &
  PIDS+=($!)
  env "${common[@]}" DMLC_ROLE=worker timeout 300 taskset -c "$CLIENT_CPU" "$DRIVER" \
    --b="${SIZES[0]}" --e="${SIZES[-1]}" --f=4 --duration_s="$DURATION_S" >"$WORK/worker.out" \
    2>"$WORK/worker.log" || { cat "$WORK/worker.log" >&2; exit 1; }
  for pid in "${PIDS[@]}"; do wait "$pid" || true; done
  PIDS=()
  awk '{ print $1, $2 }' "$WORK/worker.out" >>"$WORK/pslite"
}

# tcp_floor: appends "size p50_us" per size to $WORK/tcp (about a second per size).
tcp_floor() {
  local size iterations
  for size in "${SIZES[@]}"; do
    iterations=$((size <= 262144 ? 2000 : size <= 4194304 ? 300 : 30))
    "$TCP_PINGPONG" --size="$size" --iterations="$iterations" --warmup=$((iterations / 10 + 1)) \
      --initiator_cpu="$CLIENT_CPU" --responder_cpu="$SERVER_CPU" >"$WORK/tcp.out" ||
      { cat "$WORK/tcp.out" >&2; exit 1; }
    awk -v size="$size" 'NR == 2 { print size, $3 }' "$WORK/tcp.out" >>"$WORK/tcp"
  done
}

# hetps <transport: grpc|grpc-one|ucx|ucx-tcp>: appends "size p50_us floor_p50_us" per size to
# $WORK/<transport>.
hetps() {
  local name="$1" transport="$1" env="" flags=()
  [[ "$name" == ucx-tcp ]] && transport=ucx && env="UCX_TLS=tcp"
  [[ "$name" == grpc-one ]] && transport=grpc && flags=(--grpc_bulk_port=-1)
  rm -f "$WORK/port"
  PIDS=()
  env $env taskset -c "$SERVER_CPU" "$PS_SERVER" --transport="$transport" \
    --port_file="$WORK/port" --lifetime_s=600 "${flags[@]}" >"$WORK/hetps_server.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do [[ -s "$WORK/port" ]] && break; sleep 0.05; done
  env $env taskset -c "$CLIENT_CPU" "$PS_BENCH" --servers="127.0.0.1:$(cat "$WORK/port")" \
    --transport="$transport" --op=pushpull --optimizer=sum -b "$SIZE_B" -e "$SIZE_E" -f 4 \
    --duration_s="$DURATION_S" ${PARTITION_BYTES:+--partition_bytes="$PARTITION_BYTES"} \
    --csv="$WORK/out.csv" >"$WORK/bench.log" 2>&1 ||
    { cat "$WORK/bench.log" >&2; exit 1; }
  kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true
  PIDS=()
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           { print $col["bytes"], $col["p50_us"], $col["floor_p50_us"] }' "$WORK/out.csv" \
    >>"$WORK/$name"
}



: >"$WORK/pslite"
: >"$WORK/tcp"
for transport in $TRANSPORTS; do : >"$WORK/$transport"; done
for _ in $(seq "$ROUNDS"); do
  pslite
  tcp_floor
  for transport in $TRANSPORTS; do hetps "$transport"; done
done

# Whether a transport of TRANSPORTS rides TCP, so has a ratio to the raw TCP round trip.
rides_tcp() { [[ "$1" == grpc* || "$1" == ucx-tcp ]]; }

header=$(printf '%5s | %10s %9s' size "ps-lite" "tcp")
for transport in $TRANSPORTS; do
  header+=$(printf ' | %8s p50 %6s' "$transport" "x")
  [[ "$transport" == grpc* ]] && header+=$(printf ' %7s' "x floor")
  rides_tcp "$transport" && header+=$(printf ' %5s' "x tcp")
done
echo "$header"
latency_panel="push+pull p50 (us), one worker, one server"
speedup_panel="ps-lite p50 / hetps p50 (above 1: hetps faster)"
printf 'panel\t%s\tlog\npanel\t%s\tlog\n' "$latency_panel" "$speedup_panel" >"$WORK/plot.tsv"
for size in "${SIZES[@]}"; do
  read -r pslite_p50 _ < <(stats "$WORK/pslite" "$size" 2)
  read -r tcp_p50 _ < <(stats "$WORK/tcp" "$size" 2)
  row=$(printf '%5s | %10.1f %9.1f' "$(human "$size")" "$pslite_p50" "$tcp_p50")
  printf '%s\tps-lite\t%s\t%s\n%s\tps-lite\t%s\t1\tdashed\n' "$latency_panel" "$size" \
    "$pslite_p50" "$speedup_panel" "$size" >>"$WORK/plot.tsv"
  printf '%s\traw TCP, one connection\t%s\t%s\tdashed\n' "$latency_panel" "$size" "$tcp_p50" \
    >>"$WORK/plot.tsv"
  for transport in $TRANSPORTS; do
    read -r p50 _ < <(stats "$WORK/$transport" "$size" 2)
    row+=$(awk -v p="$p50" -v l="$pslite_p50" 'BEGIN { printf " | %12.1f %6.2f", p, l / p }')
    awk -v lp="$latency_panel" -v sp="$speedup_panel" -v t="hetps $transport" -v n="$size" \
      -v p="$p50" -v l="$pslite_p50" 'BEGIN { OFS = "\t"; print lp, t, n, p; print sp, t, n, l / p }' \
      >>"$WORK/plot.tsv"
    if [[ "$transport" == grpc* ]]; then
      read -r floor _ < <(stats "$WORK/$transport" "$size" 3)
      row+=$(awk -v p="$p50" -v f="$floor" 'BEGIN { printf " %7.2f", p / f }')
    fi
    if rides_tcp "$transport"; then
      row+=$(awk -v p="$p50" -v f="$tcp_p50" 'BEGIN { printf " %5.2f", p / f }')
    fi
  done
  echo "$row"
done
echo "p50: push+pull median over $ROUNDS rounds (us); x: ps-lite p50 / hetps p50 (above 1: hetps faster)"
echo "x floor: hetps gRPC p50 / the raw gRPC round trip with the same payload (in partition-sized messages)"
describe_partitions "$PS_BENCH"
echo "tcp: the raw TCP round trip over one connection (tcp-pingpong p50, us); x tcp: hetps p50 / it"
echo "server side on CPU $SERVER_CPU, worker on CPU $CLIENT_CPU"
draw_plot "$BUILD" "$WORK/plot.tsv"
