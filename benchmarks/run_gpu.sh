#!/usr/bin/env bash
# One call on the GPU machine does it all: install what its image lacks, build kabi, run the GPU tests and the
# benchmarks, leave results under benchmarks/results/ (and $OUT when set), print a short table.
# Usage: bash benchmarks/fetch_gpu_wheels.sh here (and, to skip compiling the CUDA plugin there,
# bash benchmarks/prebuilt_cuda_plugin.sh build), then (device tool) bash benchmarks/run_gpu.sh [STEP ...] with
# carry [".whl", ".prebuilt"]. Steps: tests cuda memcheck repro overhead bench:llm-decode triton decode cpp fp8 (default: all, in
# that order), and native (the GPU tests of the Triton binaries, grouped, linear and scaled_mm ones included, and kabi.cuda alone), firstcall (fresh processes' first calls; firstcall-shipped: with shipped binaries only),
# distributed (2 GPUs). Each
# step has its own time limit so that one hanging step still leaves the others' results and the table.
# bench:[OP/]SUITE[:DTYPE] runs `kabi bench OP --suite SUITE [--dtype DTYPE]` (OP: matmul when not given) for 240 s
# at most (then interrupts it, which still plots what was measured, and the step shows FAILED), writing
# benchmarks/results/GPU-OP-SUITE[-DTYPE].json and .png (GPU: the card's name, e.g. nvidia-h200). Each benchmark step starts over (--fresh): the
# JSON committed from an earlier run would otherwise be resumed, or refused when its peers or timing differ. With
# RESUME=1 a step resumes instead: the JSON is written after every problem, so a suite that needs longer than one
# device call goes on where the previous call stopped.
# fp8 runs `kabi bench scaled_mm --suite fp8` (the issue's FP8 suite, both kinds of scales) the same way, 540 s at
# most, into benchmarks/results/GPU-scaled_mm-fp8.json and .png.
# fp8peak times 8192^3 FP8 GEMMs (torch._scaled_mm and kabi's pick) flushed, back to back and in a burst, into
# benchmarks/results/fp8-peak-GPU.json.
# moe:SUITE likewise runs `kabi bench grouped_mm --suite SUITE` (moe-mixtral-8x7b, moe-deepseek-v3,
# moe-qwen3-30b-a3b) for 420 s at most, writing benchmarks/results/GPU-grouped_mm-SUITE.json and .png.
# pytest:PATH[,PATH...] runs those GPU test files only (junit XML gpu-tests-subset.xml); tests:I/N runs the
# I-th of N shares of the GPU tests, for when the whole suite outlasts one device call.
# py:FILE runs a script of this tree (e.g. py:scripts/debug/aligned_copies.py, arguments in PY_ARGS) with the same
# environment, its output also in <stem>.txt.
# What comes back: $OUT holds run_gpu.log and results.tar.gz, every file this run wrote (JSON, plots, profiles, junit
# XML, outputs), repacked after every step. The device tool returns at most 8 files a call, and a run of several steps
# writes more: loose files past the eighth were lost.
# BENCH_TIMEOUT overrides every benchmark step's limit (seconds), to fit several into one device call.
fresh_run=(--fresh)
[ "${RESUME:-0}" = 1 ] && fresh_run=()
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/kabi-gpu-out}
mkdir -p "$out"
log="$out/run_gpu.log"
collected=$(mktemp -d)
started_marker=$(mktemp)
exec > >(tee -a "$log") 2>&1
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
# Results are named after the GPU that produced them (nvidia-h200, nvidia-h100): the device tool may lend either.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' | awk '{print $1 "-" $2}')
[ -n "$gpu" ] || gpu=unknown-gpu
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)'

