"""The decision table: the one C-owned table per op that its front's hit path reads, keyed by tensor metadata read
through DLPack's C exchange API. Every test checks both that the table is (or is not) used and that the call still
runs the decision the miss path would have taken."""

from __future__ import annotations

import functools

import pytest
import torch

import kabi
from kabi import _core
from kabi.backends import torch_native
from kabi._base.decision_cache import decision_table, invalidate_all
from kabi._base.tensors import meta_descriptor
from kabi.ops._front import front_of

pytestmark = pytest.mark.usefixtures("untuned")

has_exchange_api = pytest.mark.skipif(
    not _core.dlpack_exchange_available(torch.Tensor),
    reason="this torch has no DLPack C exchange API: plain tensors are read through dispatch_facts like subclasses",
)


class Recorder:
    """A matmul kernel that records which inputs reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append((a.stride(), b.stride()))
        return torch.matmul(a, b, out=out)


@pytest.fixture
def table():
    front = front_of(kabi.ops.matmul)
    front.cache.clear()
    front.cache.reset_counts()
    return front.cache


@pytest.fixture
def recorder():
    kernel = Recorder()
    kabi.register_kernel("matmul", kernel, name="test.table.recorder", device="cpu", priority=1000)
    yield kernel
    kabi.unregister_kernel("matmul", "test.table.recorder")


def matches(result: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(result, torch.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_a_miss_stores_and_the_next_call_with_new_data_is_a_hit(table):
    a, b = torch.randn(6, 4), torch.randn(4, 3)
    assert matches(kabi.ops.matmul(a, b), a, b)
    assert len(table) == 1 and (table.hits, table.misses) == (0, 1)
    fresh_a, fresh_b = torch.randn(6, 4), torch.randn(4, 3)
    assert matches(kabi.ops.matmul(fresh_a, fresh_b), fresh_a, fresh_b)
    assert len(table) == 1 and (table.hits, table.misses) == (1, 1)


def test_a_registration_makes_the_next_call_select_again_and_a_new_kernel_wins(table):
    """Registering moves the op's generation in the core, and nothing else is needed (a C++ caller registering into
    the same libkabi does just that): the table lags it, so the hit path turns the next call into a miss, which
    empties the table and selects again."""
    a, b = torch.randn(5, 7), torch.randn(7, 2)
    kabi.ops.matmul(a, b)
    assert len(table) == 1
    recorder = Recorder()
    kabi.register_kernel("matmul", recorder, name="test.table.late", device="cpu", priority=1000)
    try:
        assert table.generation != _core.op_generation("matmul")
        assert matches(kabi.ops.matmul(a, b), a, b)
        assert matches(kabi.ops.matmul(a, b), a, b)
        assert len(recorder.calls) == 2 and len(table) == 1
    finally:
        kabi.unregister_kernel("matmul", "test.table.late")
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 2  # unregistered: never reached again


def test_strides_shapes_dtypes_and_grad_are_each_their_own_entry(table, recorder):
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
    assert len(table) == len(variants)
    assert [strides for strides in recorder.calls[1::2]] == [(x.stride(), y.stride()) for x, y in variants]


def test_a_kabi_use_scope_is_part_of_the_key(table, recorder):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 2
    with kabi.use(matmul="torch"):
        kabi.ops.matmul(a, b)
        kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 2  # the forced torch kernel ran, not the decision for no scope
    assert len(table) == 2
    kabi.ops.matmul(a, b)
    assert len(recorder.calls) == 3


@has_exchange_api
def test_metadata_changed_in_place_is_read_afresh(table, recorder):
    a, b = torch.randn(6, 6), torch.randn(6, 6)
    kabi.ops.matmul(a, b)
    a.t_()  # same object, other strides
    assert matches(kabi.ops.matmul(a, b), a, b)
    a.resize_(6, 3)
    with pytest.raises(kabi.InvalidArgumentError, match="shape"):
        kabi.ops.matmul(a, b)
    assert recorder.calls[-1] == ((1, 6), (6, 1))


@has_exchange_api
def test_grad_is_read_afresh_after_the_tensor_type_changes(table, recorder):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    weight = b.clone().requires_grad_()
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, weight)
    # Setting an attribute of torch.Tensor resets its version tag: the requires_grad getter the table calls
    # directly is looked up again, and keys stay right.
    torch.Tensor._kabi_test_attribute = 1
    try:
        for _ in range(2):
            plain, tracked = kabi.ops.matmul(a, b), kabi.ops.matmul(a, weight)
            assert not plain.requires_grad and tracked.requires_grad
            assert matches(plain, a, b) and matches(tracked.detach(), a, b)
    finally:
        del torch.Tensor._kabi_test_attribute
    assert len(table) == 2 and table.misses == 2  # the calls after the change were hits of the same two decisions


def test_tensor_subclasses_are_keyed_by_what_they_report(table, recorder):
    class Tagged(torch.Tensor):
        pass

    a, b = torch.randn(3, 5).as_subclass(Tagged), torch.randn(5, 2)
    for _ in range(3):
        assert matches(torch.Tensor(kabi.ops.matmul(a, b)), torch.Tensor(a), b)
    assert len(table) == 1 and (table.hits, table.misses) == (2, 1)
    assert len(recorder.calls) == 3


@has_exchange_api
def test_out_is_checked_on_every_hit_and_keys_nothing(table, recorder):
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    out = torch.empty(3, 2)
    kabi.ops.matmul(a, b)
    with pytest.raises(kabi.InvalidArgumentError, match="out has shape"):
        kabi.ops.matmul(a, b, out=torch.empty(2, 3))
    for _ in range(3):
        out.fill_(float("nan"))
        assert kabi.ops.matmul(a, b, out=out) is out
        assert matches(out, a, b)
    with pytest.raises(kabi.InvalidArgumentError, match="dtype"):
        kabi.ops.matmul(a, b, out=torch.empty(3, 2, dtype=torch.float64))
    strided = torch.empty(2, 3).t()  # the decision's shape, dtype and device; written through a dense copy
    assert kabi.ops.matmul(a, b, out=strided) is strided and matches(strided, a, b)
    assert len(table) == 1
    assert len(recorder.calls) == 1 + 3 + 1


def test_non_tensor_inputs_are_never_remembered(table):
    a = torch.randn(3, 5)
    with pytest.raises(kabi.ArgumentTypeError, match="b"):
        kabi.ops.matmul(a, [[1.0, 2.0]] * 5)
    assert len(table) == 0


@has_exchange_api
def test_the_table_is_bounded_and_starts_over(table):
    b = torch.randn(1, 2)
    sizes = range(1, table.max_entries + 100)
    for m in sizes:
        a = torch.randn(m, 1)
        kabi.ops.matmul(a, b)
        assert len(table) <= table.max_entries
    a = torch.randn(len(sizes), 1)
    assert matches(kabi.ops.matmul(a, b), a, b)
    assert 0 < len(table) < table.max_entries


def test_invalidate_all_empties_every_table(table):
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    kabi.ops.matmul(a, b)
    kabi.ops.linear(x, w)
    linear_table = front_of(kabi.ops.linear).cache
    assert len(table) == 1 and len(linear_table) >= 1
    invalidate_all()
    assert len(table) == 0 and len(linear_table) == 0


def test_optional_inputs_and_attributes_key_linear_decisions():
    table = front_of(kabi.ops.linear).cache
    table.clear()
    table.reset_counts()
    x, w, bias = torch.randn(5, 3), torch.randn(4, 3), torch.randn(4)
    calls = [
        ((x, w), {}),
        ((x, w, bias), {}),
        ((x, w), {"bias": bias}),  # by keyword: the same decision as positionally
        ((x, w, None), {}),  # None: the same as leaving it out
        ((x, w, bias), {"activation": "relu"}),
        ((x, w, bias), {"activation": "".join(["re", "lu"])}),  # an equal, not identical, string
        ((x, w, bias), {"".join(["activ", "ation"]): "relu"}),  # a keyword equal to, not identical with, the name
        ((x, w, bias), {"activation": "silu"}),
    ]
    for arguments, keywords in calls:
        result = kabi.ops.linear(*arguments, **keywords)
        given_bias = keywords.get("bias", arguments[2] if len(arguments) > 2 else None)
        expected = torch.nn.functional.linear(x, w, given_bias)
        activation = keywords.get("activation", "none")
        expected = {"none": expected, "relu": torch.relu(expected), "silu": torch.nn.functional.silu(expected)}[activation]
        torch.testing.assert_close(result, expected)
    assert len(table) == 4  # no bias, bias, bias + relu, bias + silu
    assert (table.hits, table.misses) == (4, 4)


class KeywordRecorder:
    """A linear kernel that records the keywords it was called with, then runs torch-native linear; with
    clear_table, it empties linear's table first."""

    def __init__(self, clear_table: bool = False) -> None:
        self.calls: list[tuple[tuple[str, ...], torch.Tensor | None]] = []
        self.clear_table = clear_table

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, **keywords) -> torch.Tensor:
        if self.clear_table:
            front_of(kabi.ops.linear).cache.clear()
        self.calls.append((tuple(keywords), keywords.get("out")))
        return torch_native.linear(x, w, bias, **keywords)


