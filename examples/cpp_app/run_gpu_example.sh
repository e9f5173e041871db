#!/usr/bin/env bash
# The C++ example on a CUDA GPU, launching Triton kernels compiled to device binaries, with no Python at run time:
#   bash examples/cpp_app/run_gpu_example.sh OUTDIR
# Needs kabi installed for python3 (`pip install -e .` will do), Triton and cmake. Compiles every Triton matmul
# kernel for this GPU's arch and SM count into OUTDIR/binaries (cubins + manifests), builds the app against the
# installed kabi into OUTDIR/build, then runs it for a few shapes with the Triton binaries forced; each run's output
# is in OUTDIR/<shape>.<dtype>.log. Exits 1 if any step or run fails, 77 if kabi sees no CUDA device.
set -uo pipefail
out=${1:?usage: run_gpu_example.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)

# The arch and SM count as libkabi probes them, so the binaries claim exactly what the app's selection will see.
python3 - "$out/binaries" <<'EOF' || exit $?
import sys, time
import kabi
from kabi.backends.triton import compile_all

try:
    gpu = kabi.device_info("cuda", 0)
except kabi.NotFoundError as error:
    print(f"run_gpu_example.sh: {error}")
    sys.exit(77)
start = time.perf_counter()
paths = compile_all(gpu.arch, sys.argv[1], dtypes=("float16", "bfloat16"), multiprocessors=gpu.compute_units)
print(f"compiled {len(paths)} Triton binaries for {gpu.name} (sm_{gpu.arch}, {gpu.compute_units} SMs) into "
      f"{sys.argv[1]} in {time.perf_counter() - start:.1f} s")
sys.exit(0 if paths else 1)
EOF

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$here" -B "$out/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -Dkabi_DIR="$(python3 -m kabi.config --cmakedir)" > "$out/cmake.log" 2>&1 \
  && cmake --build "$out/build" -j "$(nproc)" >> "$out/cmake.log" 2>&1 \
  || { cat "$out/cmake.log"; echo "run_gpu_example.sh: building the app failed"; exit 1; }

failed=0
summary=()
for run in "16x4096x4096 bfloat16" "512x1024x1024 bfloat16" "64x64x64 float16"; do
  read -r shape dtype <<< "$run"
  log="$out/$shape.$dtype.log"
  echo "== kabi_matmul_app --device cuda --dtype $dtype --shape $shape --force triton --allow-unverified"
  "$out/build/kabi_matmul_app" --device cuda --dtype "$dtype" --shape "$shape" --iterations 500 \
      --binaries "$out/binaries" --force triton --allow-unverified > "$log" 2>&1
  status=$?
  grep -v '^candidate ' "$log"  # the full candidate list stays in the log
  pick=$(sed -n 's/^pick: \([^ ]*\).*/\1/p' "$log")
  gpu_time=$(sed -n 's/^time: \([0-9.]* us\) per launch on the GPU.*, \([0-9.]* TFLOP\/s\).*/\1, \2/p' "$log")
  result=$(sed -n 's/^result: .*: \(ok\|WRONG\)$/\1/p' "$log")
  if [ "$status" -ne 0 ] || ! grep -q '^kind: device binary, backend triton\($\|, \)' "$log"; then
    echo "run_gpu_example.sh: $shape $dtype FAILED (exit status $status)"
    result="FAILED (exit status $status)"
    failed=1
  fi
  summary+=("$shape $dtype|$pick|$gpu_time|$result")
done

printf '\n%-24s %-80s %-24s %s\n' problem pick "GPU time" result
for row in "${summary[@]}"; do
  IFS='|' read -r problem pick gpu_time result <<< "$row"
  printf '%-24s %-80s %-24s %s\n' "$problem" "${pick:--}" "${gpu_time:--}" "$result"
done
exit "$failed"
