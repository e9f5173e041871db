"""First CUDA dispatch with tuning on: prints the traceback (or the native crash via faulthandler) and the pick."""

import faulthandler
import os
import sys
import tempfile
import traceback

faulthandler.enable()
os.environ.setdefault("KABI_CACHE_DIR", tempfile.mkdtemp())

import torch  # noqa: E402

import kabi  # noqa: E402

for shape in [(16, 4096, 4096), (512, 1024, 1024)]:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    try:
        with kabi.tuning(repeat=3, min_time_s=0.0):
            result = kabi.ops.matmul(a, b)
        reference = a.double() @ b.double()
        error = ((result.double() - reference).norm() / reference.norm()).item()
        print(f"shape {shape}: error {error:.2e}")
        print(kabi.explain(kabi.ops.matmul, a, b))
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
print(kabi.stats())
