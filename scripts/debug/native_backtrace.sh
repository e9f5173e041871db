#!/usr/bin/env bash
# Run a command that crashes natively and print the C/C++ stack with file:line for kabi's libraries.
# Usage: bash scripts/debug/native_backtrace.sh python3 scripts/gpu_tuning_repro.py
# Uses gdb when installed; otherwise preloads segv_backtrace.so and resolves kabi frames with addr2line.
# Build kabi with debug info first for line numbers (-C cmake.build-type=RelWithDebInfo).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if command -v gdb > /dev/null; then
  program=$(command -v "$1"); shift
  # A pyenv-style shim is a shell script: give gdb the interpreter it finally runs.
  if [ "$(head -c 2 "$program")" = "#!" ]; then program=$(python3 -c "import sys; print(sys.executable)"); fi
  exec gdb -q -batch -ex run -ex bt --args "$program" "$@"
fi
library=$(mktemp -d)/segv_backtrace.so
cc -shared -fPIC -O1 -o "$library" "$here/segv_backtrace.c" -ldl
log=$(mktemp)
LD_PRELOAD="$library${LD_PRELOAD:+:$LD_PRELOAD}" PYTHONFAULTHANDLER= "$@" 2> >(tee "$log" >&2)
status=$?
sleep 1
grep -E '^  frame [0-9]+: .*(libkabi|_core|kabi_cpu)' "$log" | while read -r _ number file plus _; do
  echo "frame ${number%:} $(addr2line -f -C -i -e "$file" "${plus#+}" | paste -sd ' ')"
done
exit $status
