#!/usr/bin/env bash
# Scaling across workers and shards: for each W workers x S shards (processes), every worker runs
# ps-bench's BSP push+pull of the whole model at once, through bench/zone_cluster.sh's zone (each
# shard and worker in a network namespace of its own behind a rate-limited link, so every
# process has its own "NIC", as on a real cluster, even on a machine with few cores). Prints, per
# layout and size: the step's p50, the aggregate throughput (every worker's model both ways over
# the step), the bound (the busiest link's time: a worker's NIC moves the model once each way,
# a shard's carries its partitions of every worker's share, W/S of the model when they spread
# evenly), which link that is, and the step's ratio to it. Target (issue 17): within 1.3x for
# W = S = 2 and W = 4, S = 2.
#
#   bench/scaling.sh [build dir]
#   LAYOUTS="2x2 4x2" SIZES="1M 64M" TRANSPORT=ucx RATE=1gbit bench/scaling.sh build
#   PLOT=scaling.svg bench/scaling.sh build   # also draws x bound and throughput (ps-plot)
#
# Needs root and iproute2 (exits 77 without them, as zone_cluster.sh does).
set -euo pipefail

build_dir=${1:-build}
layouts=${LAYOUTS:-1x1 2x1 4x1 1x2 2x2 4x2 1x4 2x4 4x4}
sizes=${SIZES:-1M 64M}
transport=${TRANSPORT:-ucx}
rate=${RATE:-500mbit}  # zone_cluster.sh's default
iterations=${ITERATIONS:-5}
zone="$(dirname "$0")/zone_cluster.sh"
source "$(dirname "$0")/sweep_helpers.sh"
plot_table=$(mktemp)
trap 'rm -f "$plot_table"' EXIT
ratio_panel="$transport: BSP step / bound (target <= 1.3 for 2x2, 4x2)"
throughput_panel="$transport: aggregate GB/s (every worker's model both ways)"
printf 'panel\t%s\tlinear\npanel\t%s\tlinear\n' "$ratio_panel" "$throughput_panel" >"$plot_table"

printf '%-9s %-4s %-5s | %9s %11s | %10s %-8s | %7s\n' transport WxS size "p50 (ms)" "agg GB/s" \
  "bound (ms)" link "x bound"
for layout in $layouts; do
  workers=${layout%x*}
  shards=${layout#*x}
  set +e
  out=$(SHARDS=$shards WORKERS=$workers GPU_RATE=$rate CPU_RATE=$rate SIZES="$sizes" STEPS=1 \
    ITERATIONS=$iterations TRANSPORT=$transport "$zone" "$build_dir" 2>&1)
  status=$?
  set -e
  if [ "$status" -eq 77 ]; then
    echo "$out"
    exit 77
  fi
  if [ "$status" -ne 0 ]; then
    echo "$out" >&2
    echo "scaling: the zone failed for $layout" >&2
    exit 1
  fi
  # zone_cluster.sh's rows: size | p50 (ms) GB/s per worker | bound (ms) link | x bound | ...
  awk -F'|' -v t="$transport" -v l="$layout" -v w="$workers" -v table="$plot_table" \
    -v rp="$ratio_panel" -v tp="$throughput_panel" '
    $1 ~ /^[0-9]+[KMG] *$/ {
      split($2, timing, " "); split($3, bound, " "); size = $1; gsub(/ /, "", size)
      printf "%-9s %-4s %-5s | %9.2f %11.3f | %10.2f %-8s | %7.2f\n", t, l, size, timing[1],
             w * timing[2] * 2, bound[1], bound[2] " " bound[3], $4 + 0
      bytes = size + 0; unit = substr(size, length(size))
      bytes *= unit == "K" ? 1024 : unit == "M" ? 1048576 : 1073741824
      printf "%s\t%s\t%d\t%s\n%s\t%s\t%d\t%s\n", rp, l, bytes, $4 + 0, tp, l, bytes,
             w * timing[2] * 2 >>table }' <<<"$out"
done
draw_plot "$build_dir" "$plot_table"
echo "agg GB/s: every worker's model both ways over the step's p50; bound: the busiest link's"
echo "time at $rate per process (target: x bound <= 1.3 for 2x2 and 4x2)"
