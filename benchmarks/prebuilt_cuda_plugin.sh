#!/usr/bin/env bash
# The CUDA plugin (libkabi_cuda.so) built here, on the CPU machine, for the GPU machine, so that a device call's build
# compiles only the core: the plugin's CUTLASS units are most of the 85-110 s a cold GPU machine spends building
# kabi, and every call to a fresh machine pays it again.
#
#   bash benchmarks/prebuilt_cuda_plugin.sh build   build it into .prebuilt/ (git-excluded; pass carry [".prebuilt"])
#   bash benchmarks/prebuilt_cuda_plugin.sh stamp   print the stamp of the sources the plugin is built from
#
# benchmarks/run_gpu.sh installs .prebuilt/libkabi_cuda.so instead of building the plugin only where the stamp it
# computes there equals the one recorded here and the cuBLASLt path compiled in exists there; otherwise it builds
# the plugin from source as before. The stamp covers what the compiler reads: the plugin's sources, kabi's public
# headers, the CMake files, DLPack's header and the CUTLASS version. Needs the build requirements (pyproject.toml)
# importable by python3, nvcc, cmake and ninja.
set -euo pipefail
# Paths sorted and globbed bytewise: the GPU machine computes the same stamp whatever its locale's collation.
export LC_ALL=C
cd "$(dirname "$0")/.."

stamp() {
  local dlpack
  dlpack=$(python3 -c "import os, tvm_ffi; print(os.path.join(os.path.dirname(tvm_ffi.__file__), 'include', 'dlpack', 'dlpack.h'))")
  {
    find csrc/include csrc/plugins/cuda cmake -type f -print0 | sort -z | xargs -0 sha1sum
    sha1sum CMakeLists.txt csrc/plugins/*.hpp
    sha1sum < "$dlpack"
    python3 -c "import importlib.metadata as m; print('nvidia-cutlass', m.version('nvidia-cutlass'))"
  } | sha1sum | cut -d' ' -f1
}

case ${1:-} in
  stamp) stamp ;;
  build)
    # The libcublasLt the plugin tries first at run time: the GPU machine's, which this machine does not have.
    cublaslt=${KABI_GPU_CUBLASLT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13}
    build_dir=build/prebuilt-cuda
    # Taken before compiling, so that a source edited during the build makes the stamp stale rather than wrong.
    sources_stamp=$(stamp)
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKABI_BUILD_PYTHON=OFF -DKABI_BUILD_TESTS=OFF \
      -DKABI_CUDA_PLUGIN_PREBUILT= -DKABI_CUDA_DEFAULT_CUBLASLT="$cublaslt" > "$build_dir.configure.log"
    cmake --build "$build_dir" --target kabi_cuda
    grep -qx '/.prebuilt/' .git/info/exclude 2>/dev/null || echo '/.prebuilt/' >> .git/info/exclude
    mkdir -p .prebuilt
    cp "$build_dir/lib/libkabi_cuda.so" .prebuilt/
    { echo "stamp $sources_stamp"; echo "cublaslt $cublaslt"; echo "nvcc $(nvcc --version | tail -1)"; } > .prebuilt/libkabi_cuda.stamp
    cat .prebuilt/libkabi_cuda.stamp ;;
  *) echo "usage: $0 build|stamp" >&2; exit 2 ;;
esac
