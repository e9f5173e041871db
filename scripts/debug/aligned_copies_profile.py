"""Where the time of the CUDA plugin's ``cuda.cublaslt.aligned_copies`` goes: each GPU kernel of its call (the padded
copies, cuBLASLt's GEMM on the padded problem, the copy back) timed by torch.profiler over repeated calls, beside
torch.mm of the same padded operands (torch's cuBLAS pick for the padded problem).

    python scripts/debug/aligned_copies_profile.py [--shapes 4093x4099x4091 2047x2049x2051] [--calls 20]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from kabi import _core
from kabi._base.tensors import descriptor

from aligned_copies import odd_operands  # this directory's script, on sys.path when run as a script


def kernel_times(call, calls: int) -> dict[str, float]:
    """Mean device time per call of each GPU kernel ``call`` launches, in us, by kernel name."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in profiler.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:90]] += event.device_time_total / calls
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["4093x4099x4091", "2047x2049x2051"])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    _core.plugin_load_builtin()
    for title, a, b in odd_operands(args.shapes):
        (m, k), n = a.shape, b.shape[1]
        out = a.new_empty((m, n))
        kp, np_ = -(-k // 8) * 8, -(-n // 8) * 8
        a8 = torch.nn.functional.pad(a, (0, kp - k))
        b8 = (torch.nn.functional.pad(b, (0, np_ - n, 0, kp - k)) if b.stride(1) == 1
              else torch.nn.functional.pad(b.mT, (0, kp - k, 0, np_ - n)).mT)

        def native():
            _core.launch("matmul", "cuda.cublaslt.aligned_copies", [descriptor(a), descriptor(b)],
                         [descriptor(out)], stream=torch.cuda.current_stream().cuda_stream)

        print(title, flush=True)
        for what, call in (("native aligned copies", native), ("torch.mm of padded operands", lambda: a8 @ b8)):
            times = kernel_times(call, args.calls)
            print(f"  {what}: {sum(times.values()):.1f} us of kernels per call")
            for name, us in sorted(times.items(), key=lambda item: -item[1]):
                print(f"    {us:8.1f} us  {name}")
        reference = a.double() @ b.double()
        native()
        print(f"  native rel. error {((out.double() - reference).norm() / reference.norm()).item():.1e}", flush=True)


if __name__ == "__main__":
    main()
