"""The built-in CPU plugin (kabi-cpu, OpenBLAS): its registration, and every layout and batch form it accepts
computed exactly (against torch in float64), the rest declined with a reason."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.tensors import descriptor

REPOSITORY = Path(__file__).resolve().parents[2]
KERNEL = "cpu.openblas.gemm"

DTYPE_BITS = {"float16": 1, "bfloat16": 2, "float32": 4, "float64": 8}
LAYOUT_BITS = {"contiguous": 1, "row_strided": 2, "col_strided": 4, "general": 8}
BATCH_MODES = {"none": 0, "uniform": 1, "any": 2}
DEVICE_TYPES = {"cpu": 1, "cuda": 2}
# matmul's correctness gate (registry/ops/matmul.toml), against a float64 reference from the same inputs:
# norm = ||out - ref|| / ||ref|| and extreme = max |out - ref| / max |ref|.
TOLERANCE = {
    dtype: tomllib.loads((REPOSITORY / "registry" / "ops" / "matmul.toml").read_text())["tolerance"][name]
    for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64"))
}


@pytest.fixture(scope="module", autouse=True)
def builtin_plugins() -> None:
    _core.plugin_load_builtin()
    records = [record for record in _core.plugin_records() if record["name"] == "kabi-cpu"]
    assert records and records[0]["loaded"], f"kabi-cpu did not load: {records}"


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    _core.launch("matmul", KERNEL, [descriptor(a), descriptor(b)], [descriptor(out)])


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    reference = torch.matmul(a.double(), b.double())
    out = torch.full(reference.shape, float("nan"), dtype=a.dtype)
    _launch(a, b, out)
    if out.numel() == 0:
        return
    difference = out.double() - reference
    norm = (difference.norm() / reference.norm()).item()
    extreme = (difference.abs().max() / reference.abs().max()).item()
    tolerance = TOLERANCE[a.dtype]
    assert norm <= tolerance["norm"] and extreme <= tolerance["extreme"], (
        f"a {tuple(a.shape)} strides {a.stride()}, b {tuple(b.shape)} strides {b.stride()}: "
        f"norm error {norm}, extreme error {extreme}"
    )


def _matrix(batch: tuple[int, ...], rows: int, cols: int, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """A batch of rows x cols matrices stored in the named layout, with fresh random values."""
    if layout == "contiguous":
        return torch.randn(*batch, rows, cols, dtype=dtype)
    if layout == "row_padded":
        return torch.randn(*batch, rows, cols + 3, dtype=dtype)[..., :cols]
    if layout == "column_major":
        return torch.randn(*batch, cols, rows, dtype=dtype).transpose(-1, -2)
    if layout == "column_padded":
        return torch.randn(*batch, cols, rows + 2, dtype=dtype)[..., :rows].transpose(-1, -2)
    raise AssertionError(layout)


def test_registration_matches_the_registry_file() -> None:
    declared = [kernel for path in sorted((REPOSITORY / "registry" / "kernels" / "cpu").glob("*.toml"))
                for kernel in tomllib.loads(path.read_text())["kernels"]]
    live = {kernel["name"]: kernel for kernel in _core.kernel_list() if kernel["plugin"] == "kabi-cpu"}
    assert sorted(live) == sorted(entry["name"] for entry in declared)
    for entry in declared:
        kernel = live[entry["name"]]
        assert kernel["op"] == entry["op"]
        assert kernel["backend"] == entry["backend"]
        assert kernel["plugin"] == entry["plugin"]
        assert kernel["device_type"] == DEVICE_TYPES[entry["device"]]
        assert kernel["required_features"] == 0 and entry["features"] == []
        assert kernel["dtypes"] == sum(DTYPE_BITS[name] for name in entry["dtypes"])
        assert kernel["layouts"] == sum(LAYOUT_BITS[name] for name in entry["layouts"])
        assert kernel["batch_mode"] == BATCH_MODES[entry["batch_mode"]]
        assert kernel["alignment"] == entry["alignment"]
        assert kernel["priority"] == entry["priority"]
        assert kernel["kind"] == "function"
        assert "OpenBLAS" in kernel["fingerprint"], "the fingerprint should change with the OpenBLAS build"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "layout_a,layout_b",
    list(itertools.product(["contiguous", "row_padded", "column_major", "column_padded"], repeat=2)),
)
def test_every_layout_pair(dtype: torch.dtype, layout_a: str, layout_b: str) -> None:
    for m, k, n in [(13, 29, 7), (1, 16, 9), (8, 1, 5), (6, 11, 1), (1, 1, 1), (70, 65, 66)]:
        _check(_matrix((), m, k, layout_a, dtype), _matrix((), k, n, layout_b, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "batch_a,batch_b",
    [
        ((3,), (3,)),  # one stride per tensor
        ((2, 3), (2, 3)),  # several batch dims that flatten to one stride
        ((4,), ()),  # b broadcast to every batch entry
        ((), (5,)),  # a broadcast
        ((1, 1), (2, 3)),  # a broadcast through extents of 1 over two batch dimensions
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "row_padded", "column_major"])
def test_uniform_batches(dtype: torch.dtype, batch_a: tuple, batch_b: tuple, layout: str) -> None:
    _check(_matrix(batch_a, 9, 14, layout, dtype), _matrix(batch_b, 14, 6, "contiguous", dtype))
    _check(_matrix(batch_a, 9, 14, "contiguous", dtype), _matrix(batch_b, 14, 6, layout, dtype))


def test_expanded_batch_with_stride_zero() -> None:
    a = torch.randn(1, 7, 5).expand(4, 7, 5)
    b = torch.randn(4, 5, 3)
    assert a.stride(0) == 0
    _check(a, b)


def test_batch_sliced_with_a_step() -> None:
    a = torch.randn(6, 7, 5)[::2]
    b = torch.randn(3, 5, 4)
    _check(a, b)


def test_zero_k_fills_the_output_with_zeros() -> None:
    a = torch.randn(2, 4, 0)
    b = torch.randn(2, 0, 3)
    out = torch.full((2, 4, 3), float("nan"))
    _launch(a, b, out)
    assert torch.equal(out, torch.zeros(2, 4, 3))


@pytest.mark.parametrize("shape_a,shape_b", [((0, 4), (4, 3)), ((5, 4), (4, 0)), ((0, 2, 4), (4, 3))])
def test_empty_outputs(shape_a: tuple, shape_b: tuple) -> None:
    _check(torch.randn(shape_a), torch.randn(shape_b))


def _candidate_reason(a: torch.Tensor | tuple, b: torch.Tensor | tuple) -> str:
    """Why selection found the CPU kernel ineligible ("" if it is eligible). Tensors or raw descriptors."""
    inputs = [item if isinstance(item, tuple) else descriptor(item) for item in (a, b)]
    selection = _core.select("matmul", inputs, allow_none=True)
    reasons = [candidate["reason"] for candidate in selection["candidates"] if candidate["name"] == KERNEL]
    assert len(reasons) == 1, selection
    return reasons[0]


def test_general_strides_are_declined_with_a_reason() -> None:
    a = torch.randn(8, 10)[:, ::2]  # no unit stride in either matrix dimension
    reason = _candidate_reason(a, torch.randn(5, 3))
    assert reason, "a general-strided input must not be eligible"
    with pytest.raises(kabi.KabiError):
        _launch(a, torch.randn(5, 3), torch.empty(8, 3))


def test_batches_that_do_not_flatten_are_declined() -> None:
    # a broadcasts along the second batch dimension but not the first: no single batch stride exists.
    a = torch.randn(2, 1, 4, 5)
    b = torch.randn(1, 3, 5, 6)
    assert _candidate_reason(a, b)
    with pytest.raises(kabi.KabiError):
        _launch(a, b, torch.empty(2, 3, 4, 6))


def test_dimensions_beyond_32_bits_are_declined() -> None:
    # Selection reads only shapes and strides, so a descriptor with no memory behind it describes the problem.
    k = 2**31
    a = (0, (2, k), (k, 1), 2, 32, 1, 0)
    b = (0, (k, 3), (3, 1), 2, 32, 1, 0)
    assert "32-bit" in _candidate_reason(a, b)
    assert _candidate_reason(torch.randn(2, 5), torch.randn(5, 3)) == ""


def test_output_overlapping_an_input_is_refused() -> None:
    a = torch.randn(6, 6)
    b = torch.randn(6, 6)
    with pytest.raises(kabi.InvalidArgumentError, match="matmul: out overlaps the memory of input a"):
        _launch(a, b, a)
    # The core refuses it for the front too, instead of the kernel declining and another kernel writing in place.
    with kabi.use(matmul="cpu"), pytest.raises(kabi.InvalidArgumentError, match="out overlaps the memory of input b"):
        kabi.ops.matmul(a, b, out=b)
    storage = torch.randn(72)
    with pytest.raises(kabi.InvalidArgumentError, match="out overlaps the memory of input b"):
        _launch(a, storage[30:66].view(6, 6), storage[:36].view(6, 6))


def test_dispatch_forced_to_the_cpu_backend() -> None:
    a = torch.randn(3, 40, 24).transpose(-1, -2)
    b = torch.randn(40, 17)
    with kabi.use(matmul="cpu"):
        out = kabi.ops.matmul(a, b)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


_OPENBLAS_PROBE = r"""
import json, torch, kabi
from kabi import _core
_core.plugin_load_builtin()
record = next(r for r in _core.plugin_records() if r["path"].endswith("libkabi_cpu.so"))
a, b = torch.randn(5, 4), torch.randn(4, 3)
print(json.dumps({"record": record, "matmul": bool(torch.allclose(kabi.ops.matmul(a, b), a @ b, atol=1e-5))}))
"""


def _probe_with_openblas(library: str) -> dict:
    environment = {**os.environ, "KABI_OPENBLAS_LIBRARY": library}
    result = subprocess.run([sys.executable, "-c", _OPENBLAS_PROBE], env=environment, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_missing_openblas_refuses_the_plugin_clearly(tmp_path: Path) -> None:
    report = _probe_with_openblas(str(tmp_path / "libnot_openblas.so"))
    record = report["record"]
    assert not record["loaded"]
    assert "cannot load OpenBLAS" in record["message"] and "KABI_OPENBLAS_LIBRARY" in record["message"]
    assert report["matmul"], "kabi must keep working on the other backends"


def test_openblas_named_by_the_environment_is_used() -> None:
    import scipy_openblas32

    library = Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so"
    report = _probe_with_openblas(str(library))
    assert report["record"]["loaded"], report["record"]["message"]
    assert report["matmul"]
