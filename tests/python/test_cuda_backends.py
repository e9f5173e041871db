"""The CUDA backends (Triton) register on the first dispatch to a CUDA device, and only then."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import kabi


def test_cpu_dispatch_does_not_import_triton() -> None:
    # A fresh process: only CPU dispatch, so Triton (seconds to import) must stay unimported.
    script = (
        "import sys, torch, kabi\n"
        "kabi.ops.matmul(torch.randn(8, 8), torch.randn(8, 8))\n"
        "print('triton' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**os.environ, "KABI_TUNE": "off"})
    assert result.stdout.strip() == "False"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_first_cuda_dispatch_registers_triton_kernels() -> None:
    a = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    result = kabi.ops.matmul(a, b)
    assert any(kernel.backend == "triton" for kernel in kabi.kernels("matmul"))
    reference = a.double() @ b.double()
    assert ((result.double() - reference).norm() / reference.norm()).item() < 1.2e-2
