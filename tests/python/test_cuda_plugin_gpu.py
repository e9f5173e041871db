"""Every kernel of the built-in CUDA plugin (kabi-cuda: CUTLASS and cuBLASLt) on a GPU, launched directly through the
binding: against the float64 reference with the ops' gate tolerances on fresh random inputs with odd sizes, both
weight layouts and batches; misaligned strides declined (never computed wrong); inside a CUDA-graph capture; and the
output's neighbours untouched (guard regions), which is the memory-safety check where compute-sanitizer cannot run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.core_answers import KernelInfo
from kabi._base.declarations import op_spec
from kabi._base.tensors import descriptor
from kabi._selection.correctness import check_output
from kabi import ConstraintViolatedError

from _c_caller import compile_c_caller
from _cuda_plugin_declarations import PLUGIN, declared_for, mismatches
from _guarded_outputs import POISON, assert_guards_intact, guarded_output
from _linear_checks import ACTIVATION_FUNCTIONS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

DTYPES = [torch.bfloat16, torch.float16]
ACTIVATIONS = list(ACTIVATION_FUNCTIONS)


def _kernels(op: str) -> list[str]:
    _core.plugin_load_builtin()
    return sorted(kernel["name"] for kernel in _core.kernel_list()
                  if kernel["plugin"] == PLUGIN and kernel["op"] == op)


@pytest.fixture(scope="module", autouse=True)
def plugin_kernels() -> None:
    _core.plugin_load_builtin()
    names = _kernels("matmul")
    assert names, "the CUDA plugin registered no kernel on this GPU"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) == (9, 0):
        assert any(name.startswith("cuda.cutlass.sm90.") for name in names), names
    assert any(name.startswith("cuda.cublaslt.algo") for name in names), f"cuBLASLt did not load: {names}"


def test_registration_matches_the_registry_files() -> None:
    arch = torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1]
    declared = declared_for(arch)
    live = {(kernel["op"], kernel["name"]): KernelInfo.from_core(kernel) for kernel in _core.kernel_list()
            if kernel["plugin"] == PLUGIN}
    assert sorted(live) == sorted((spec.op, spec.name) for spec in declared)
    for spec in declared:
        assert not mismatches(live[(spec.op, spec.name)], spec)


def _launch(op: str, kernel: str, inputs: list, out: torch.Tensor, attributes: tuple = ()) -> bool:
    """Run the kernel; False when it declines the call."""
    descriptors = [None if tensor is None else descriptor(tensor) for tensor in inputs]
    try:
        _core.launch(op, kernel, descriptors, [descriptor(out)], stream=torch.cuda.current_stream().cuda_stream,
                     attributes=attributes)
    except ConstraintViolatedError:
        return False
    torch.cuda.synchronize()
    return True


def _check(op: str, out: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    tolerance = op_spec(op).tolerance[str(dtype).removeprefix("torch.")]
    verdict = check_output(out.cpu(), reference.cpu(), tolerance, expected_dtype=dtype)
    assert verdict is None, f"{what}: {verdict}"


def _b(k: int, n: int, dtype: torch.dtype, layout: str, batch: tuple = ()) -> torch.Tensor:
    if layout == "row_major":
        return torch.randn(*batch, k, n, device="cuda").to(dtype)
    return torch.randn(*batch, n, k, device="cuda").to(dtype).transpose(-1, -2)  # nn.Linear weight, transposed


# (batch, M, N, K): aligned sizes every kernel must take, then sizes off every tile.
ALIGNED = [((), 128, 256, 64), ((), 1, 4096, 512), ((), 257, 136, 1032), ((3,), 72, 64, 200)]
ODD = [((), 127, 129, 131), ((), 1, 4095, 4097), ((2,), 33, 17, 9)]
# The kernel that takes only what is off 16 bytes (and every single product of it), declining aligned problems.
ALIGNED_COPIES = "cuda.cublaslt.aligned_copies"
# The kernel that takes only few rows (M up to 16) and a row-major b, at any alignment.
SPLIT_K_GEMV = "cuda.gemv.split_k"
# The kernel that takes only few rows (M up to 16), both b orders, everything 16-byte aligned.
DECODE_MMA = "cuda.decode.mma"


def _k_and_n_for(kernel: str, k: int, n: int) -> tuple[int, int]:
    """Sizes the kernel takes in place of aligned ones: K and N one less for the kernels made for odd sizes."""
    return (k - 1, n - 1) if kernel in (ALIGNED_COPIES, SPLIT_K_GEMV) else (k, n)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["row_major", "transposed"])
def test_every_matmul_kernel_matches_the_reference(dtype: torch.dtype, layout: str) -> None:
    for kernel in _kernels("matmul"):
        for batch, m, n, k in ALIGNED + ODD:
            a = torch.randn(*batch, m, k, device="cuda").to(dtype)
            b = _b(k, n, dtype, layout, batch)
            out, buffer = guarded_output((*batch, m, n), dtype)
            ran = _launch("matmul", kernel, [a, b], out)
            what = f"{kernel} {layout} batch={batch} M={m} N={n} K={k}"
            if (batch, m, n, k) in ALIGNED and kernel.startswith("cuda.cutlass"):
                assert ran, f"{what}: declined an aligned problem"
            if (batch, m, n, k) in ODD and not batch and kernel == ALIGNED_COPIES:
                assert ran, f"{what}: declined a product off 16 bytes"
            if not batch and m <= 16 and layout == "row_major" and kernel == SPLIT_K_GEMV:
                assert ran, f"{what}: declined a row-major product of few rows"
            if (batch, m, n, k) in ALIGNED and not batch and m <= 16 and kernel == DECODE_MMA:
                assert ran, f"{what}: declined an aligned product of few rows"
            if ran:
                _check("matmul", out, a.double() @ b.double(), dtype, what)
                assert_guards_intact(buffer, kernel)
            elif (batch, m, n, k) in ODD and kernel.startswith("cuda.cutlass"):
                assert bool((buffer == POISON).all()), f"{what}: declined but wrote"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batched_matmul_with_a_shared_weight(dtype: torch.dtype) -> None:
    # b broadcast over a's batch folds into one GEMM of batch * M rows.
    for kernel in _kernels("matmul"):
        k, n = _k_and_n_for(kernel, 256, 128)
        m = 3 if kernel in (SPLIT_K_GEMV, DECODE_MMA) else 96  # folded: 12 rows
        a = torch.randn(4, m, k, device="cuda").to(dtype)
        b = torch.randn(k, n, device="cuda").to(dtype)
        out, buffer = guarded_output((4, m, n), dtype)
        assert _launch("matmul", kernel, [a, b], out), f"{kernel} declined a shared weight"
        _check("matmul", out, a.double() @ b.double(), dtype, kernel)
        assert_guards_intact(buffer, kernel)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_strides_are_declined_not_computed_wrong(dtype: torch.dtype) -> None:
    # A row stride of 130 elements (260 bytes) and a base one element off 16 bytes.
    a = torch.randn(64, 130, device="cuda").to(dtype)[:, :128]
    offset = torch.randn(64 * 128 + 1, device="cuda").to(dtype)[1:].view(64, 128)
    b = torch.randn(128, 64, device="cuda").to(dtype)
    for kernel in _kernels("matmul"):
        for left in (a, offset):
            out, buffer = guarded_output((64, 64), dtype)
            if _launch("matmul", kernel, [left, b], out):
                assert not kernel.startswith("cuda.cutlass"), f"{kernel} ran on strides TMA cannot read"
                _check("matmul", out, left.double() @ b.double(), dtype, kernel)
            else:
                assert bool((buffer == POISON).all()), f"{kernel} declined but wrote"


def _linear_inputs(rows: tuple, n: int, k: int, with_bias: bool, transposed: bool, dtype: torch.dtype,
                   activation: str):
    """x [*rows, K], w [N, K] (or a transposed [K, N]), bias [N] or None, fresh random; and the float64 reference
    of linear with the activation."""
    x = torch.randn(*rows, k, device="cuda").to(dtype)
    w = torch.randn(k, n, device="cuda").to(dtype).t() if transposed else torch.randn(n, k, device="cuda").to(dtype)
    bias = torch.randn(n, device="cuda").to(dtype) if with_bias else None
    reference = torch.nn.functional.linear(x.double(), w.double(), None if bias is None else bias.double())
    return x, w, bias, ACTIVATION_FUNCTIONS[activation](reference)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_linear_kernel_matches_the_reference(dtype: torch.dtype, activation: str) -> None:
    index = ACTIVATIONS.index(activation)
    served = []
    for kernel in _kernels("linear"):
        for rows, n, k, with_bias, transposed in [((2, 64), 256, 128, True, False), ((1,), 4096, 512, False, False),
                                                   ((200,), 136, 264, True, True), ((33,), 29, 17, True, False)]:
            x, w, bias, reference = _linear_inputs(rows, n, k, with_bias, transposed, dtype, activation)
            out, buffer = guarded_output((*rows, n), dtype)
            if not _launch("linear", kernel, [x, w, bias], out, attributes=(index,)):
                continue
            served.append(kernel)
            _check("linear", out, reference, dtype,
                   f"{kernel} {activation} rows={rows} N={n} K={k} bias={with_bias} transposed={transposed}")
            assert_guards_intact(buffer, kernel)
    if torch.cuda.get_device_capability() == (9, 0):
        assert any(name.startswith("cuda.cutlass.sm90.") for name in served), "no sm90 CUTLASS epilogue ran"
    if activation in ("none", "relu", "gelu_tanh"):
        assert "cuda.cublaslt.algo0" in served, "cuBLASLt's epilogue should serve this activation"
    else:
        assert not any(name.startswith("cuda.cublaslt") for name in served), "cuBLASLt has no exact epilogue here"


def test_every_kernel_runs_inside_a_cuda_graph() -> None:
    dtype = torch.bfloat16
    for kernel in _kernels("matmul"):
        k, n = _k_and_n_for(kernel, 512, 384)
        few_rows = {SPLIT_K_GEMV: (7, "row_major"), DECODE_MMA: (16, "transposed")}
        m, layout = few_rows.get(kernel, (256, "transposed"))
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = _b(k, n, dtype, layout)
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        assert _launch("matmul", kernel, [a, b], out), kernel  # warm-up: workspace and plans exist before capture
        out.fill_(POISON)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                _core.launch("matmul", kernel, [descriptor(a), descriptor(b)], [descriptor(out)],
                             stream=stream.cuda_stream)
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(dtype))
        graph.replay()
        torch.cuda.synchronize()
        _check("matmul", out, a.double() @ b.double(), dtype, f"{kernel} replayed in a graph")


def _odd_view(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A dense tensor whose data starts one element (2 bytes) past a 16-byte boundary."""
    count = 1
    for extent in shape:
        count *= extent
    return torch.randn(count + 1, device="cuda").to(dtype)[1:].view(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_aligned_copies_pad_whatever_is_off_16_bytes(dtype: torch.dtype) -> None:
    # Each operand off 16 bytes in its own way, and out too: the kernel copies just those, and the result is exact.
    cases = {
        "K and N odd": (torch.randn(300, 261, device="cuda").to(dtype), _b(261, 135, dtype, "row_major"), None),
        "K odd, b transposed": (torch.randn(64, 261, device="cuda").to(dtype), _b(261, 136, dtype, "transposed"), None),
        "a's rows off 16 bytes": (torch.randn(64, 130, device="cuda").to(dtype)[:, :128],
                                  _b(128, 64, dtype, "row_major"), None),
        "a's data off 16 bytes": (_odd_view((64, 128), dtype), _b(128, 64, dtype, "row_major"), None),
        "b's data off 16 bytes": (torch.randn(64, 128, device="cuda").to(dtype), _odd_view((128, 64), dtype), None),
        "out's data off 16 bytes": (torch.randn(64, 128, device="cuda").to(dtype), _b(128, 64, dtype, "row_major"),
                                    _odd_view((64, 64), dtype)),
    }
    for what, (a, b, out) in cases.items():
        shape = (a.shape[0], b.shape[1])
        buffer = None
        if out is None:
            out, buffer = guarded_output(shape, dtype)
        assert _launch("matmul", ALIGNED_COPIES, [a, b], out), f"{what}: declined"
        _check("matmul", out, a.double() @ b.double(), dtype, f"{ALIGNED_COPIES}, {what}")
        if buffer is not None:
            assert_guards_intact(buffer, ALIGNED_COPIES)
    # Aligned problems and unfolded batches are declined, not copied.
    out, _ = guarded_output((64, 64), dtype)
    assert not _launch("matmul", ALIGNED_COPIES, [torch.randn(64, 128, device="cuda").to(dtype),
                                                  _b(128, 64, dtype, "row_major")], out)
    out, _ = guarded_output((2, 33, 17), dtype)
    assert not _launch("matmul", ALIGNED_COPIES, [torch.randn(2, 33, 9, device="cuda").to(dtype),
                                                  _b(9, 17, dtype, "row_major", (2,))], out)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu_tanh"])
def test_aligned_copies_serve_linear_with_a_padded_bias(activation: str) -> None:
    dtype = torch.bfloat16
    x = torch.randn(3, 41, 261, device="cuda").to(dtype)
    w = torch.randn(135, 261, device="cuda").to(dtype)
    bias = _odd_view((135,), dtype)
    out, buffer = guarded_output((3, 41, 135), dtype)
    assert _launch("linear", ALIGNED_COPIES, [x, w, bias], out, attributes=(ACTIVATIONS.index(activation),))
    reference = torch.nn.functional.linear(x.double(), w.double(), bias.double())
    _check("linear", out, ACTIVATION_FUNCTIONS[activation](reference), dtype, f"{ALIGNED_COPIES} {activation}")
    assert_guards_intact(buffer, ALIGNED_COPIES)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_k_gemv_reads_b_at_any_alignment(dtype: torch.dtype) -> None:
    # Few rows, K and N odd (every row of b starts at another offset from 16 bytes), views off 16 bytes, a strided a.
    cases = {
        f"M={m} K={k} N={n}": (torch.randn(m, k, device="cuda").to(dtype), _b(k, n, dtype, "row_major"))
        for m, k, n in [(1, 4097, 4095), (3, 255, 1001), (7, 4097, 14335), (8, 64, 40), (9, 131, 129),
                        (16, 1000, 8), (1, 1, 1), (5, 17, 3)]
    }
    cases["a's rows strided"] = (torch.randn(7, 300, device="cuda").to(dtype)[:, :261],
                                 _b(261, 135, dtype, "row_major"))
    cases["a and b off 16 bytes"] = (_odd_view((4, 333), dtype), _odd_view((333, 517), dtype))
    cases["b's rows strided"] = (torch.randn(2, 99, device="cuda").to(dtype),
                                 torch.randn(99, 260, device="cuda").to(dtype)[:, 3:258])
    for what, (a, b) in cases.items():
        out, buffer = guarded_output((a.shape[0], b.shape[1]), dtype)
        assert _launch("matmul", SPLIT_K_GEMV, [a, b], out), f"{what}: declined"
        _check("matmul", out, a.double() @ b.double(), dtype, f"{SPLIT_K_GEMV}, {what}")
        assert_guards_intact(buffer, SPLIT_K_GEMV)
    # More than 16 rows, a column-major b and an unfolded batch are declined.
    for a, b in [(torch.randn(17, 64, device="cuda").to(dtype), _b(64, 64, dtype, "row_major")),
                 (torch.randn(4, 64, device="cuda").to(dtype), _b(64, 64, dtype, "transposed")),
                 (torch.randn(2, 3, 64, device="cuda").to(dtype), _b(64, 64, dtype, "row_major", (2,)))]:
        out, buffer = guarded_output((*a.shape[:-1], b.shape[-1]), dtype)
        assert not _launch("matmul", SPLIT_K_GEMV, [a, b], out)
        assert bool((buffer == POISON).all())


# (N, K) of the decode MMA kernel's products: neither a power of two (K ends in a part of its 32-element steps, N in
# part of a block of 64 columns); the large layer's shape; and a wide one whose 832 blocks of columns need no split of
# K (the kernel then finishes out itself, without the split sums).
DECODE_SHAPES = [(1032, 2056), (8192, 8192), (53248, 520)]
DECODE_ROWS = [1, 2, 7, 8, 9, 16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["row_major", "transposed"])
def test_decode_mma_matches_the_reference(dtype: torch.dtype, layout: str) -> None:
    for n, k in DECODE_SHAPES:
        b = _b(k, n, dtype, layout)
        b_exact = b.double()
        for m in DECODE_ROWS:
            a = torch.randn(m, k, device="cuda").to(dtype)
            out, buffer = guarded_output((m, n), dtype)
            what = f"{DECODE_MMA} {layout} M={m} N={n} K={k}"
            assert _launch("matmul", DECODE_MMA, [a, b], out), f"{what}: declined"
            _check("matmul", out, a.double() @ b_exact, dtype, what)
            assert_guards_intact(buffer, DECODE_MMA)
    # Rows of a apart by more than K, and a shared weight's batch folded into 16 rows.
    b = _b(2056, 1032, dtype, layout)
    cases = {"a's rows strided": torch.randn(5, 2056 + 24, device="cuda").to(dtype)[:, :2056],
             "a batch of 2 x 8 rows on one b": torch.randn(2, 8, 2056, device="cuda").to(dtype)}
    for what, a in cases.items():
        out, buffer = guarded_output((*a.shape[:-1], 1032), dtype)
        assert _launch("matmul", DECODE_MMA, [a, b], out), f"{what}: declined"
        _check("matmul", out, a.double() @ b.double(), dtype, f"{DECODE_MMA} {layout}, {what}")
        assert_guards_intact(buffer, DECODE_MMA)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_mma_declines_what_it_cannot_compute(dtype: torch.dtype) -> None:
    # More than 16 rows, anything off 16 bytes (a 16-byte load would misread it), a batch that does not fold: declined,
    # with out untouched.
    k, n = 264, 136
    aligned_a = torch.randn(4, k, device="cuda").to(dtype)
    cases = {
        "M = 17": (torch.randn(17, k, device="cuda").to(dtype), _b(k, n, dtype, "transposed"), None),
        "a's row stride off 16 bytes": (torch.randn(4, k + 4, device="cuda").to(dtype)[:, :k],
                                        _b(k, n, dtype, "transposed"), None),
        "a's data off 16 bytes": (_odd_view((4, k), dtype), _b(k, n, dtype, "transposed"), None),
        "b's data off 16 bytes": (aligned_a, _odd_view((n, k), dtype).t(), None),
        "b's row stride off 16 bytes": (aligned_a, torch.randn(n, k + 4, device="cuda").to(dtype)[:, :k].t(), None),
        "K off 16 bytes": (torch.randn(4, k - 4, device="cuda").to(dtype), _b(k - 4, n, dtype, "transposed"), None),
        "N off 16 bytes, b row-major": (aligned_a, _b(k, n - 4, dtype, "row_major"), None),
        "out's data off 16 bytes": (aligned_a, _b(k, n, dtype, "transposed"), _odd_view((4, n), dtype)),
        "a batch with its own b": (torch.randn(2, 4, k, device="cuda").to(dtype),
                                   _b(k, n, dtype, "row_major", (2,)), None),
    }
    for what, (a, b, out) in cases.items():
        shape = (*a.shape[:-1], b.shape[-1])
        buffer = None
        if out is None:
            out, buffer = guarded_output(shape, dtype)
        before = out.clone()
        assert not _launch("matmul", DECODE_MMA, [a, b], out), f"{what}: not declined"
        assert torch.equal(out, before) and (buffer is None or bool((buffer == POISON).all())), f"{what}: wrote"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_decode_mma_serves_linear_with_its_epilogue(dtype: torch.dtype, activation: str) -> None:
    # x with leading dimensions (16 rows), w [N, K] read in place or a transposed w, with and without bias; and one
    # row of x on a wide w, where K is not split and the kernel applies the epilogue itself.
    index = ACTIVATIONS.index(activation)
    for rows, n, k, with_bias, transposed in [((2, 8), 1032, 2056, True, False), ((16,), 1032, 2056, False, True),
                                              ((1,), 53248, 520, True, False), ((3,), 136, 264, True, True)]:
        x, w, bias, reference = _linear_inputs(rows, n, k, with_bias, transposed, dtype, activation)
        out, buffer = guarded_output((*rows, n), dtype)
        what = f"{DECODE_MMA} {activation} rows={rows} N={n} K={k} bias={with_bias} transposed={transposed}"
        assert _launch("linear", DECODE_MMA, [x, w, bias], out, attributes=(index,)), f"{what}: declined"
        _check("linear", out, reference, dtype, what)
        assert_guards_intact(buffer, DECODE_MMA)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_mma_replays_in_a_cuda_graph(dtype: torch.dtype) -> None:
    # With K split (its workspace and the split sums captured) and without.
    for m, n, k in [(16, 1032, 2056), (3, 53248, 520)]:
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = _b(k, n, dtype, "transposed")
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        assert _launch("matmul", DECODE_MMA, [a, b], out)  # warm-up: the workspace exists before capture
        out.fill_(POISON)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                _core.launch("matmul", DECODE_MMA, [descriptor(a), descriptor(b)], [descriptor(out)],
                             stream=stream.cuda_stream)
        for _ in range(2):  # new values each replay; the sums of the splits must not carry over
            a.copy_(torch.randn_like(a, dtype=torch.float32).to(dtype))
            graph.replay()
            torch.cuda.synchronize()
            _check("matmul", out, a.double() @ b.double(), dtype, f"{DECODE_MMA} M={m} N={n} K={k} in a graph")


def test_a_captured_graph_replays_after_its_workspace_was_outgrown() -> None:
    # A graph keeps the workspace address it was captured with. A larger need on the same stream afterwards must not
    # give that memory back (torch would hand it to the next tensor, and the replay would write into that tensor).
    from kabi._base.workspaces import _allocate_from_torch, install_torch_allocator

    released = []

    def release(device_type: int, device_index: int, pointer: int, nbytes: int, stream: int) -> None:
        released.append(pointer)
        torch.cuda.caching_allocator_delete(pointer)

    dtype = torch.bfloat16
    stream = torch.cuda.Stream()
    a = torch.randn(255, 511, device="cuda").to(dtype)
    b = torch.randn(511, 383, device="cuda").to(dtype)
    out = torch.empty(255, 383, device="cuda", dtype=dtype)
    # About three times the first problem's workspace: cuBLASLt's 32 MiB and the padded copies of both.
    big_a = torch.randn(2047, 4099, device="cuda").to(dtype)
    big_b = torch.randn(4099, 4095, device="cuda").to(dtype)
    big_out = torch.empty(2047, 4095, device="cuda", dtype=dtype)
    _core.set_allocator((2,), _allocate_from_torch, release)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            descriptors = [descriptor(a), descriptor(b)], [descriptor(out)]
            _core.launch("matmul", ALIGNED_COPIES, *descriptors, stream=stream.cuda_stream)
            with torch.cuda.graph(graph, stream=stream):
                _core.launch("matmul", ALIGNED_COPIES, *descriptors, stream=stream.cuda_stream)
            _core.launch("matmul", ALIGNED_COPIES, [descriptor(big_a), descriptor(big_b)], [descriptor(big_out)],
                         stream=stream.cuda_stream)
        torch.cuda.synchronize()
        assert released == [], "an outgrown workspace went back to torch while a captured graph still uses it"
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(dtype))
        graph.replay()
        torch.cuda.synchronize()
        _check("matmul", out, a.double() @ b.double(), dtype, "the graph replayed after its workspace was outgrown")
        _check("matmul", big_out, big_a.double() @ big_b.double(), dtype, "the problem that outgrew it")
    finally:
        install_torch_allocator()


