"""The decision memo: the C table in front of an op's decision cache, keyed by tensor metadata read through DLPack's
C exchange API. Every test checks both that the memo is (or is not) used and that the call still runs the decision
the tuple-keyed cache would have taken."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.decision_cache import invalidate_all
from kabi.ops._front import front_of
from _front_isolation import untuned  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("untuned")

has_exchange_api = pytest.mark.skipif(
    not _core.dlpack_exchange_available(torch.Tensor),
    reason="this torch has no DLPack C exchange API: the memo is never used, only the tuple-keyed cache",
)


class Recorder:
    """A matmul kernel that records which inputs reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append((a.stride(), b.stride()))
        return torch.matmul(a, b, out=out)


@pytest.fixture
def memo():
    front = front_of(kabi.ops.matmul)
    front.cache.clear()
    return front.cache.memo


@pytest.fixture
def recorder():
    kernel = Recorder()
    kabi.register_kernel("matmul", kernel, name="test.memo.recorder", device="cpu", priority=1000)
    yield kernel
    kabi.unregister_kernel("matmul", "test.memo.recorder")


def remember(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A first call stores the decision in the dict (a miss); the second copies it into the memo (a dict hit)."""
    kabi.ops.matmul(a, b)
    return kabi.ops.matmul(a, b)


def matches(result: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(result, torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@has_exchange_api
def test_second_call_is_served_by_the_memo(memo):
    a, b = torch.randn(6, 4), torch.randn(4, 3)
    assert matches(kabi.ops.matmul(a, b), a, b)  # a miss: stored in the dict only
    assert len(memo) == 0
    assert matches(kabi.ops.matmul(a, b), a, b)  # a dict hit: copied into the memo
    assert len(memo) == 1
    fresh_a, fresh_b = torch.randn(6, 4), torch.randn(4, 3)
    assert matches(kabi.ops.matmul(fresh_a, fresh_b), fresh_a, fresh_b)  # a memo hit on new data
    assert len(memo) == 1


@has_exchange_api
def test_invalidation_empties_the_memo_and_a_new_kernel_wins(memo):
    a, b = torch.randn(5, 7), torch.randn(7, 2)
    remember(a, b)
    assert len(memo) == 1
    recorder = Recorder()
    kabi.register_kernel("matmul", recorder, name="test.memo.late", device="cpu", priority=1000)
    try:
        assert len(memo) == 0
        assert matches(kabi.ops.matmul(a, b), a, b)
        assert matches(kabi.ops.matmul(a, b), a, b)
        assert len(recorder.calls) == 2
    finally:
        kabi.unregister_kernel("matmul", "test.memo.late")
    assert len(memo) == 0
    remember(a, b)
    assert len(recorder.calls) == 2  # unregistered: never reached again, not even from the memo


@has_exchange_api
def test_strides_shapes_dtypes_and_grad_are_each_their_own_entry(memo, recorder):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    variants = [
        (a, b),
        (a.t(), b),  # same shape, other strides
        (a[:, :4], b[:4]),  # other shapes
        (a.double(), b.double()),
        (a, b.clone().requires_grad_()),
        (a.unsqueeze(0), b),  # other rank
    ]
    for x, y in variants:
        kabi.ops.matmul(x, y)
        result = kabi.ops.matmul(x, y)
        assert result.dtype == x.dtype
        assert matches(result.detach(), x, y.detach())
    assert len(memo) == len(variants)
    assert [strides for strides in recorder.calls[1::2]] == [(x.stride(), y.stride()) for x, y in variants]


@has_exchange_api
def test_a_kabi_use_scope_is_part_of_the_key(memo, recorder):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    remember(a, b)
    assert len(recorder.calls) == 2
    with kabi.use(matmul="torch"):
        kabi.ops.matmul(a, b)
        kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 2  # the forced torch kernel ran, not the memo's decision for no scope
    assert len(memo) == 2
    kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 3


@has_exchange_api
def test_metadata_changed_in_place_is_read_afresh(memo, recorder):
    a, b = torch.randn(6, 6), torch.randn(6, 6)
    remember(a, b)
    a.t_()  # same object, other strides
    assert matches(kabi.ops.matmul(a, b), a, b)
    a.resize_(6, 3)
    with pytest.raises(kabi.InvalidArgumentError, match="shape"):
        kabi.ops.matmul(a, b)
    assert recorder.calls[-1] == ((1, 6), (6, 1))


def test_tensor_subclasses_take_the_tuple_key(memo, recorder):
    class Tagged(torch.Tensor):
        pass

    a, b = torch.randn(3, 5).as_subclass(Tagged), torch.randn(5, 2)
    for _ in range(3):
        assert matches(torch.Tensor(kabi.ops.matmul(a, b)), torch.Tensor(a), b)
    assert len(memo) == 0
    assert len(recorder.calls) == 3


@has_exchange_api
def test_a_call_with_out_is_remembered_once_out_was_accepted(memo, recorder):
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    out = torch.empty(3, 2)
    kabi.ops.matmul(a, b)  # a miss stores the decision; then a wrong out on the dict-hit path:
    with pytest.raises(kabi.InvalidArgumentError, match="out has shape"):
        kabi.ops.matmul(a, b, out=torch.empty(2, 3))
    assert len(memo) == 0  # a refused out is never remembered (and a miss is remembered in the dict only)
    for _ in range(3):
        out.fill_(float("nan"))
        assert kabi.ops.matmul(a, b, out=out) is out
        assert matches(out, a, b)
    assert len(memo) == 1
    wrong_dtype = torch.empty(3, 2, dtype=torch.float64)
    with pytest.raises(kabi.InvalidArgumentError, match="dtype"):
        kabi.ops.matmul(a, b, out=wrong_dtype)  # other out facts: not a memo hit, checked again
    kabi.ops.matmul(a, b)
    assert len(memo) == 2  # without out: its own entry
    assert len(recorder.calls) == 1 + 3 + 1


@has_exchange_api
def test_non_tensor_inputs_take_the_tuple_key(memo):
    a = torch.randn(3, 5)
    with pytest.raises(kabi.ArgumentTypeError, match="b"):
        kabi.ops.matmul(a, [[1.0, 2.0]] * 5)
    assert len(memo) == 0


@has_exchange_api
def test_the_memo_is_bounded_and_starts_over(memo):
    b = torch.randn(1, 2)
    sizes = range(1, 4200)
    for m in sizes:
        a = torch.randn(m, 1)
        kabi.ops.matmul(a, b)
        kabi.ops.matmul(a, b)
        assert len(memo) <= 4096
    a = torch.randn(len(sizes), 1)
    assert matches(kabi.ops.matmul(a, b), a, b)
    assert 0 < len(memo) <= 4096


@has_exchange_api
def test_invalidate_all_clears_every_memo(memo):
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    remember(a, b)
    assert len(memo) == 1
    invalidate_all()
    assert len(memo) == 0


def test_a_kernel_registered_behind_pythons_back_reaches_remembered_problems(memo, monkeypatch):
    """A registration that skips Python's invalidation (as a C++ caller's into the same libkabi does) still bumps
    the core's registry generation, and the hit path turns the next call into a miss that selects again."""
    a, b = torch.randn(4, 6), torch.randn(6, 5)
    remember(a, b)
    recorder = Recorder()
    monkeypatch.setattr(kabi.ops._kernel_registration, "invalidate_all", lambda: None)
    kabi.register_kernel("matmul", recorder, name="test.memo.behind", device="cpu", priority=1000)
    try:
        assert matches(kabi.ops.matmul(a, b), a, b)
        assert len(recorder.calls) == 1
    finally:
        kabi.unregister_kernel("matmul", "test.memo.behind")
    assert matches(kabi.ops.matmul(a, b), a, b)
    assert len(recorder.calls) == 1
