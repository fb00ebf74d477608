#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, starts a local cluster of two
# shards on 127.0.0.1 and trains the example job with two worker processes against it.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh
./deploy/build.sh
exec ./deploy/local/cluster.sh --build_dir "${BUILD_DIR:-build}" "$@"
