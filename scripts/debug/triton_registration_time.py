"""Time registering the Triton backend's device binaries (register_triton_kernels("cuda")) in fresh processes, with
an sm_90 device of 132 multiprocessors faked so that a CPU machine times what a warm H100/H200 process pays before
its first call: every binary is found on disk (KABI_CACHE_DIR must hold them: `kabi binaries compile --native
--arch 90`), none is compiled.

    python scripts/debug/triton_registration_time.py --runs 7 [--profile]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

_CHILD = r"""
import cProfile, pstats, sys, time
from types import SimpleNamespace
import torch
import kabi
import kabi._base.devices as devices
devices.devices = lambda: (SimpleNamespace(device_type="cuda", arch=90, compute_units=132),)
profile = cProfile.Profile() if sys.argv[1] == "1" else None
if profile: profile.enable()
start = time.perf_counter()
from kabi.backends.triton import register_triton_kernels
names = register_triton_kernels("cuda")
elapsed = time.perf_counter() - start
if profile:
    profile.disable()
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
print(elapsed, len(names))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile one more run, to stderr")
    arguments = parser.parse_args()
    times = []
    for _ in range(arguments.runs):
        output = subprocess.run([sys.executable, "-c", _CHILD, "0"], check=True, capture_output=True, text=True)
        elapsed, count = output.stdout.split()
        times.append(float(elapsed))
    print(f"register_triton_kernels('cuda'): {count} kernels; best {min(times) * 1e3:.1f} ms, "
          f"median {statistics.median(times) * 1e3:.1f} ms over {arguments.runs} fresh processes")
    if arguments.profile:
        subprocess.run([sys.executable, "-c", _CHILD, "1"], check=True)


if __name__ == "__main__":
    main()
