"""A fixture for the torch-integration tests: a Python matmul kernel that counts its calls, forced for the test, so
a test can tell that a call (compiled, backward, array) really ran through kabi's dispatch."""

from __future__ import annotations

import pytest
import torch

import kabi


class KernelSpy:
    """``torch.matmul`` as a kabi kernel; ``calls`` lists the input shapes of every call, ``pointers`` the data
    pointers of its inputs and of the tensor it returned."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], ...]] = []
        self.pointers: list[tuple[int, int, int]] = []

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append((tuple(a.shape), tuple(b.shape)))
        result = torch.matmul(a, b, out=out)
        self.pointers.append((a.data_ptr(), b.data_ptr(), result.data_ptr()))
        return result


@pytest.fixture
def spy(untuned):
    """The spy kernel, registered for CPU and CUDA (backend "python") and forced for matmul while the test runs."""
    kernel = KernelSpy()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = []
    for device in devices:
        name = f"test.spy.matmul.{device}"
        kabi.register_kernel("matmul", kernel, name=name, device=device, fingerprint="spy")
        names.append(name)
    try:
        with kabi.use(matmul="python"):
            yield kernel
    finally:
        for name in names:
            kabi.unregister_kernel("matmul", name)
