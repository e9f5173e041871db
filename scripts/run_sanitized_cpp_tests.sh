#!/usr/bin/env bash
# Build libkabi, its plugins and the C/C++ test programs with AddressSanitizer + UndefinedBehaviorSanitizer (no
# Python module), then run every CMake-registered test. Any sanitizer report fails the run. The CUDA plugin is left
# out: nvcc takes no sanitizer flags, and its kernels need a GPU to run (this is also CI's build without it).
#   scripts/run_sanitized_cpp_tests.sh            # builds into build/sanitize
#   KABI_SANITIZE_BUILD_DIR=/tmp/asan scripts/run_sanitized_cpp_tests.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${KABI_SANITIZE_BUILD_DIR:-$root/build/sanitize}"
python="${PYTHON:-$(command -v python3)}"

generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

cmake -S "$root" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Debug \
  -DKABI_SANITIZE=ON \
  -DKABI_BUILD_PYTHON=OFF \
  -DKABI_BUILD_TESTS=ON \
  -DKABI_ENABLE_CUDA=OFF \
  -DPython_EXECUTABLE="$python"
cmake --build "$build_dir" -j 2

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$build_dir" --output-on-failure -j 2
