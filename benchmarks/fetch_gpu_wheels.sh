#!/usr/bin/env bash
# Download, into .whl/ (git-excluded), the wheels that building kabi needs on the H200 machine but its image lacks:
# apache-tvm-ffi (dlpack.h), scipy-openblas32 (the CPU plugin's OpenBLAS) and nvidia-cutlass (CUTLASS's headers for
# the CUDA plugin; only the headers are used, so its dependencies are not fetched). They are for that machine's
# Python 3.12 on x86-64; benchmarks/run_gpu.sh installs them there. Run here, before a device call with carry [".whl"].
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl apache-tvm-ffi scipy-openblas32 nvidia-cutlass
ls .whl
