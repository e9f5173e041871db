"""Every FP8 scaled_mm candidate forced in turn against torch._scaled_mm on a few shapes, tensor-wise and row-wise
scales, interleaved with conditioning (a quick look before the full `kabi bench scaled_mm --suite fp8`).

    python scripts/debug/fp8_kernels.py [--shapes 8192x8192x8192 2048x4096x4096] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics

import torch

import kabi


def _inputs(m: int, n: int, k: int, row_scales: bool):
    device = torch.device("cuda")
    a = (torch.randn(m, k, device=device) / 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=device) / 4).to(torch.float8_e4m3fn).t()
    if row_scales:
        return a, b, torch.rand(m, 1, device=device) + 0.5, torch.rand(1, n, device=device) + 0.5
    return a, b, torch.tensor(0.8, device=device), torch.tensor(1.2, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["8192x8192x8192", "2048x4096x4096"])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    for shape in args.shapes:
        m, n, k = (int(size) for size in shape.split("x"))
        for row_scales in (False, True):
            a, b, scale_a, scale_b = _inputs(m, n, k, row_scales)
            peer = lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
            call = lambda: kabi.ops.scaled_mm(a, b, scale_a, scale_b)
            reference = peer().float()
            names = [c.name for c in kabi.explain(kabi.ops.scaled_mm, a, b, scale_a, scale_b).candidates if c.eligible]
            subjects = {"torch._scaled_mm": (peer, None)} | {name: (call, name) for name in names}
            times: dict[str, list[float]] = {name: [] for name in subjects}
            for round_index in range(args.rounds):
                order = list(subjects) if round_index % 2 == 0 else list(subjects)[::-1]
                for name in order:
                    fn, forced = subjects[name]
                    with kabi.use(scaled_mm=forced) if forced else kabi.use():
                        if round_index == 0 and forced:
                            error = ((fn().float() - reference).norm() / reference.norm()).item()
                            if error > 1e-2:
                                print(f"  {name}: relative error {error:.2e}")
                        kabi.bench(fn, repeat=3, min_time_s=0.03)  # conditioning at this subject's own load
                        times[name].append(kabi.bench(fn, repeat=11, min_time_s=0.05).median_us)
            flops = 2 * m * n * k
            print(f"{shape} {'row-wise' if row_scales else 'tensor-wise'} scales")
            for name, values in sorted(times.items(), key=lambda item: statistics.median(item[1])):
                median = statistics.median(values)
                print(f"  {name:<60} {median:9.1f} us {flops / median / 1e6:7.0f} TF/s")


if __name__ == "__main__":
    main()
