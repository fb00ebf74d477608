#!/usr/bin/env bash
# For GPU machines that have CUDA but none of hetps's Debian packages and no package registry
# (the device machines lent to this project): builds the GPU checks here (Debian 12 with CUDA)
# and packs them, stripped, with the shared libraries such a machine lacks (gRPC, Abseil,
# protobuf, UCX and its modules, jemalloc, OpenSSL, libstdc++) into gpu-bundle/ (ignored by git).
# CUDA's own libraries (cudart, cuBLAS, NCCL) are not packed: the GPU machine has them.
# tests/gpu/run.sh uses gpu-bundle/ when it is there instead of building.
#
#   PYTHON=python3.12 tests/gpu/bundle.sh   # then carry gpu-bundle/ there, run tests/gpu/run.sh
#
# PYTHON names an interpreter here of the GPU machine's Python version (major.minor: an
# extension module is built for one): the bundle then holds the Python package too, for
# run.sh's GPU array and CUDA tensor tests. BUILD_DIR (default build-gpu-bundle) is the build;
# NO_BUILD=1 packs it as it is (the suite packs its own build so, to check run.sh's bundle
# path). BUNDLE (default gpu-bundle) is where the bundle goes.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build-gpu-bundle}
bundle=${BUNDLE:-gpu-bundle}
python=${PYTHON:-}

binaries=(tests/gpu_test tests/device_client_test worker/examples/mlp_training server/ps-server
          bench/ps-device-bench bench/ps-bench)
if [ "${NO_BUILD:-0}" != 1 ]; then
  ./deploy/install_deps.sh
  python_flags=(-DHETPS_WITH_PYTHON=OFF)
  if [ -n "$python" ]; then
    python_flags=(-DHETPS_WITH_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "$python")")
  fi
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DHETPS_WITH_CUDA=ON -DHETPS_WITH_NCCL=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80-real;90" "${python_flags[@]}" >/dev/null
  targets=(gpu_test device_client_test mlp_training ps-server ps-device-bench ps-bench)
  if [ -n "$python" ]; then targets+=(_hetps); fi
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
fi
# The Python package, where the build has it: its files lie beside the extension
# (python/CMakeLists.txt).
module=$(cd "$build_dir" && compgen -G "python/hetps/_hetps*.so" || true)
if [ -n "$module" ]; then binaries+=("$module"); fi

rm -rf "$bundle"
mkdir -p "$bundle/lib/ucx"
if [ -n "$module" ]; then
  mkdir -p "$bundle/build/python"
  cp -r "$build_dir/python/hetps" "$bundle/build/python/"
fi
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
