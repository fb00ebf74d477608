#!/usr/bin/env bash
# deploy/slurm/hetps.sbatch for real: Debian's munged, slurmctld and two slurmd (node cpu1 on
# this machine's network, node gpu1 in a network namespace of its own: Slurm gives the
# components of a heterogeneous job separate nodes) with a "cpu" and a "gpu" partition; the job
# is submitted with sbatch, its shards run on cpu1 and its workers on gpu1, and it must train to
# the end.
#
#   tests/deploy/slurm_test.sh SOURCE_DIR BUILD_DIR
# Skipped (exit 77) without root, the Slurm and munge packages, iproute2 or nsenter.
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
for program in slurmctld slurmd sbatch sinfo munged mungekey ip nsenter; do
  if ! command -v "$program" >/dev/null; then
    echo "skipped: needs $program (slurmctld, slurmd, slurm-client, munge, iproute2)"
    exit 77
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: needs root (slurmd, a network namespace)"
  exit 77
fi

run_dir=$(mktemp -d)
ns="hetps-sl-$$"
host_end="sl$$h"
node_end="sl$$n"
subnet="10.79.$(($$ % 250))"
cpu_address="$subnet.1"
gpu_address="$subnet.2"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_end" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
# shellcheck source=../testing/script_helpers.sh
source "$(dirname "$0")/../testing/script_helpers.sh"

ip netns add "$ns"
ip link add "$host_end" type veth peer name "$node_end"
ip link set "$node_end" netns "$ns"
ip addr add "$cpu_address/30" dev "$host_end"
ip link set "$host_end" up
ip -n "$ns" addr add "$gpu_address/30" dev "$node_end"
ip -n "$ns" link set "$node_end" up
ip -n "$ns" link set lo up

mungekey -c -k "$run_dir/munge.key"
munged -F -f --key-file="$run_dir/munge.key" --socket="$run_dir/munge.sock" \
  --log-file="$run_dir/munged.log" --pid-file="$run_dir/munged.pid" --seed-file="$run_dir/munged.seed" \
  >"$run_dir/munged.out" 2>&1 &
pids+=($!)
await '[ -S "$run_dir/munge.sock" ]' 30

mkdir -p "$run_dir/state" "$run_dir/spool-cpu1" "$run_dir/spool-gpu1" "$run_dir/jobs"
cat >"$run_dir/slurm.conf" <<CONF
ClusterName=hetps-test
SlurmctldHost=$(hostname)($cpu_address)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$run_dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$run_dir/state
SlurmdSpoolDir=$run_dir/spool-%n
SlurmctldPidFile=$run_dir/slurmctld.pid
SlurmdPidFile=$run_dir/slurmd-%n.pid
SlurmctldLogFile=$run_dir/slurmctld.log
SlurmdLogFile=$run_dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
# Heterogeneous jobs start from the backfill scheduler: look every second.
SchedulerParameters=bf_interval=1
ReturnToService=2
NodeName=cpu1 NodeAddr=$cpu_address CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=gpu1 NodeAddr=$gpu_address CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=cpu Nodes=cpu1 Default=YES MaxTime=10 State=UP
PartitionName=gpu Nodes=gpu1 MaxTime=10 State=UP
CONF
export SLURM_CONF="$run_dir/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$run_dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N cpu1 >"$run_dir/slurmd-cpu1.out" 2>&1 &
pids+=($!)
# nsenter, not ip netns exec: only the network is the namespace's, /sys (cgroups) stays.
nsenter --net="/run/netns/$ns" slurmd -D -f "$SLURM_CONF" -N gpu1 >"$run_dir/slurmd-gpu1.out" 2>&1 &
pids+=($!)
await '[ "$(sinfo -h -o "%P %t" 2>/dev/null | sort | tr "\n" " ")" = "cpu* idle gpu idle " ]' 60 0.2
echo "slurm: $(sinfo -h -o '%P %N %t' | tr '\n' ';')"

cd "$run_dir/jobs"
status=0
HETPS_SERVER="$build_dir/server/ps-server" \
  HETPS_WORKER="$build_dir/worker/examples/linear_regression" \
  HETPS_SHARD_HOST="$cpu_address" HETPS_STEPS=10 \
  timeout 180 sbatch --wait --output="$run_dir/job.out" "$source_dir/deploy/slurm/hetps.sbatch" \
  >"$run_dir/sbatch.out" 2>&1 || status=$?
cat "$run_dir/job.out" 2>/dev/null || true
[ "$status" -eq 0 ] || fail "the job failed (sbatch: $status): $(cat "$run_dir/sbatch.out")"
grep -q "shard(s) at $cpu_address:" "$run_dir/job.out" || fail "the shards did not run on cpu1"
for rank in 0 1; do
  grep -q "rank $rank final loss" "$run_dir/job.out" || fail "rank $rank did not finish"
done
echo "PASSED"
