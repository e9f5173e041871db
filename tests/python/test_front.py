"""kabi.ops.matmul against torch on many shapes, layouts and batch broadcasts; every kernel forced in turn; `out=`;
the decision cache (hits, keys, invalidation)."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.ops._front import front_of

pytestmark = pytest.mark.usefixtures("untuned")

TOLERANCE = op_spec("matmul").tolerance

# (a shape, b shape): plain, skinny, batched, broadcast batches, a broadcast matrix operand.
SHAPES = [
    ((1, 1), (1, 1)),
    ((8, 8), (8, 8)),
    ((17, 5), (5, 33)),
    ((1, 64), (64, 48)),
    ((64, 1), (1, 3)),
    ((3, 12, 7), (3, 7, 9)),
    ((3, 12, 7), (7, 9)),
    ((12, 7), (4, 7, 9)),
    ((2, 1, 6, 5), (1, 3, 5, 4)),
    ((2, 3, 4, 6, 5), (5, 2)),
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def assert_matches_reference(result: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    reference = reference_output(torch.matmul, [a, b])
    problem = check_output(result, reference, TOLERANCE[str(a.dtype).removeprefix("torch.")], expected_dtype=a.dtype)
    assert problem is None, problem


def layouts(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The same logical matrix shape as contiguous, transposed (column-major), row-strided and general views."""
    *batch, rows, columns = shape
    base = torch.randn(*batch, rows, columns, generator=generator).to(dtype)
    transposed = torch.randn(*batch, columns, rows, generator=generator).to(dtype).transpose(-1, -2)
    padded = torch.randn(*batch, rows, columns + 3, generator=generator).to(dtype)[..., :columns]
    general = torch.randn(*batch, rows * 2, columns * 2, generator=generator).to(dtype)[..., ::2, ::2]
    return {"contiguous": base, "column_major": transposed, "row_strided": padded, "general": general}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}@{s[1]}")
def test_matches_torch_on_shapes(shapes, dtype):
    generator = torch.Generator().manual_seed(hash((shapes, str(dtype))) & 0xFFFF)
    a = torch.randn(*shapes[0], generator=generator).to(dtype)
    b = torch.randn(*shapes[1], generator=generator).to(dtype)
    result = kabi.ops.matmul(a, b)
    assert result.shape == torch.matmul(a, b).shape
    assert_matches_reference(result, a, b)


@pytest.mark.parametrize("a_layout", ["contiguous", "column_major", "row_strided", "general"])
@pytest.mark.parametrize("b_layout", ["contiguous", "column_major", "row_strided", "general"])
@pytest.mark.parametrize("batch", [(), (3,)], ids=["matrix", "batched"])
def test_every_layout_pair(a_layout, b_layout, batch):
    generator = torch.Generator().manual_seed(7)
    a = layouts((*batch, 9, 6), torch.float32, generator)[a_layout]
    b = layouts((*batch, 6, 11), torch.float32, generator)[b_layout]
    assert_matches_reference(kabi.ops.matmul(a, b), a, b)


def kernels_for(dtype: torch.dtype) -> list[str]:
    name = str(dtype).removeprefix("torch.")
    return [k.name for k in kabi.kernels("matmul") if k.device == "cpu" and name in k.dtypes]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_cpu_kernel_forced_matches_reference(dtype):
    """No kernel ships untested because another one usually wins."""
    generator = torch.Generator().manual_seed(11)
    cases = [((33, 17), (17, 29)), ((4, 16, 8), (4, 8, 12)), ((2, 16, 8), (8, 12))]
    names = kernels_for(dtype)
    assert "torch.matmul.cpu" in names
    for name in names:
        for a_shape, b_shape in cases:
            a = torch.randn(*a_shape, generator=generator).to(dtype)
            b = torch.randn(*b_shape, generator=generator).to(dtype)
            with kabi.use(matmul=name):
                assert kabi.explain(kabi.ops.matmul, a, b).pick == name
                result = kabi.ops.matmul(a, b)
            assert_matches_reference(result, a, b)


def test_cpu_plugin_and_torch_both_registered():
    names = {k.name for k in kabi.kernels("matmul")}
    assert {"torch.matmul.cpu", "torch.matmul.cuda"} <= names
    assert "cpu.openblas.gemm" in names, [p for p in kabi.plugins()]


def test_heuristic_prefers_native_kernel_over_torch():
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.pick == "cpu.openblas.gemm"
    assert explanation.pick_reason == "heuristic"