# The device tool copies the tree afresh for every call, with new modification times, so ninja would rebuild all of
# it (75-110 s a call on the H200) although the build directory of the previous call is still there. A warm machine
# whose install came from the same sources skips the build: what the build reads (the C++ sources, CMake files,
# pyproject.toml, the registry it installs) by content, and the Python package's file names (the editable install
# maps those, and reads their contents from the tree).
start=$(date +%s)
# The CUDA plugin built on the CPU machine (benchmarks/prebuilt_cuda_plugin.sh build, carry [".prebuilt"]) is
# installed instead of compiled here where it was built from these very sources and the cuBLASLt it names is here.
prebuilt_plugin=
if [ -f .prebuilt/libkabi_cuda.so ] && [ -f .prebuilt/libkabi_cuda.stamp ]; then
  if [ "$(awk '$1 == "stamp" {print $2}' .prebuilt/libkabi_cuda.stamp)" = "$(bash benchmarks/prebuilt_cuda_plugin.sh stamp)" ] \
     && [ -e "$(awk '$1 == "cublaslt" {print $2}' .prebuilt/libkabi_cuda.stamp)" ]; then
    prebuilt_plugin=$PWD/.prebuilt/libkabi_cuda.so
    echo "build: the CUDA plugin from .prebuilt ($(awk '$1 == "nvcc" {$1 = ""; print}' .prebuilt/libkabi_cuda.stamp))"
  else
    echo "build: .prebuilt/libkabi_cuda.so is not from these sources, or names a cuBLASLt not here; compiling the plugin"
  fi
