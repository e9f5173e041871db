"""What an op front remembers agrees with itself: the expected output facts live and die with the decisions, both are
bounded, a tuning store flushes only the op it stores for, and kabi.stats() counts the front's hits and misses."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base import decision_cache as _decision_cache
from kabi._base.decision_cache import DecisionCache, invalidate_all
from kabi._base.tensors import descriptor
from kabi.ops._front import front_of
from _front_isolation import untuned  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("untuned")

TOY_OP = "test_state_toy"


@pytest.fixture(scope="module")
def toy_op() -> str:
    """A second op; ops live as long as the process, so it is registered once."""
    if TOY_OP not in _core.op_list():
        _core.register_op(TOY_OP, "x: [N] float32 -> out: [N] float32", None, "N")
    return TOY_OP


def matmul_counts() -> tuple[int, int]:
    memo = front_of("matmul").cache.memo
    return memo.hits, memo.misses


def test_a_tuning_store_flushes_only_the_op_it_stores_for(toy_op):
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    toy = DecisionCache(toy_op)
    generation = toy.begin_miss()
    toy.store("key", len, ((2,), torch.float32, torch.device("cpu")), generation)

    hits, misses = matmul_counts()
    _core.tuning_store(toy_op, [descriptor(torch.ones(2))], [], [])
    kabi.ops.matmul(a, b)
    assert matmul_counts() == (hits + 1, misses), "a store for another op flushed matmul's decisions"
    assert toy.begin_miss() != generation and "key" not in toy.entries and not toy.expected_outputs

    _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], [])
    kabi.ops.matmul(a, b)
    assert matmul_counts() == (hits + 1, misses + 1), "a store for matmul left its old decisions standing"


def test_op_generation_moves_with_its_own_kernels_only(toy_op):
    toy_generation = _core.op_generation(toy_op)
    matmul_generation = _core.op_generation("matmul")
    kabi.register_kernel("matmul", torch.matmul, name="test.state.generation", dtypes=["float16"])
    kabi.unregister_kernel("matmul", "test.state.generation")
    assert _core.op_generation("matmul") > matmul_generation
    assert _core.op_generation(toy_op) == toy_generation
    kabi.cache.clear()
    assert _core.op_generation(toy_op) > toy_generation


def test_expected_outputs_are_cleared_with_the_decisions():
    front = front_of("matmul")
    a, b = torch.randn(5, 2), torch.randn(2, 7)
    out = torch.empty(5, 7)
    kabi.ops.matmul(a, b, out=out)
    key = front.key((a, b), (), None)
    assert front.cache.expected_outputs[key] == ((5, 7), torch.float32, torch.device("cpu"))
    invalidate_all()
    assert not front.cache.entries and not front.cache.expected_outputs
    kabi.ops.matmul(a, b, out=out)
    front.cache.clear()
    assert not front.cache.entries and not front.cache.expected_outputs


def test_expected_outputs_are_bounded_like_the_decisions(monkeypatch):
    monkeypatch.setattr(_decision_cache, "MAX_DECISIONS", 3)
    front = front_of("matmul")
    for size in range(1, 12):
        kabi.ops.matmul(torch.randn(size, 2), torch.randn(2, 3), out=torch.empty(size, 3))
        assert len(front.cache.entries) <= 3
        assert front.cache.expected_outputs.keys() == front.cache.entries.keys()


def test_out_on_a_decision_forgotten_meanwhile_is_decided_afresh():
    front = front_of("matmul")
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    kabi.ops.matmul(a, b)
    key = front.key((a, b), (), None)
    implementation = front.cache.entries[key]
    front.cache.clear()
    out = torch.empty(3, 3)
    assert front.call_with_out(implementation, key, (a, b), out) is out
    torch.testing.assert_close(out, a @ b)
    with pytest.raises(kabi.InvalidArgumentError, match="out has shape"):
        front.call_with_out(implementation, key, (a, b), torch.empty(2, 2))


def test_stats_count_the_fronts_hits_and_misses():
    a, b = torch.randn(7, 2), torch.randn(2, 5)
    kabi.ops._stats.reset_stats()
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 0)
    kabi.ops.matmul(a, b)
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 1)
    kabi.ops.matmul(a, b)  # the tuple-keyed dict
    kabi.ops.matmul(a, b)  # the memo, where this torch has the DLPack exchange API
    kabi.ops.matmul(a, b, out=torch.empty(7, 5))
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (3, 1)
    kabi.ops._stats.reset_stats()
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 0)
