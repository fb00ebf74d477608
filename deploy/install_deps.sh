#!/usr/bin/env bash
# Installs the Debian 12 packages hetps builds against, and any named as arguments (e.g.
# clang-15 libfuzzer-15-dev for tests/fuzz/run.sh), if any is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libjemalloc-dev libucx-dev ucx-utils libgtest-dev libgmock-dev libbenchmark-dev
  openssl
  # The Python module and its tests (python/): the interpreter with Debian's PyTorch.
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest python3-sklearn
  python3-pip python3-setuptools python3-wheel
  # Replication's coordination (ps-server --replicas 2), and the tests that start it; network
  # namespaces for the test that cuts a shard off.
  etcd-server iproute2
  # The metrics test: a real Prometheus scrapes shards and a worker; promtool checks the pages.
  # The Kubernetes manifests' test reads kubectl kustomize's YAML.
  prometheus curl python3-yaml
  # The Slurm job's test: a real slurmctld, slurmd and munged on this machine.
  slurmctld slurmd slurm-client munge
  "$@"
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be stale or absent on a fresh machine: refresh them if the first try fails.
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
