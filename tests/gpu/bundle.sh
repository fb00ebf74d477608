#!/usr/bin/env bash
# For GPU machines that have CUDA but none of hetps's Debian packages and no package registry
# (the device machines lent to this project): builds the GPU checks here (Debian 12 with CUDA)
# and packs them, stripped, with the shared libraries such a machine lacks (gRPC, Abseil,
# protobuf, UCX and its modules, jemalloc, OpenSSL, libstdc++) into gpu-bundle/ (ignored by git).
# CUDA's own libraries (cudart, cuBLAS, NCCL) are not packed: the GPU machine has them.
# tests/gpu/run.sh uses gpu-bundle/ when it is there instead of building.
#
#   tests/gpu/bundle.sh         # then carry gpu-bundle/ to the GPU machine, run tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build-gpu-bundle}
bundle=gpu-bundle

./deploy/install_deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DHETPS_WITH_CUDA=ON -DHETPS_WITH_NCCL=ON \
  -DCMAKE_CUDA_ARCHITECTURES="80-real;90" >/dev/null
binaries=(tests/gpu_test tests/device_client_test worker/examples/mlp_training server/ps-server
          bench/ps-device-bench)
cmake --build "$build_dir" -j"$(nproc)" --target gpu_test device_client_test mlp_training \
  ps-server ps-device-bench

rm -rf "$bundle"
mkdir -p "$bundle/lib/ucx"
for binary in "${binaries[@]}"; do
  mkdir -p "$bundle/build/$(dirname "$binary")"
  strip -o "$bundle/build/$binary" "$build_dir/$binary"
done
# Every shared library the binaries load, except the C library's own and CUDA's.
for binary in "${binaries[@]}"; do ldd "$build_dir/$binary"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so|/(libcudart|libcublas|libcublasLt|libnccl)\.so' |
  while read -r library; do
    strip -o "$bundle/lib/$(basename "$library")" "$library"
  done
# The C++ runtime needs this machine's glibc (2.36); run.sh uses it only where the GPU machine's
# own libstdc++ is too old for the binaries (GLIBCXX_3.4.29).
mkdir -p "$bundle/lib/cxx"
mv "$bundle"/lib/libstdc++.so.6 "$bundle"/lib/libgcc_s.so.1 "$bundle/lib/cxx/"
# UCX loads its cross-memory-attach transport as a module.
cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 "$bundle/lib/ucx/"
du -sh "$bundle"