fi
build_stamp=build/gpu/kabi-sources.sha1
sources_stamp() {
  { find csrc cmake registry CMakeLists.txt pyproject.toml -type f -print0 | sort -z | xargs -0 sha1sum
    find python -type f -name '*.py' | sort; echo "prebuilt plugin: $prebuilt_plugin"; } | sha1sum | cut -d' ' -f1
}
build_kabi() {
  python3 -m pip install -q --no-build-isolation --no-deps -e . -C build-dir=build/gpu \
    -C cmake.define.KABI_CUDA_PLUGIN_PREBUILT="$prebuilt_plugin"
}
# Whether the installed CUDA plugin loads here and registers kernels for this GPU.
cuda_plugin_serves() {
  (cd / && python3 -c 'import sys, kabi
sys.exit(not any(p.name == "kabi-cuda" and p.loaded and p.num_kernels for p in kabi.plugins()))')
}
sources=$(sources_stamp)
if [ -f "$build_stamp" ] && [ "$(cat "$build_stamp")" = "$sources" ] && (cd / && python3 -c 'import kabi._core') 2>/dev/null; then
  echo "build: kept (sources unchanged since the previous call's build)"
else
  rm -f "$build_stamp"
  build_kabi || { echo "BUILD FAILED"; exit 1; }
  if [ -n "$prebuilt_plugin" ] && ! cuda_plugin_serves; then
    echo "build: the prebuilt CUDA plugin does not load or registers no kernel here; compiling it"
    prebuilt_plugin=
    sources=$(sources_stamp)
    build_kabi || { echo "BUILD FAILED"; exit 1; }
  fi
  echo "$sources" > "$build_stamp"
  echo "build: $(( $(date +%s) - start )) s"
fi

status=()
# Only what this run wrote comes back, packed after every step: a call that runs past the device's limit still
# brings back the results of the steps that finished. The archive is replaced whole, never left half written.
collect_results() {
  find benchmarks/results -maxdepth 1 -type f ! -name README.md -newer "$started_marker" \
    -exec cp {} "$collected"/ \; 2>/dev/null || true
  tar -czf "$out/.results.tar.gz" -C "$collected" . && mv "$out/.results.tar.gz" "$out/results.tar.gz"
}
run_step() {
  local name=$1; shift
  local t0=$(date +%s)
  if "$@"; then status+=("$name|ok|$(( $(date +%s) - t0 ))s"); else status+=("$name|FAILED|$(( $(date +%s) - t0 ))s"); fi
  collect_results
}
# pytest under a time limit: SIGINT at the limit, so pytest ends as on Ctrl-C, with the summary and the junit XML of
# the tests that ran (a share stopped by its limit still says which passed, and which test it stopped in); killed
# 20 s later if a test does not give way.
pytest_within() {
  local seconds=$1; shift
  timeout -s INT -k 20 "$seconds" python3 -m pytest "$@"
}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests cuda memcheck repro overhead bench:llm-decode triton decode cpp fp8)
for step in "${steps[@]}"; do
  case $step in
    # tests:I/N: the I-th of N shares of the GPU tests (tests/conftest.py's --share), for a suite longer than one call.
    tests|tests:*) share=${step#tests}; share=${share#:}
                   run_step "gpu tests${share:+ $share}" pytest_within ${GPU_TESTS_TIMEOUT:-540} -q -m gpu tests \
                     --continue-on-collection-errors --durations=15 ${share:+--share "$share"} \
                     --junitxml="$collected/gpu-tests${share:+-${share/\//-of-}}.xml" ;;
    # The CUDA plugin (libkabi_cuda.so): its build checks (SASS, registration) and every kernel on this GPU.
    cuda) run_step "cuda plugin" pytest_within 420 -q -rs tests/python/test_cuda_plugin.py \
            tests/python/test_cuda_plugin_gpu.py tests/python/test_cuda_plugin_fp8_gpu.py \
            tests/python/test_cuda_plugin_fp8_fast_accum_gpu.py tests/python/test_cuda_plugin_grouped_gpu.py \
            --junitxml="$collected/cuda-plugin-tests.xml" ;;
    # compute-sanitizer memcheck over a small suite of every CUDA plugin kernel (the guard-region checks of the same
    # tests are the fallback where the tool refuses the device).
    memcheck) run_step "cuda plugin memcheck" timeout 540 compute-sanitizer --tool memcheck --error-exitcode 1 \
                --target-processes all python3 -m pytest -q -x -p no:cacheprovider tests/python/test_cuda_plugin_gpu.py \
                -k "bfloat16 and (every_matmul_kernel and transposed or every_linear_kernel and relu or misaligned or aligned_copies_pad or split_k_gemv or decode_mma)"
              run_step "cuda plugin grouped memcheck" timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
                --target-processes all python3 -m pytest -q -x -p no:cacheprovider \
                tests/python/test_cuda_plugin_grouped_gpu.py -k "bfloat16 and (empty-groups or rows-past or single-row or clamped or 3d_form)" ;;
    # The first CUDA dispatch with tuning on (a failure seen here once, inside the tuner's second selection).
    repro) run_step "first tuned CUDA dispatch" timeout 120 python3 scripts/gpu_tuning_repro.py ;;
    overhead) run_step "overhead" timeout 120 python3 benchmarks/overhead.py \
                --output benchmarks/results/overhead-$gpu.json ;;
    bench:*) IFS=: read -r _ target dtype <<< "$step"
             op=matmul; suite=$target
             [[ $target == */* ]] && { op=${target%%/*}; suite=${target#*/}; }
             name="$gpu-$op-$suite${dtype:+-$dtype}"
             run_step "bench $op $suite ${dtype:-}" timeout -s INT ${BENCH_TIMEOUT:-240} python3 -m kabi.cli bench "$op" --suite "$suite" \
               ${dtype:+--dtype "$dtype"} --device cuda "${fresh_run[@]}" --out "benchmarks/results/$name.json" \
               --plot "benchmarks/results/$name.png" ;;
    fp8) name="$gpu-scaled_mm-fp8"
         run_step "bench scaled_mm fp8" timeout -s INT ${BENCH_TIMEOUT:-540} python3 -m kabi.cli bench scaled_mm --suite fp8 \
           --device cuda "${fresh_run[@]}" --out "benchmarks/results/$name.json" --plot "benchmarks/results/$name.png" ;;
    moe:*) IFS=: read -r _ suite <<< "$step"
           name="$gpu-grouped_mm-$suite"
           run_step "bench grouped_mm $suite" timeout -s INT ${BENCH_TIMEOUT:-420} python3 -m kabi.cli bench grouped_mm --suite "$suite" \
             --device cuda "${fresh_run[@]}" --out "benchmarks/results/$name.json" --plot "benchmarks/results/$name.png" ;;
    # 8192^3 FP8 GEMMs timed three ways (L2 flushed per call, back to back, a burst after idling) with the SM clock
    # and power sampled: where the FP8 target's figure depends on the method rather than the kernel.
    fp8peak) run_step "fp8 peak" timeout 240 python3 benchmarks/fp8_peak.py \
               --output benchmarks/results/fp8-peak-$gpu.json ;;
    # A script of this tree (scripts/debug/*.py, a probe) with the environment the other steps get (the wheels'
    # path, the fresh build): py:FILE runs `python3 FILE $PY_ARGS`, its output also in <FILE's stem>.txt.
    py:*) script=${step#py:}
          run_step "python $script" timeout ${PY_TIMEOUT:-300} bash -c \
            'python3 "$1" ${PY_ARGS:-} 2>&1 | tee "$2"; exit "${PIPESTATUS[0]}"' _ "$script" "$collected/$(basename "$script" .py).txt" ;;
    # A subset of the GPU tests: pytest:PATH[,PATH...] runs `pytest -q -m gpu PATH...`.
    pytest:*) IFS=, read -r -a test_paths <<< "${step#pytest:}"
              run_step "pytest ${step#pytest:}" pytest_within ${GPU_TESTS_TIMEOUT:-300} -q -m gpu -rs \
                "${test_paths[@]}" --junitxml="$collected/gpu-tests-subset.xml" ;;
    triton) run_step "triton matmul" timeout 240 python3 benchmarks/triton_matmul.py --out benchmarks/results ;;
    decode) run_step "decode at the memory roof" timeout 300 python3 benchmarks/decode.py \
              --output benchmarks/results/decode-$gpu.json ;;
    # Twice: as a build without shipped Triton binaries (each cold call compiles them), then as a wheel that ships
    # them (kabi binaries compile --native into the package, as a release build for sm_90 would). firstcall-shipped:
    # the second only.
    firstcall|firstcall-shipped)
               [[ $step == firstcall ]] && run_step "first call" timeout 300 python3 benchmarks/first_call.py --runs 2 \
                 --output benchmarks/results/first-call-$gpu.json
               # The table of every binary would push the step's figures out of the device call's output tail: it
               # goes to a file, and the count and the path stay in the log.
               run_step "ship binaries" timeout 240 bash -c 'python3 -m kabi.cli binaries compile --native --arch 90 \
                 --out python/kabi/binaries/triton > /tmp/kabi-ship-binaries.txt && echo "binaries shipped:" \
                 "$(grep -c "\.cubin" /tmp/kabi-ship-binaries.txt)" && tail -1 /tmp/kabi-ship-binaries.txt'
               run_step "first call, binaries shipped" timeout 300 python3 benchmarks/first_call.py --runs 2 \
                 --output benchmarks/results/first-call-shipped-binaries-$gpu.json \
                 --profile benchmarks/results/first-call-shipped-binaries-profile-$gpu.txt \
                 --profile-warm benchmarks/results/first-call-shipped-binaries-warm-profile-$gpu.txt ;;
    # Needs 2 GPUs (the nvidia-h200-x2 kind): tuning time on 1 and 2 ranks, NCCL.
    distributed) run_step "tuning on 1 and 2 ranks" timeout 420 python3 benchmarks/distributed_tuning.py --worlds 1 2 \
                   --output benchmarks/results/distributed-tuning-$gpu-x2.json ;;
    # The app's build and binaries stay on the machine (the device tool brings back only a few files); its logs
    # come back as one archive.
    cpp) run_step "cpp app on cuda" timeout 180 bash examples/cpp_app/run_gpu_example.sh /tmp/kabi-cpp-app
         tar -czf "$collected/cpp_app-logs.tar.gz" -C /tmp/kabi-cpp-app --exclude=binaries --exclude=build . 2>/dev/null || true
         collect_results ;;
    native) run_step "triton binaries and kabi.cuda" pytest_within 420 -q -m gpu \
              tests/python/backends/test_triton_native_gpu.py tests/python/backends/test_cuda_source_gpu.py \
              tests/python/backends/test_triton_gpu.py tests/python/test_cpp_app_cuda.py \
              tests/python/backends/test_triton_grouped_gpu.py tests/python/test_grouped_mm_gpu.py \
              tests/python/backends/test_triton_scaled_mm_native_gpu.py \
              --junitxml="$collected/gpu-native.xml" ;;
    *) echo "unknown step $step"; status+=("$step|UNKNOWN|0s") ;;
  esac
done

printf '\n%-36s %-8s %s\n' step result time
for row in "${status[@]}"; do IFS='|' read -r a b c <<< "$row"; printf '%-36s %-8s %s\n' "$a" "$b" "$c"; done