@pytest.mark.parametrize("force", ["torch", "cpu.openblas.gemm"])
def test_out_is_written_and_returned(force):
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    out = torch.full((5, 3), float("nan"))
    with kabi.use(matmul=force):
        returned = kabi.ops.matmul(a, b, out=out)
        assert returned is out
        # The second call is a decision-cache hit: `out` is still honoured.
        out2 = torch.full((5, 3), float("nan"))
        assert kabi.ops.matmul(a, b, out=out2) is out2
    assert_matches_reference(out, a, b)
    assert_matches_reference(out2, a, b)


def test_out_may_be_a_non_contiguous_view():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    storage = torch.full((3, 5), float("nan"))
    out = storage.t()
    assert kabi.ops.matmul(a, b, out=out) is out
    assert_matches_reference(out, a, b)


@pytest.mark.parametrize("force", ["torch", "cpu.openblas.gemm"])
def test_an_out_that_aliases_an_input_is_refused_on_a_miss_and_on_a_hit(force):
    """torch.matmul itself writes into an out that aliases an input and returns a wrong product; kabi names the two,
    whichever kernel runs, on the call that decides and on the calls that reuse the decision, and writes nothing."""
    a, b = torch.randn(6, 6), torch.randn(6, 6)
    storage = torch.randn(72)
    b_in_storage = storage[30:66].view(6, 6)
    b_in_storage.copy_(b)
    originals = [tensor.clone() for tensor in (a, b, storage)]
    with kabi.use(matmul=force):
        with pytest.raises(kabi.InvalidArgumentError, match="matmul: out overlaps the memory of input a"):
            kabi.ops.matmul(a, b, out=a)
        out = torch.empty(6, 6)
        assert kabi.ops.matmul(a, b, out=out) is out
        # The decision is remembered now: these calls find it, and are refused all the same.
        for second, aliased, name in ((b, b, "b"), (b, a.t(), "a"), (b_in_storage, storage[:36].view(6, 6), "b")):
            with pytest.raises(kabi.InvalidArgumentError, match=f"matmul: out overlaps the memory of input {name}"):
                kabi.ops.matmul(a, second, out=aliased)
        assert all(torch.equal(tensor, original) for tensor, original in zip((a, b, storage), originals))
        disjoint = storage[:30].view(5, 6)
        assert kabi.ops.matmul(a[:5], b_in_storage, out=disjoint) is disjoint
    assert_matches_reference(out, a, b)
    assert_matches_reference(disjoint, a[:5], b)


def test_decision_cache_hit_reuses_one_entry_and_skips_selection(monkeypatch):
    front = front_of(kabi.ops.matmul)
    a, b = torch.randn(6, 4), torch.randn(4, 2)
    kabi.ops.matmul(a, b)
    entries_before = len(front.cache)
    selections = []
    original = front.select
    monkeypatch.setattr(front, "select", lambda *args, **kwargs: selections.append(1) or original(*args, **kwargs))
    for _ in range(3):
        kabi.ops.matmul(torch.randn(6, 4), torch.randn(4, 2))
    assert selections == []
    assert len(front.cache) == entries_before


def test_a_new_layout_is_a_new_decision():
    front = front_of(kabi.ops.matmul)
    a, b = torch.randn(6, 4), torch.randn(4, 2)
    kabi.ops.matmul(a, b)
    count = len(front.cache)
    kabi.ops.matmul(torch.randn(4, 6).t(), b)
    assert len(front.cache) == count + 1


def test_registering_a_kernel_invalidates_cached_decisions():
    a, b = torch.randn(6, 5), torch.randn(5, 4)
    kabi.ops.matmul(a, b)
    calls = []

    def winner(a, b, out=None):
        calls.append(1)
        return torch.matmul(a, b, out=out)

    kabi.register_kernel("matmul", winner, name="test.front.winner", priority=1000)
    try:
        assert_matches_reference(kabi.ops.matmul(a, b), a, b)
        assert calls == [1]
    finally:
        kabi.unregister_kernel("matmul", "test.front.winner")
    kabi.ops.matmul(a, b)
    assert calls == [1]


def test_the_call_that_completes_the_registry_is_remembered(monkeypatch):
    """A process's first call registers the lazily loaded backends (CUDA's), which moves the op's generation; the
    decision that call makes must still be kept, or the second call misses too (20 ms on an H200)."""
    import kabi.ops._front as dispatch

    registered = []

    def complete_registry(device_type=None):
        if not registered:
            registered.append(device_type)
            kabi.register_kernel("matmul", torch.matmul, name="test.front.lazily_registered", dtypes=["float64"])

    monkeypatch.setattr(dispatch, "complete_registry", complete_registry)
    front = front_of(kabi.ops.matmul)
    a, b = torch.randn(3, 7), torch.randn(7, 5)
    try:
        kabi.ops.matmul(a, b)
        hits, misses = front.cache.hits, front.cache.misses
        kabi.ops.matmul(a, b)
        assert (front.cache.hits, front.cache.misses) == (hits + 1, misses)
        assert registered == ["cpu"]
    finally:
        kabi.unregister_kernel("matmul", "test.front.lazily_registered")


