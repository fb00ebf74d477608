#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh
./deploy/build.sh
ctest --test-dir "${BUILD_DIR:-build}" -j2 --output-on-failure