def test_kabi_dispatch_can_pick_them() -> None:
    a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)
    # Every CUTLASS kernel takes this problem; of cuBLASLt's slots only the first is sure to exist for it.
    cutlass = [name for name in _kernels("matmul") if name.startswith("cuda.cutlass")]
    for kernel in cutlass + ["cuda.cublaslt.algo0"]:
        with kabi.use(matmul=kernel):
            result = kabi.ops.matmul(a, b)
        _check("matmul", result, a.double() @ b.double(), torch.bfloat16, f"kabi.ops.matmul forced to {kernel}")


# What a cuBLASLt slot names as its variant: its algorithm's configuration (cublaslt_kernels.cpp), inner and cluster
# shapes where the cuBLASLt version has them.
CUBLASLT_VARIANT = re.compile(r"algo=\d+ tile=\d+ stages=\d+ splitk=-?\d+ reduction=\d+ swizzle=\d+ custom=\d+"
                              r"( inner=\d+)?( cluster=\d+)?")


def test_cublaslt_slots_name_their_algorithm_and_the_cache_records_it(cache_dir) -> None:
    a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)
    slots = {candidate.name: candidate for candidate in kabi.explain(kabi.ops.matmul, a, b).candidates
             if candidate.name.startswith("cuda.cublaslt.algo") and candidate.eligible}
    assert "cuda.cublaslt.algo0" in slots
    for name, candidate in slots.items():
        assert candidate.kernel.has_variant and CUBLASLT_VARIANT.fullmatch(candidate.variant), (name, candidate.variant)
    # Each slot runs another of the heuristic's algorithms, and its variant says which.
    assert len({candidate.variant for candidate in slots.values()}) == len(slots), slots
    with kabi.tuning("first-call", warmup=1, repeat=3, min_time_s=0.0):
        kabi.ops.matmul(a, b)
    records = {record.kernel: record for record in kabi.cache.show("matmul")
               if record.kernel in slots and record.execution_mode == "eager"}
    assert set(records) == set(slots)
    assert {name: record.variant for name, record in records.items()} == {
        name: candidate.variant for name, candidate in slots.items()}
    tuned = kabi.explain(kabi.ops.matmul, a, b)
    assert tuned.pick_reason == "tuned"
    assert not [candidate.name for candidate in tuned.candidates if candidate.stale_variant is not None]
    if tuned.pick in slots:
        assert tuned.pick_variant == slots[tuned.pick].variant


