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

dir=$(mktemp -d)
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
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  tail -n 30 "$dir"/*.log "$dir"/*.out >&2 2>/dev/null || true
  exit 1
}
await() {
  local deadline=$(($(date +%s) + $2))
  until eval "$1"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out waiting for: $1"
    sleep 0.2
  done
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])'
}

ip netns add "$ns"
ip link add "$host_end" type veth peer name "$node_end"
ip link set "$node_end" netns "$ns"
ip addr add "$cpu_address/30" dev "$host_end"
ip link set "$host_end" up
ip -n "$ns" addr add "$gpu_address/30" dev "$node_end"
ip -n "$ns" link set "$node_end" up
ip -n "$ns" link set lo up

mungekey -c -k "$dir/munge.key"
munged -F -f --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
  --log-file="$dir/munged.log" --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" \
  >"$dir/munged.out" 2>&1 &
pids+=($!)
await '[ -S "$dir/munge.sock" ]' 30

mkdir -p "$dir/state" "$dir/spool-cpu1" "$dir/spool-gpu1" "$dir/jobs"
cat >"$dir/slurm.conf" <<CONF
ClusterName=hetps-test
SlurmctldHost=$(hostname)($cpu_address)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
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
export SLURM_CONF="$dir/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N cpu1 >"$dir/slurmd-cpu1.out" 2>&1 &
pids+=($!)
# nsenter, not ip netns exec: only the network is the namespace's, /sys (cgroups) stays.
nsenter --net="/run/netns/$ns" slurmd -D -f "$SLURM_CONF" -N gpu1 >"$dir/slurmd-gpu1.out" 2>&1 &
pids+=($!)
await '[ "$(sinfo -h -o "%P %t" 2>/dev/null | sort | tr "\n" " ")" = "cpu* idle gpu idle " ]' 60
echo "slurm: $(sinfo -h -o '%P %N %t' | tr '\n' ';')"

cd "$dir/jobs"
status=0
HETPS_SERVER="$build_dir/server/ps-server" \
  HETPS_WORKER="$build_dir/worker/examples/linear_regression" \
  HETPS_SHARD_HOST="$cpu_address" HETPS_STEPS=10 \
  timeout 180 sbatch --wait --output="$dir/job.out" "$source_dir/deploy/slurm/hetps.sbatch" \
  >"$dir/sbatch.out" 2>&1 || status=$?
cat "$dir/job.out" 2>/dev/null || true
[ "$status" -eq 0 ] || fail "the job failed (sbatch: $status): $(cat "$dir/sbatch.out")"
grep -q "shard(s) at $cpu_address:" "$dir/job.out" || fail "the shards did not run on cpu1"
for rank in 0 1; do
  grep -q "rank $rank final loss" "$dir/job.out" || fail "rank $rank did not finish"
done
echo "PASSED"
