"""Why is one library call timed apart as a peer and as kabi's candidate? (issue 15's open finding)

For one matmul (8192^3 bf16) and one grouped_mm prefill problem (Qwen3 gate_up, 32768 rows) this times, interleaved
in alternating order over many rounds with kabi.bench (L2 flushed, one event pair per call):
the library call made directly; the same torch-native kernel function called directly; kabi's candidate forced
with kabi.use through kabi.ops; and, for grouped_mm, the pieces of kabi's torch-native candidate (clamping the
offsets, zeroing the rows past the last offset two ways). Equal medians put the gap in the runner; unequal ones in the path or the kernel.

    python scripts/debug/peer_vs_candidate.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import kabi
from kabi.backends import torch_native


def _subjects() -> dict[str, dict[str, object]]:
    device = torch.device("cuda")
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    experts, rows, n, k = 128, 32768, 1536, 2048
    x = torch.randn(rows, k, dtype=torch.bfloat16, device=device)
    w = torch.randn(experts, n, k, dtype=torch.bfloat16, device=device).transpose(-2, -1)
    counts = torch.bincount(torch.randint(0, experts, (rows,)), minlength=experts)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(device)
    clamp = lambda: torch.cummax(offs, 0).values.clamp_(0, rows)

    def masked_fill(result):
        return result.masked_fill_((torch.arange(rows, device=device) >= offs[-1])[:, None], 0)

    def where(result):
        keep = torch.arange(rows, device=device) < offs[-1]
        return torch.where(keep[:, None], result, 0)

    return {
        "matmul 8192^3": {
            "torch.matmul direct": (lambda: torch.matmul(a, b), None),
            "kabi torch.matmul.cuda": (lambda: kabi.ops.matmul(a, b), {"matmul": "torch.matmul.cuda"}),
            "kabi auto": (lambda: kabi.ops.matmul(a, b), None),
        },
        "grouped_mm qwen3 gate_up 32768": {
            "F.grouped_mm direct": (lambda: F.grouped_mm(x, w, offs=offs), None),
            "torch_native.grouped_mm direct": (lambda: torch_native.grouped_mm(x, w, offs), None),
            "kabi torch.grouped_mm.cuda": (lambda: kabi.ops.grouped_mm(x, w, offs), {"grouped_mm": "torch.grouped_mm.cuda"}),
            "F.grouped_mm clamped offsets": (lambda: F.grouped_mm(x, w, offs=clamp()), None),
            "clamped + masked_fill tail": (lambda: masked_fill(F.grouped_mm(x, w, offs=clamp())), None),
            "clamped + where tail": (lambda: where(F.grouped_mm(x, w, offs=clamp())), None),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    for problem, subjects in _subjects().items():
        medians: dict[str, list[float]] = {name: [] for name in subjects}
        names = list(subjects)
        for round_index in range(args.rounds):
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                fn, forced = subjects[name]
                with kabi.use(**forced) if forced else kabi.use():
                    medians[name].append(kabi.bench(fn, repeat=11, min_time_s=0.05, flush_l2=True).median_us)
        print(problem)
        for name, values in medians.items():
            print(f"  {name:<34} median {statistics.median(values):9.1f} us  min {min(values):9.1f}  "
                  f"rounds {' '.join(f'{value:.0f}' for value in values)}")


if __name__ == "__main__":
    main()