def test_tuning_hook_runs_on_misses_only(monkeypatch):
    import kabi.ops._front as dispatch

    seen = []
    monkeypatch.setattr(dispatch, "_on_selection_miss", lambda front, inputs, out, selection: seen.append(selection.kernel.name))
    a, b = torch.randn(3, 13), torch.randn(13, 2)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    assert seen == ["cpu.openblas.gemm"]


def test_tuning_hook_can_replace_the_selection(monkeypatch):
    import kabi.ops._front as dispatch

    def prefer_torch(front, inputs, out, selection):
        with kabi.use(matmul="torch"):
            return front.select(inputs, out)

    monkeypatch.setattr(dispatch, "_on_selection_miss", prefer_torch)
    a, b = torch.randn(3, 14), torch.randn(14, 2)
    kabi.ops.matmul(a, b)
    implementation, _, _ = front_of(kabi.ops.matmul).cache.find((a, b), (), None)
    assert implementation is torch.matmul


def test_views_with_a_storage_offset_read_their_own_data():
    """A cached native launch takes each call's data pointers, offsets included."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with kabi.use(matmul="cpu"):
        kabi.ops.matmul(a, b)
        storage = torch.randn(8 * 8 + 1)
        shifted = storage[1:].view(8, 8)
        assert_matches_reference(kabi.ops.matmul(shifted, b), shifted, b)


def test_op_function_has_generated_docstring_and_signature():
    import inspect

    assert "Matrix product" in kabi.ops.matmul.__doc__
    assert "float32" in kabi.ops.matmul.__doc__
    assert list(inspect.signature(kabi.ops.matmul).parameters) == ["a", "b", "out"]
    with pytest.raises(AttributeError, match="no op 'conv'"):
        kabi.ops.conv  # noqa: B018


def test_threads_sharing_a_native_decision_get_their_own_results():
    """Large problems release the GIL while the native kernel runs: each thread's call must keep its own tensors."""
    import threading

    generator = torch.Generator().manual_seed(5)
    inputs = [(torch.randn(96, 80, generator=generator), torch.randn(80, 72, generator=generator)) for _ in range(6)]
    failures: list[str] = []

    def work(a, b):
        for _ in range(5):
            problem = check_output(kabi.ops.matmul(a, b), reference_output(torch.matmul, [a, b]), TOLERANCE["float32"])
            if problem is not None:
                failures.append(problem)

    with kabi.use(matmul="cpu.openblas.gemm"):
        kabi.ops.matmul(*inputs[0])
        threads = [threading.Thread(target=work, args=pair) for pair in inputs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert failures == []


def test_import_points_the_cpu_plugin_at_scipy_openblas(tmp_path):
    """Without KABI_OPENBLAS_LIBRARY, `import kabi` sets it to scipy-openblas32's library before loading plugins."""
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "KABI_OPENBLAS_LIBRARY"}
    environment.update(KABI_CACHE_DIR=str(tmp_path), KABI_TUNE="off")
    code = (
        "import os, kabi, scipy_openblas32\n"
        "print(os.environ['KABI_OPENBLAS_LIBRARY'].startswith(scipy_openblas32.get_lib_dir()))\n"
        "print(any(r.name == 'kabi-cpu' and r.loaded for r in kabi.plugins()))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_a_call_that_misses_a_kernels_alignment_is_selected_afresh():
    """A decision made for aligned tensors is not used for a misaligned view: that call is selected again with
    its pointers (the core rejects the kernel for it) and runs elsewhere."""
    seen = []

    def aligned_only(a, b, out=None):
        seen.append((a.data_ptr() % 64, b.data_ptr() % 64))
        return torch.matmul(a, b, out=out)

    kabi.register_kernel("matmul", aligned_only, name="test.front.aligned", alignment=64, priority=100)
    try:
        storage = torch.randn(2 * 64 + 16)
        aligned = torch.randn(8, 8)
        while aligned.data_ptr() % 64:
            aligned = torch.randn(8, 8)
        b = aligned.clone()
        while b.data_ptr() % 64:
            b = aligned.clone()
        kabi.ops.matmul(aligned, b)
        assert seen == [(0, 0)]
        offset = next(i for i in range(16) if (storage.data_ptr() + 4 * i) % 64)
        misaligned = storage[offset : offset + 64].view(8, 8)
        assert_matches_reference(kabi.ops.matmul(misaligned, b), misaligned, b)
        assert seen == [(0, 0)]
    finally:
        kabi.unregister_kernel("matmul", "test.front.aligned")
