"""Gradients of kabi ops, computed through kabi's own dispatch and registered on the torch custom ops.

Each rule is a ``setup_context`` (what the backward needs from the forward) and a ``backward``: together the
``torch.autograd.Function`` that the Autograd kernel of ``torch.ops.kabi.<op>`` applies when an input requires grad.
The backward calls ``torch.ops.kabi.<op>`` itself, so its products run the kernel kabi picks for them, and it stays
differentiable (double backward) and traceable (torch.compile traces it with fake tensors).

matmul, ``out = a @ b`` with broadcast batch dimensions::

    grad_a = grad @ b^H   summed over the batch dimensions a was broadcast along, to a's shape
    grad_b = a^H @ grad   likewise to b's shape

(^H, the conjugate transpose, is the transpose for real dtypes.) A vector operand (a 1-D a is one row, a 1-D b one
column) is taken as that matrix, with grad given back its missing dimension, and its gradient is a vector again.

When only one side is batched (a layer's weight against a batch of activations, or a batch of one broadcast), the
reduction over the batch is folded into one product with a longer inner dimension instead of a batched product and
a sum: one kernel call, and in float16 or bfloat16 one rounding instead of one per batch element.

Eager ``kabi.ops.<op>`` calls with inputs that require grad go through the custom op (and so through autograd) via
:func:`differentiable`, which wraps the implementation the op front caches for such inputs.

Example::

    >>> a = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    >>> b = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    >>> torch.autograd.gradcheck(torch.ops.kabi.matmul, (a, b))
    True
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch

from .._base.errors import InvalidArgumentError, NotFoundError

__all__ = ["GRADIENTS", "differentiable", "register_gradient"]


def _matmul_setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: torch.Tensor) -> None:
    a, b = inputs
    needs_a, needs_b = ctx.needs_input_grad
    # grad_a needs only b and grad_b only a: keep nothing the backward will not read.
    ctx.save_for_backward(a if needs_b else None, b if needs_a else None)
    ctx.a_shape, ctx.b_shape = a.shape, b.shape


def _matmul_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    a, b = ctx.saved_tensors
    a_is_vector, b_is_vector = len(ctx.a_shape) == 1, len(ctx.b_shape) == 1
    if b_is_vector:
        grad = grad.unsqueeze(-1)
        b = b.unsqueeze(-1) if b is not None else None
    if a_is_vector:
        grad = grad.unsqueeze(-2)
        a = a.unsqueeze(-2) if a is not None else None
    a_shape = (1, *ctx.a_shape) if a_is_vector else ctx.a_shape
    b_shape = (*ctx.b_shape, 1) if b_is_vector else ctx.b_shape
    matmul = torch.ops.kabi.matmul.default
    grad_a = grad_b = None
    # Sizes are spelled out rather than inferred (-1): a reshape cannot infer a size next to a zero-size dimension.
    if ctx.needs_input_grad[0]:
        if math.prod(a_shape[:-2]) == 1 and b.dim() > 2:
            # sum over the batch of grad[i] @ b[i]^H == [grad[0] ... grad[n]] @ [b[0]^H; ...; b[n]^H]
            batch = math.prod(grad.shape[:-2])
            rows = grad.movedim(-2, 0).reshape(grad.shape[-2], batch * grad.shape[-1])
            grad_a = matmul(rows, b.mH.reshape(batch * b.shape[-1], b.shape[-2]))
        else:
            grad_a = matmul(grad, b.mH).sum_to_size(a_shape)
        grad_a = grad_a.reshape(ctx.a_shape)
    if ctx.needs_input_grad[1]:
        if math.prod(b_shape[:-2]) == 1 and a.dim() > 2:
            rows = math.prod(grad.shape[:-1])
            grad_b = matmul(a.reshape(rows, a.shape[-1]).mH, grad.reshape(rows, grad.shape[-1]))
        else:
            grad_b = matmul(a.mH, grad).sum_to_size(b_shape)
        grad_b = grad_b.reshape(ctx.b_shape)
    return grad_a, grad_b


# Per op: (setup_context, backward) of its torch.autograd.Function.
GRADIENTS: dict[str, tuple[Callable[..., None], Callable[..., Any]]] = {
    "matmul": (_matmul_setup_context, _matmul_backward),
}


def _no_gradient(op: str) -> tuple[Callable[..., None], Callable[..., Any]]:
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        pass

    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        raise NotFoundError(
            f"kabi op {op} has no gradient rule (kabi.ops._autograd.GRADIENTS); it cannot be differentiated"
        )

    return setup_context, backward


# Tensors the fast path hands to the op front as they are; subclasses (FakeTensor, FunctionalTensor, DTensor, ...)
# go through the dispatcher below autograd, where their own handling (or the fake implementation) runs.
_DENSE_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})

# The custom op of every op whose gradient is registered (by kabi.ops._torch_ops.define_ops), by op name.
_overloads: dict[str, torch._ops.OpOverload] = {}


def register_gradient(op: str, overload: torch._ops.OpOverload, implementation: Callable[..., Any],
                      library: torch.library.Library) -> None:
    """Register the Autograd kernel of ``op``: its gradient rule (an op without one raises when differentiated),
    and a direct call of ``implementation`` (the op front) when nothing needs autograd.

    ``torch.library.register_autograd`` would do the first part, but its kernel redispatches every call below
    autograd even when no input requires grad: a second trip through the dispatcher into Python that made
    ``torch.ops.kabi.<op>`` (the call compiled graphs make) cost 8.6 us per call on the CPU against 5.1 us here.
    Plain tensors outside any dispatch mode or functorch transform go to the front directly, in the forward of the
    gradient too; anything else is redispatched below autograd, where modes, subclasses and fake tensors are handled.
    """
    setup_context, backward = GRADIENTS.get(op) or _no_gradient(op)
    _overloads[op] = overload
    below_autograd = torch._C._AutoDispatchBelowAutograd
    is_grad_enabled = torch._C.is_grad_enabled
    dispatch_modes = torch._C._len_torch_dispatch_stack
    functorch_active = torch._C._are_functorch_transforms_active

    def below_autograd_call(*inputs: torch.Tensor | None, **attributes: Any) -> Any:
        if not dispatch_modes() and not functorch_active() and \
                all(tensor is None or type(tensor) in _DENSE_TYPES for tensor in inputs):
            return implementation(*inputs, **attributes)
        with below_autograd():
            return overload(*inputs, **attributes)

    forward = below_autograd_call
    apply_arguments: Callable[..., tuple] = lambda inputs, attributes: inputs
    if any(argument.kwarg_only for argument in overload._schema.arguments):
        # Function.apply passes no keyword arguments to forward: an op's attributes travel as one trailing positional
        # argument (a dict, which autograd leaves alone), and the rule finds them on ctx.attributes.
        rule_setup_context, rule_backward = setup_context, backward

        def forward(*arguments: Any) -> Any:
            return below_autograd_call(*arguments[:-1], **arguments[-1])

        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            ctx.attributes = inputs[-1]
            rule_setup_context(ctx, inputs[:-1], output)

        def backward(ctx: Any, *grads: torch.Tensor) -> Any:
            return (*rule_backward(ctx, *grads), None)

        apply_arguments = lambda inputs, attributes: (*inputs, attributes)

    # Function.apply binds its arguments to forward's signature on every call; a precomputed one saves inspecting it.
    forward.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
    gradient = type(f"{op}_gradient", (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
    })

    def autograd_kernel(*inputs: torch.Tensor | None, **attributes: Any) -> Any:
        if is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in inputs):
            return gradient.apply(*apply_arguments(inputs, attributes))
        return below_autograd_call(*inputs, **attributes)

    library.impl(op, autograd_kernel, "Autograd")


def differentiable(op: str, implementation: Callable[..., Any], **attributes: Any) -> Callable[..., Any]:
    """``implementation`` (its ``attributes`` bound) made differentiable, for a decision whose inputs require grad:
    with grad mode on the call goes through ``torch.ops.kabi.<op>`` with the attributes so autograd records it (its
    forward runs ``implementation`` again, with grad mode off, through the same cached decision); with grad mode
    off it is ``implementation`` itself.

    Example::

        implementation = differentiable("matmul", implementation)  # in the op front, for requires_grad inputs
    """
    try:
        overload = _overloads[op]
    except KeyError:
        raise NotFoundError(f"{op}: no torch custom op is registered to differentiate through; "
                            f"registered: {', '.join(_overloads) or 'none'}") from None
    is_grad_enabled = torch.is_grad_enabled

    def call(*inputs: torch.Tensor | None, out: Any = None) -> Any:
        if not is_grad_enabled():
            return implementation(*inputs) if out is None else implementation(*inputs, out=out)
        if out is not None:
            raise InvalidArgumentError(
                f"{op}: out= does not support automatic differentiation, and an input requires grad; "
                f"call it without out= or under torch.no_grad()"
            )
        return overload(*inputs, **attributes)

    return call
