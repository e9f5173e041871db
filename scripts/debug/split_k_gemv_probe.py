"""Which tiling the split-K GEMV (`cuda.gemv.split_k`) should use: builds split_k_gemv_probe.cu with nvcc and times
its tilings on bfloat16 problems of few rows with a row-major b (CUDA-graph replay, enough copies of b that each
replay reads it from HBM), then times, the same way, torch.matmul and kabi's plugin kernel as registered.

    python scripts/debug/split_k_gemv_probe.py [--shapes 7x14335x4097 1x4096x4096 ...]   (shapes M x N x K)
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile

import torch

import kabi
from _probe_common import build_probe, graph_time_us

_DEFAULT_SHAPES = ["7x14335x4097", "1x4095x4097", "1x4096x4096", "16x4096x4096", "1x6144x4096", "16x14336x4096"]


def _peers(shape: str) -> None:
    m, n, k = (int(size) for size in shape.split("x"))
    copies = min(20, (256 << 20) // (2 * n * k) + 1)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bs = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    rotation = (bs * (20 // copies + 1))[:20]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    expected = a.float() @ bs[0].float()
    subjects = {"torch.matmul": lambda b: torch.matmul(a, b, out=out)}
    with kabi.use(matmul="cuda.gemv.split_k"):
        kabi.ops.matmul(a, bs[0], out=out)
        error = ((out.float() - expected).abs().max() / expected.abs().max()).item()
        plugin_us = graph_time_us([lambda b=b: kabi.ops.matmul(a, b, out=out) for b in rotation], 30, 0)
    torch_us = graph_time_us([lambda b=b: subjects["torch.matmul"](b) for b in rotation], 30, 0)
    print(f"{m:6d} {n:6d} {k:6d}  {'torch.matmul':32s} {torch_us:8.1f} us")
    print(f"{m:6d} {n:6d} {k:6d}  {'kabi cuda.gemv.split_k':32s} {plugin_us:8.1f} us  rel error {error:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=_DEFAULT_SHAPES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        probe = build_probe("split_k_gemv_probe", directory)
        if not torch.cuda.is_available():
            print("split_k_gemv_probe: built the probe; timing it needs a CUDA device, and torch sees none")
            return
        problems = [",".join(shape.split("x")) for shape in args.shapes]
        subprocess.run([str(probe), *problems], check=True)
    for shape in args.shapes:
        _peers(shape)


if __name__ == "__main__":
    main()