def _linear_table_holding(implementation, inputs: tuple, activation: str):
    """linear's table, emptied, then holding only a decision for (inputs, activation) that runs implementation."""
    table = front_of(kabi.ops.linear).cache
    table.clear()
    x, w, _ = inputs
    outputs = (meta_descriptor((x.shape[0], w.shape[0]), x.dtype, x.device),)
    assert table.store(inputs, (activation,), None, implementation, outputs, "test.keywords", table.begin_miss())
    table.reset_counts()
    return table


def test_a_hit_calls_a_partials_function_with_its_keywords():
    """A decision whose implementation is a functools.partial of keywords (a Python kernel with the call's
    attributes bound) is called as the partial would call its function: the inputs, the keywords, then out. The
    front calls the function itself, which spares the partial's tuple and dicts."""
    x, w, bias = torch.randn(5, 3), torch.randn(4, 3), torch.randn(4)
    expected = torch.relu(torch.nn.functional.linear(x, w, bias))
    recorder = KeywordRecorder()
    table = _linear_table_holding(functools.partial(recorder, activation="relu"), (x, w, bias), "relu")
    torch.testing.assert_close(kabi.ops.linear(x, w, bias, activation="relu"), expected)
    out = torch.full((5, 4), float("nan"))
    assert kabi.ops.linear(x, w, bias, activation="relu", out=out) is out
    torch.testing.assert_close(out, expected)
    assert table.hits == 2 and table.misses == 0
    assert [names for names, _ in recorder.calls] == [("activation",), ("activation", "out")]
    assert recorder.calls[1][1] is out