def test_called_from_c(tmp_path) -> None:
    program = compile_c_caller(tmp_path)
    (plugin,) = [record["path"] for record in _core.plugin_records() if record["name"] == PLUGIN]
    result = subprocess.run([str(program), plugin], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout


_WARM_UP_SCRIPT = """
import ctypes, os, sys
import torch
from kabi import _core
from kabi._base.tensors import descriptor
from kabi._plugins.discovery import complete_registry

def primary_context_active(device):
    driver = ctypes.CDLL("libcuda.so.1")
    assert driver.cuInit(0) == 0
    flags, active = ctypes.c_uint(), ctypes.c_int()
    assert driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0
    return bool(active.value)

case = sys.argv[1]
if case == "no context":
    # Loaded before anything made a context current: the plugin starts no warm-up, which would have to make one.
    _core.plugin_load_builtin()
    print("active after load:", primary_context_active(0))
    sys.exit(0)
a = torch.randn(37, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
# Torch's context is current: the plugin's load starts cuBLASLt's warm-up on a thread of its own.
complete_registry("cuda")
if case == "exit":
    sys.exit(0)
if case == "fork":
    # The child inherits the warm-up's state but not its thread; its normal exit runs the plugin's destructors.
    child = os.fork()
    if child == 0:
        sys.exit(0)
    _, status = os.waitpid(child, 0)
    print("child exit status:", os.waitstatus_to_exitcode(status))
    sys.exit(0)
slots = sorted(k["name"] for k in _core.kernel_list() if k["name"].startswith("cuda.cublaslt.algo"))
out = torch.empty(37, 4096, device="cuda", dtype=torch.bfloat16)
_core.launch("matmul", slots[0], [descriptor(a), descriptor(w.T)], [descriptor(out)],
             stream=torch.cuda.current_stream().cuda_stream)
torch.cuda.synchronize()
reference = a.double() @ w.T.double()
print("error:", ((out.double() - reference).norm() / reference.norm()).item())
"""


@pytest.mark.parametrize("case", ["exit", "call", "no context", "fork"])
def test_the_cublaslt_warm_up_blocks_no_exit_disturbs_no_call_and_makes_no_context(case) -> None:
    result = subprocess.run([sys.executable, "-c", _WARM_UP_SCRIPT, case], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    if case == "fork":
        assert "child exit status: 0" in result.stdout, result.stdout + result.stderr
    if case == "call":
        error = float(re.search(r"error: (\S+)", result.stdout).group(1))
        assert error < 1e-2, result.stdout
    if case == "no context":
        assert "active after load: False" in result.stdout, result.stdout + result.stderr
