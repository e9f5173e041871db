"""Launching a device binary where there is no GPU: the core reads and checks a kernel's image before it asks the
driver for anything, so a launch on made-up CUDA addresses shows what that check says (and, when the image passes,
the driver's refusal that follows)."""

from __future__ import annotations

import torch

from kabi import _core
from kabi._base.tensors import meta_descriptor


def launch_matmul_at_made_up_addresses(kernel: str, dtype: torch.dtype, size: int = 128) -> None:
    """Launch a matmul kernel on row-major ``size`` x ``size`` matrices at made-up cuda:0 addresses."""
    device = torch.device("cuda", 0)
    descriptors = [((index + 1) << 20, *meta_descriptor((size, size), dtype, device)[1:]) for index in range(3)]
    _core.launch("matmul", kernel, descriptors[:2], descriptors[2:], 0)