def test_partials_the_hit_cannot_take_apart_are_called_as_they_are():
    """A partial subclass (which may define its own call), a partial that binds positional arguments, and one that
    binds out are each called as the partial itself, whose call merges the call's out over a bound one."""

    class CountingPartial(functools.partial):
        calls = 0

        def __call__(self, *arguments, **keywords):
            type(self).calls += 1
            return super().__call__(*arguments, **keywords)

    x, w, bias = torch.randn(5, 3), torch.randn(4, 3), torch.randn(4)
    out = torch.empty(5, 4)
    expected = torch.relu(torch.nn.functional.linear(x, w, bias))

    counted = KeywordRecorder()
    table = _linear_table_holding(CountingPartial(counted, activation="relu"), (x, w, bias), "relu")
    torch.testing.assert_close(kabi.ops.linear(x, w, bias, activation="relu"), expected)
    assert CountingPartial.calls == 1 and table.hits == 1

    tags = []

    def with_a_leading_tag(tag, x, w, bias=None, **keywords):
        tags.append(tag)
        return torch_native.linear(x, w, bias, **keywords)

    tagged = functools.partial(with_a_leading_tag, "tag", activation="relu")
    table = _linear_table_holding(tagged, (x, w, bias), "relu")
    torch.testing.assert_close(kabi.ops.linear(x, w, bias, activation="relu"), expected)
    assert tags == ["tag"] and table.hits == 1

    bound_out = KeywordRecorder()
    table = _linear_table_holding(functools.partial(bound_out, activation="relu", out=None), (x, w, bias), "relu")
    assert kabi.ops.linear(x, w, bias, activation="relu", out=out) is out
    assert bound_out.calls[0][1] is out and table.hits == 1
    torch.testing.assert_close(out, expected)


def test_a_kernel_that_empties_the_table_during_its_hit_still_runs_with_its_keywords():
    """The table lets go of the decision's function and keywords while the kernel runs; the front holds its own."""
    x, w, bias = torch.randn(5, 3), torch.randn(4, 3), torch.randn(4)
    recorder = KeywordRecorder(clear_table=True)
    table = _linear_table_holding(functools.partial(recorder, activation="silu"), (x, w, bias), "silu")
    out = torch.empty(5, 4)
    assert kabi.ops.linear(x, w, bias, activation="silu", out=out) is out
    torch.testing.assert_close(out, torch.nn.functional.silu(torch.nn.functional.linear(x, w, bias)))
    assert table.hits == 1 and len(table) == 0
    assert recorder.calls == [(("activation", "out"), out)]


