"""matmul's gradient: float64 gradcheck on every broadcast form, through kabi's dispatch, eager kabi.ops.matmul
differentiable when an input requires grad, and free of autograd when none does."""

import pytest
import torch

import kabi

# (a, b) shapes: plain, batched, broadcast both ways, one side 2-D (the folded gradients), batch of one.
SHAPES = [
    ((4, 3), (3, 5)),
    ((2, 4, 3), (2, 3, 5)),
    ((2, 1, 4, 3), (6, 3, 5)),
    ((1, 4, 3), (3, 3, 5)),
    ((4, 3), (2, 3, 5)),
    ((2, 3, 4, 3), (3, 5)),
]


def inputs(a_shape, b_shape, requires_grad=(True, True)):
    a = torch.randn(a_shape, dtype=torch.float64, requires_grad=requires_grad[0])
    b = torch.randn(b_shape, dtype=torch.float64, requires_grad=requires_grad[1])
    return a, b


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
@pytest.mark.parametrize("op", [kabi.ops.matmul, torch.ops.kabi.matmul], ids=["kabi.ops", "torch.ops.kabi"])
def test_gradcheck(op, a_shape, b_shape, untuned):
    assert torch.autograd.gradcheck(op, inputs(a_shape, b_shape))


@pytest.mark.parametrize(("a_shape", "b_shape"), [SHAPES[2], SHAPES[4]])
def test_gradgradcheck(a_shape, b_shape, untuned):
    assert torch.autograd.gradgradcheck(kabi.ops.matmul, inputs(a_shape, b_shape))


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_gradients_equal_torch_matmul(a_shape, b_shape, untuned):
    a, b = inputs(a_shape, b_shape)
    batch = torch.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    grad = torch.randn(batch + (a_shape[-2], b_shape[-1]), dtype=torch.float64)
    grad_a, grad_b = torch.autograd.grad(kabi.ops.matmul(a, b), (a, b), grad)
    expected_a, expected_b = torch.autograd.grad(torch.matmul(a, b), (a, b), grad)
    torch.testing.assert_close(grad_a, expected_a)
    torch.testing.assert_close(grad_b, expected_b)
    assert grad_a.shape == a.shape and grad_b.shape == b.shape


def test_backward_products_run_through_kabi_dispatch(spy):
    a, b = inputs((2, 4, 3), (3, 5))
    product = kabi.ops.matmul(a, b)
    assert spy.calls == [((2, 4, 3), (3, 5))]
    product.backward(torch.randn_like(product))
    # grad_a = grad @ b^T (batched); grad_b = a^T @ grad with the batch folded into one product.
    assert spy.calls[1:] == [((2, 4, 5), (5, 3)), ((3, 8), (8, 5))]


def test_only_the_needed_gradient_is_computed(spy):
    a, b = inputs((4, 3), (3, 5), requires_grad=(False, True))
    kabi.ops.matmul(a, b).sum().backward()
    assert a.grad is None
    torch.testing.assert_close(b.grad, a.T @ torch.ones(4, 5, dtype=torch.float64))
    assert len(spy.calls) == 2


def test_no_autograd_without_grad_mode_or_inputs_requiring_it(untuned):
    a, b = inputs((4, 3), (3, 5))
    with torch.no_grad():
        assert not kabi.ops.matmul(a, b).requires_grad
    assert not kabi.ops.matmul(a.detach(), b.detach()).requires_grad
    assert kabi.ops.matmul(a, b).grad_fn is not None


def test_out_with_an_input_requiring_grad_is_refused(untuned):
    a, b = inputs((4, 3), (3, 5))
    with pytest.raises(kabi.InvalidArgumentError, match="out= does not support automatic differentiation"):
        kabi.ops.matmul(a, b, out=torch.empty(4, 5, dtype=torch.float64))
    with torch.no_grad():
        out = torch.empty(4, 5, dtype=torch.float64)
        assert kabi.ops.matmul(a, b, out=out) is out
    torch.testing.assert_close(out, a.detach() @ b.detach())


def test_compiled_backward_matches_eager(untuned):
    def loss(a, b):
        return torch.tanh(kabi.ops.matmul(a, b)).sum()

    a, b = inputs((2, 4, 3), (3, 5))
    expected = torch.autograd.grad(loss(a, b), (a, b))
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    actual = torch.autograd.grad(compiled(a, b), (a, b))
    torch.testing.assert_close(actual, expected)


# torch.matmul's vectors, zero-size operands (whose backward once failed reshaping with an inferred size), and
# batches of one broadcast against a batch.
EDGE_SHAPES = [
    ((3,), (3,)),
    ((4, 3), (3,)),
    ((3,), (2, 3, 5)),
    ((2, 1, 4, 3), (3,)),
    ((5, 5, 0), (0, 5)),
    ((0, 0), (5, 0, 0)),
    ((0,), (2, 0, 4)),
    ((2, 4, 3), (1, 3, 5)),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize(("a_shape", "b_shape"), EDGE_SHAPES)
def test_gradients_of_vectors_and_zero_sizes_equal_torch_matmul(a_shape, b_shape, dtype, untuned):
    a = torch.randn(a_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(b_shape, dtype=dtype, requires_grad=True)
    result = kabi.ops.matmul(a, b)
    expected = torch.matmul(a, b)
    assert result.shape == expected.shape
    grad = torch.randn_like(expected)
    actual_grads = torch.autograd.grad(result, (a, b), grad)
    expected_grads = torch.autograd.grad(expected, (a, b), grad)
    for actual_grad, expected_grad in zip(actual_grads, expected_grads):
        assert actual_grad.shape == expected_grad.shape
        torch.testing.assert_close(actual_grad, expected_grad)
    if result.numel():
        assert torch.autograd.gradcheck(kabi.ops.matmul, (a, b))


def test_a_batch_of_one_is_folded_into_one_product(spy):
    a, b = inputs((2, 4, 3), (1, 3, 5))
    product = kabi.ops.matmul(a, b)
    product.backward(torch.randn_like(product))
    # grad_b sums a^H @ grad over a's batch: one product over the batch folded into the inner dimension, as for a
    # 2-D b, which in float16 or bfloat16 also rounds once instead of once per batch element.
    assert spy.calls[1:] == [((2, 4, 5), (1, 5, 3)), ((3, 8), (8, 5))]
