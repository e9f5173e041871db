"""torch.matmul's vectors through kabi.ops.matmul: a 1-D a is one row and a 1-D b one column, the added dimension
is removed from the result; the call is decided once, as the matrix problem it stands for, and then remembered;
out=, explain and errors follow."""

import pytest
import torch

import kabi
from kabi.ops import _front

# (a, b) shapes: vector @ vector (0-d), matrix @ vector, vector @ matrix, batched both ways, zero-size.
SHAPES = [((3,), (3,)), ((4, 3), (3,)), ((3,), (3, 5)), ((2, 4, 3), (3,)), ((3,), (2, 3, 5)), ((0,), (0, 5))]


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_vectors_give_torch_matmuls_result_through_the_matrix_kernel(a_shape, b_shape, spy):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    result = kabi.ops.matmul(a, b)
    torch.testing.assert_close(result, torch.matmul(a, b))
    assert result.shape == torch.matmul(a, b).shape
    # The kernel was handed the matrices the vectors stand for.
    promoted = (((1,) + a_shape) if len(a_shape) == 1 else a_shape, (b_shape + (1,)) if len(b_shape) == 1 else b_shape)
    assert spy.calls == [promoted]


def test_a_vector_call_is_decided_once_then_remembered(monkeypatch, untuned):
    misses = []
    monkeypatch.setattr(_front, "_on_selection_miss", lambda front, inputs, out, selection: misses.append(
        tuple(tuple(tensor.shape) for tensor in inputs)))
    a, b = torch.randn(4, 3), torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(kabi.ops.matmul(a, b), torch.matmul(a, b))
    assert misses == [((4, 3), (3, 1))]
    # The matrix call it stands for is a decision of its own, made as before.
    kabi.ops.matmul(a, b.unsqueeze(-1))
    assert misses == [((4, 3), (3, 1)), ((4, 3), (3, 1))]


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_out_receives_the_vector_result(a_shape, b_shape, untuned):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    expected = torch.matmul(a, b)
    for _ in range(2):  # the miss, then the remembered decision
        out = torch.full_like(expected, float("nan"))
        assert kabi.ops.matmul(a, b, out=out) is out
        torch.testing.assert_close(out, expected)


def test_out_of_the_matrix_shape_is_refused_for_vectors(untuned):
    a, b = torch.randn(4, 3), torch.randn(3)
    for _ in range(2):  # the miss, then the remembered decision
        with pytest.raises(kabi.InvalidArgumentError, match=r"out has shape \[4, 1\].*expected shape \[4\]"):
            kabi.ops.matmul(a, b, out=torch.empty(4, 1))
        kabi.ops.matmul(a, b)


def test_explain_shows_the_matrix_problem_of_a_vector_call(untuned):
    explanation = kabi.explain(kabi.ops.matmul, torch.randn(3), torch.randn(3, 5))
    assert explanation.pick is not None
    assert "|1|1|5|3" in str(explanation)  # batch 1, M 1, N 5, K 3


def test_a_scalar_operand_is_refused_naming_it(untuned):
    with pytest.raises(kabi.InvalidArgumentError, match=r"matmul: b has shape \[\] \(rank 0\); expected \[\.\.\., K, N\] or a vector"):
        kabi.ops.matmul(torch.randn(3), torch.tensor(2.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_integer_dtypes_on_cuda_find_no_kernel_and_say_why(untuned):
    a = torch.ones(4, 3, dtype=torch.int32, device="cuda")
    with pytest.raises(kabi.KabiError, match="int32"):
        kabi.ops.matmul(a, a.T.contiguous())