def test_calls_the_c_path_cannot_bind_get_pythons_errors():
    x, w, bias = torch.randn(5, 3), torch.randn(4, 3), torch.randn(4)
    with pytest.raises(TypeError, match=r"linear takes 2 to 3 inputs \(x, w, bias=None\), got 1"):
        kabi.ops.linear(x)
    # Keywords that name only optional inputs and attributes leave the required input missing.
    for keywords in ({"bias": bias}, {"activation": "relu"}):
        with pytest.raises(TypeError, match=r"linear takes 2 to 3 inputs \(x, w, bias=None\), got 1"):
            kabi.ops.linear(x, **keywords)
    with pytest.raises(TypeError, match="unexpected keyword argument 'scale'"):
        kabi.ops.linear(x, w, scale=2.0)
    with pytest.raises(TypeError, match="multiple values for argument 'bias'"):
        kabi.ops.linear(x, w, bias, bias=bias)
    with pytest.raises(TypeError, match=r"linear takes 2 to 3 inputs \(x, w, bias=None\), got 4"):
        kabi.ops.linear(x, w, bias, "relu")
    with pytest.raises(kabi.InvalidArgumentError, match="activation must be one of none, relu"):
        kabi.ops.linear(x, w, activation="tanh")


def test_a_table_stores_only_under_the_ops_current_generation():
    table = decision_table("matmul", attributes=())
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    outputs = (meta_descriptor((2, 4), torch.float32, torch.device("cpu")),)
    stale = table.begin_miss()
    kabi.register_kernel("matmul", torch.matmul, name="test.table.generation", dtypes=["float16"])
    kabi.unregister_kernel("matmul", "test.table.generation")
    assert not table.store((a, b), (), None, torch.matmul, outputs, "torch", stale)
    assert len(table) == 0
    current = table.begin_miss()
    assert current != stale
    assert table.store((a, b), (), None, torch.matmul, outputs, "torch", current)
    assert table.find((torch.randn(2, 3), torch.randn(3, 4)), (), None) == (torch.matmul, outputs, "torch")
    assert table.find((a, b.t().contiguous().t()), (), None) is None  # other strides
    assert not table.store((a, object()), (), None, torch.matmul, outputs, "torch", current)  # not keyable


def test_an_enum_alias_keys_its_values_decision_by_identity():
    alias = object()
    table = decision_table("scaled_mm", attributes=[("enum", ("float16", "bfloat16"), (None, alias)), ("bool", ())])
    x = torch.randn(2, 2)
    outputs = (meta_descriptor((2, 2), torch.float32, torch.device("cpu")),)
    assert table.store((x,), ("bfloat16", False), None, len, outputs, "k", table.begin_miss())
    assert table.find((x,), (alias, False), None) is not None
    assert table.find((x,), (object(), False), None) is None
    assert table.find((x,), (None, False), None) is None  # the None standing for "no alias" matches nothing
    assert table.store((x,), (alias, True), None, len, outputs, "k", table.begin_miss())
    assert table.find((x,), ("bfloat16", True), None) is not None
    with pytest.raises(ValueError, match="enum aliases: 1 given for 2 enum values"):
        decision_table("scaled_mm", attributes=[("enum", ("float16", "bfloat16"), (alias,))])


def test_attribute_values_are_keyed_by_kind():
    table = decision_table("linear", attributes=[("float", ()), ("enum", ("none", "relu")), ("bool", ()), ("int", ())])
    x = torch.randn(2, 2)
    generation = table.begin_miss()
    outputs = (meta_descriptor((2, 2), torch.float32, torch.device("cpu")),)
    assert table.store((x,), (2, "relu", True, 7), None, len, outputs, "k", generation)
    assert table.find((x,), (2.0, "relu", True, 7), None) is not None  # a float attribute's int is its float
    assert table.find((x,), (2.0, "none", True, 7), None) is None
    assert table.find((x,), (2.0, "relu", False, 7), None) is None
    assert table.find((x,), (2.0, "relu", 1, 7), None) is None  # 1 is no bool
    assert table.find((x,), (2.0, "relu", True, True), None) is None  # True is no int
    assert table.find((x,), (2.0, "gelu", True, 7), None) is None  # not a value of the enum: never keyed
    assert table.find((x,), (2.0, "relu", True, 2**70), None) is None
