"""What an op front remembers agrees with itself: each decision's output facts live and die with it, a tuning store
flushes only the op it stores for, and kabi.stats() counts the front's hits and misses."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.decision_cache import decision_table, invalidate_all
from kabi._base.tensors import descriptor, meta_descriptor
from kabi.ops._front import front_of

pytestmark = pytest.mark.usefixtures("untuned")

TOY_OP = "test_state_toy"


@pytest.fixture(scope="module")
def toy_op() -> str:
    """A second op; ops live as long as the process, so it is registered once."""
    if TOY_OP not in _core.op_list():
        _core.register_op(TOY_OP, "x: [N] float32 -> out: [N] float32", None, "N")
    return TOY_OP


def matmul_counts() -> tuple[int, int]:
    table = front_of("matmul").cache
    return table.hits, table.misses


def test_a_tuning_store_flushes_only_the_op_it_stores_for(toy_op):
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    toy = decision_table(toy_op, attributes=())
    x = torch.ones(2)
    generation = toy.begin_miss()
    assert toy.store((x,), (), None, len, (meta_descriptor((2,), torch.float32, torch.device("cpu")),), "k", generation)

    hits, misses = matmul_counts()
    _core.tuning_store(toy_op, [descriptor(x)], [], [])
    kabi.ops.matmul(a, b)
    assert matmul_counts() == (hits + 1, misses), "a store for another op flushed matmul's decisions"
    assert toy.begin_miss() != generation and len(toy) == 0 and toy.find((x,), (), None) is None

    _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], [])
    kabi.ops.matmul(a, b)
    assert matmul_counts() == (hits + 1, misses + 1), "a store for matmul left its old decisions standing"


def test_registering_a_kernel_of_another_op_leaves_the_decisions_standing():
    """The CUDA backends register hundreds of kernels at a process's first call; each moves its own op's
    generation, which is all a table follows, so no other op's decisions are made again."""
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    kabi.ops.matmul(a, b)
    hits, misses = matmul_counts()
    kabi.register_kernel("linear", lambda x, w, bias=None, out=None, **attributes: None,
                         name="test.state.other_op", dtypes=["float16"])
    try:
        kabi.ops.matmul(a, b)
        assert matmul_counts() == (hits + 1, misses)
    finally:
        kabi.unregister_kernel("linear", "test.state.other_op")
    kabi.ops.matmul(a, b)
    assert matmul_counts() == (hits + 2, misses)


def test_op_generation_moves_with_its_own_kernels_only(toy_op):
    toy_generation = _core.op_generation(toy_op)
    matmul_generation = _core.op_generation("matmul")
    kabi.register_kernel("matmul", torch.matmul, name="test.state.generation", dtypes=["float16"])
    kabi.unregister_kernel("matmul", "test.state.generation")
    assert _core.op_generation("matmul") > matmul_generation
    assert _core.op_generation(toy_op) == toy_generation
    kabi.cache.clear()
    assert _core.op_generation(toy_op) > toy_generation


def test_a_decision_keeps_its_output_facts_and_loses_them_with_it():
    front = front_of("matmul")
    a, b = torch.randn(5, 2), torch.randn(2, 7)
    out = torch.empty(5, 7)
    kabi.ops.matmul(a, b, out=out)
    _, outputs, kernel = front.cache.find((a, b), (), None)
    assert outputs == (meta_descriptor((5, 7), torch.float32, torch.device("cpu")),) and kernel
    invalidate_all()
    assert front.cache.find((a, b), (), None) is None and len(front.cache) == 0
    kabi.ops.matmul(torch.randn(2), b, out=torch.empty(7))  # a vector: the output facts are the caller's
    _, outputs, _ = front.cache.find((torch.randn(2), b), (), None)
    assert outputs == (meta_descriptor((7,), torch.float32, torch.device("cpu")),)


def test_an_out_the_c_path_cannot_accept_is_checked_against_the_decisions_own_outputs():
    front = front_of("matmul")
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    kabi.ops.matmul(a, b)
    implementation, outputs, _ = front.cache.find((a, b), (), None)
    front.cache.clear()  # the decision is forgotten meanwhile: its own outputs still say what out must be
    out = torch.empty(3, 3)
    assert front.call_with_out(implementation, outputs, (a, b), out) is out
    torch.testing.assert_close(out, a @ b)
    with pytest.raises(kabi.InvalidArgumentError, match="out has shape"):
        front.call_with_out(implementation, outputs, (a, b), torch.empty(2, 2))


def test_stats_count_the_fronts_hits_and_misses():
    a, b = torch.randn(7, 2), torch.randn(2, 5)
    kabi.ops._stats.reset_stats()
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 0)
    kabi.ops.matmul(a, b)
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 1)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b, out=torch.empty(7, 5))
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (3, 1)
    kabi.ops._stats.reset_stats()
    assert (kabi.stats().decision_cache_hits, kabi.stats().decision_cache_misses) == (0, 0)
