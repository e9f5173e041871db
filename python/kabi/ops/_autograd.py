"""Gradients of kabi ops, as their TOML declares them, computed through kabi's own dispatch and registered on the
torch custom ops.

An op's ``[gradient]`` table (``registry/ops/<op>.toml``; its format, and the compilation of its expressions, are
``kabi._base.declarations``') gives each differentiable input's gradient as an expression in kabi ops, the op's
inputs and attributes, and ``grad``; matmul's::

    a = "matmul_summed(grad, b.mH, a.shape)"
    b = "matmul_summed(a.mH, grad, b.shape)"

:class:`GradientRule` runs them: the ``setup_context`` of the op's ``torch.autograd.Function`` keeps only the inputs
that the gradients of the inputs requiring grad read (just the shape of one read only through ``.shape``), and its
``backward`` evaluates those gradients, each intermediate of ``[gradient.let]`` at its first use. Kabi ops in the
expressions are ``torch.ops.kabi.<op>``, so their products run the kernels kabi picks for them, and a gradient stays
differentiable (double backward) and traceable (torch.compile traces it with fake tensors). A vector operand (the
op's ``vectors``) reaches the expressions as the matrix it stands for, and its gradient is given back as a vector.
The function names they may call are implemented in :mod:`kabi.ops._gradient_functions`.

An op declared ``differentiable = false``, or with neither declaration, raises ``NotFoundError`` naming the op when
a gradient is asked of it.

Eager ``kabi.ops.<op>`` calls with inputs that require grad go through the custom op (and so through autograd) via
:func:`differentiable`, which wraps the implementation the op front caches for such inputs.

Example::

    >>> a = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    >>> b = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    >>> torch.autograd.gradcheck(torch.ops.kabi.matmul, (a, b))
    True
"""

from __future__ import annotations

import builtins
import inspect
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import torch

from .._base.declarations import OpSpec
from .._base.gradient_declarations import GRADIENT_FUNCTIONS, GradientSpec
from .._base.registry_fields import display_path
from .._base.errors import InvalidArgumentError, NotFoundError
from ._gradient_functions import FUNCTIONS
from ._schema import op_schema

__all__ = ["GradientRule", "autograd_function", "differentiable", "gradient_rule", "register_gradient"]


# The builtins of an expression: only __import__, which C code (torch's, while tracing the backward) looks up in the
# calling frame's builtins when it imports a module. An expression cannot name it: the declaration's loader rejects
# every name outside the vocabulary.
_BUILTINS = {"__import__": builtins.__import__}


class _ShapeOf(NamedTuple):
    """An input the backward did not keep: its gradient expressions read only its shape."""

    shape: tuple[Any, ...]


class _Scope(dict):
    """The local names of one evaluation: inputs, attributes, output gradients, and the intermediates of
    ``[gradient.let]``, each evaluated when an expression first reads it (``eval`` looks a name up in a dict
    subclass through ``__getitem__``, and so ``__missing__``; a KeyError sends it on to the global names)."""

    def __init__(self, values: Mapping[str, Any], gradient: GradientSpec, global_names: dict[str, Any]) -> None:
        super().__init__(values)
        self.intermediates = gradient.intermediates
        self.global_names = global_names

    def __missing__(self, name: str) -> Any:
        value = self[name] = eval(self.intermediates[name].code, self.global_names, self)
        return value


class GradientRule:
    """An op's declared gradient, ready to run: what a backward keeps from the forward, and the inputs' gradients.

    ``ops`` stands in for kabi ops the expressions call, by name (e.g. a reference, to check the expressions
    against it); every other op is ``torch.ops.kabi.<op>``.

    Example::

        >>> rule = GradientRule("matmul", op_spec("matmul").gradient, (("a", "M"), ("b", "N")))
        >>> grad_a, grad_b = rule.input_gradients((True, True), (a, b), {}, (torch.ones(4, 2),))
    """

    def __init__(self, op: str, gradient: GradientSpec, vectors: tuple[tuple[str, str], ...] = (),
                 ops: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.op = op
        self.gradient = gradient
        self.schema = op_schema(op, vectors)
        self.input_names = self.schema.input_names
        self._ops = dict(ops or {})
        self._global_names: dict[str, Any] | None = None
        self._kept: dict[tuple[bool, ...], tuple[frozenset[int], frozenset[int]]] = {}

    def kept(self, needs: Sequence[bool]) -> tuple[frozenset[int], frozenset[int]]:
        """For inputs of which those flagged in ``needs`` require grad: the positions of the inputs whose values
        their gradients read, and of those whose shapes only."""
        key = tuple(needs)
        kept = self._kept.get(key)
        if kept is None:
            targets = [name for name, need in zip(self.input_names, key) if need and name in self.gradient.gradients]
            values, shapes = self.gradient.inputs_read(targets)
            kept = self._kept[key] = (
                frozenset(index for index, name in enumerate(self.input_names) if name in values),
                frozenset(index for index, name in enumerate(self.input_names) if name in shapes),
            )
        return kept

    def input_gradients(self, needs: Sequence[bool], inputs: Sequence[Any], attributes: Mapping[str, Any],
                        grads: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        """The gradient of each input flagged in ``needs`` (None for the others), given the inputs (None for an
        absent optional one; only those :meth:`kept` names need be tensors, the others may be anything with their
        ``shape``), every attribute by name, and the gradient of each output."""
        gradients = self.gradient.gradients
        for name, need in zip(self.input_names, needs):
            if need and name not in gradients:
                raise NotFoundError(
                    f"kabi op {self.op} declares no gradient for its input {name} (its [gradient] declares "
                    f"{', '.join(gradients)}); it cannot be differentiated with respect to {name}"
                )
        promotion = self.schema.vector_promotion(self.op, [getattr(value, "shape", None) for value in inputs])
        if promotion is not None:
            inputs = [
                _ShapeOf(promotion.input_shape(index, value.shape)) if isinstance(value, _ShapeOf)
                else value if value is None else promotion.promote_input(index, value)
                for index, value in enumerate(inputs)
            ]
            grads = [promotion.promote_output(index, grad) for index, grad in enumerate(grads)]
        global_names = self._globals()
        scope = _Scope(
            {**dict(zip(self.input_names, inputs)), **attributes, **dict(zip(self.gradient.grad_names, grads))},
            self.gradient, global_names,
        )
        results = []
        for index, (name, need) in enumerate(zip(self.input_names, needs)):
            if not need:
                results.append(None)
                continue
            result = eval(gradients[name].code, global_names, scope)
            if promotion is not None and promotion.inputs[index] is not None:
                result = result.squeeze(promotion.inputs[index])
            results.append(result)
        return tuple(results)

    def _globals(self) -> dict[str, Any]:
        """The names every expression may read besides the scope's: the gradient functions and the kabi ops they
        call, and no builtins. Built at the first backward, when every ``torch.ops.kabi.<op>`` is defined."""
        if self._global_names is None:
            ops = {name: self._ops.get(name) or getattr(torch.ops.kabi, name).default for name in self.gradient.ops}
            self._global_names = {"__builtins__": _BUILTINS, **{name: FUNCTIONS[name] for name in GRADIENT_FUNCTIONS},
                                  **ops}
        return self._global_names


class _NoGradient:
    """The rule of an op without a gradient: nothing to keep, and an error saying why when one is asked of it."""

    def __init__(self, message: str) -> None:
        self.message = message

    def kept(self, needs: Sequence[bool]) -> tuple[frozenset[int], frozenset[int]]:
        return frozenset(), frozenset()

    def input_gradients(self, *arguments: Any) -> tuple[torch.Tensor | None, ...]:
        raise NotFoundError(self.message)


def gradient_rule(spec: OpSpec) -> GradientRule | _NoGradient:
    """The gradient rule an op's declaration gives: its ``[gradient]``, or, for an op declared not differentiable or
    declaring neither, a rule that raises ``NotFoundError`` saying so when a gradient is asked of it."""
    op = spec.name
    if spec.gradient is not None:
        return GradientRule(op, spec.gradient, tuple(spec.vectors.items()))
    file = display_path(spec.path)
    if spec.differentiable is False:
        return _NoGradient(f"kabi op {op} is declared not differentiable (differentiable = false in {file}); "
                           "it has no gradient")
    return _NoGradient(f"kabi op {op} has no gradient: {file} declares neither a [gradient] table nor "
                       "differentiable = false")


def autograd_function(op: str, forward: Callable[..., Any],
                      rule: GradientRule | _NoGradient) -> type[torch.autograd.Function]:
    """The ``torch.autograd.Function`` of ``op``: ``forward(*inputs, **attributes)`` computes the outputs, ``rule``
    the gradients. Its ``apply`` takes the inputs and then the attribute values in schema order, all positionally
    (``Function.apply`` hands ``forward`` positional arguments only).

    Example::

        >>> function = autograd_function("matmul", torch.matmul, gradient_rule(op_spec("matmul")))
        >>> torch.autograd.gradcheck(function.apply, (a, b))
    """
    schema = op_schema(op)
    input_count = len(schema.inputs)
    attribute_names = schema.attribute_names
    no_attribute_gradients = (None,) * len(attribute_names)

    def forward_call(*arguments: Any) -> Any:
        if not attribute_names:
            return forward(*arguments)
        return forward(*arguments[:input_count], **dict(zip(attribute_names, arguments[input_count:])))

    def setup_context(ctx: Any, arguments: tuple[Any, ...], output: Any) -> None:
        inputs = arguments[:input_count]
        values, shapes = rule.kept(ctx.needs_input_grad[:input_count])
        ctx.save_for_backward(*[tensor if index in values else None for index, tensor in enumerate(inputs)])
        ctx.input_shapes = [tensor.shape if index in shapes else None for index, tensor in enumerate(inputs)]
        ctx.attributes = dict(zip(attribute_names, arguments[input_count:]))

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        inputs = [tensor if shape is None else _ShapeOf(shape)
                  for tensor, shape in zip(ctx.saved_tensors, ctx.input_shapes)]
        gradients = rule.input_gradients(ctx.needs_input_grad[:input_count], inputs, ctx.attributes, grads)
        return (*gradients, *no_attribute_gradients)

    # Function.apply binds its arguments to forward's signature on every call; a precomputed one saves inspecting it.
    forward_call.__signature__ = inspect.signature(forward_call)  # type: ignore[attr-defined]
    return type(f"{op}_gradient", (torch.autograd.Function,), {
        "forward": staticmethod(forward_call),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
    })


# Tensors the fast path hands to the op front as they are (None for an absent optional input); subclasses
# (FakeTensor, FunctionalTensor, DTensor, ...) go through the dispatcher below autograd, where their own handling (or
# the fake implementation) runs.
_DIRECT_TYPES = frozenset({torch.Tensor, torch.nn.Parameter, type(None)})

# The custom op of every op whose gradient is registered (by kabi.ops._torch_ops.define_ops), by op name.
_overloads: dict[str, torch._ops.OpOverload] = {}


def register_gradient(spec: OpSpec, overload: torch._ops.OpOverload, implementation: Callable[..., Any],
                      library: torch.library.Library) -> None:
    """Register the Autograd kernel of the op ``spec`` declares: its gradient (an op without one raises when
    differentiated), and a direct call of ``implementation`` (the op front) when nothing needs autograd. Both take
    the tensors positionally and the attributes by keyword.

    ``torch.library.register_autograd`` would do the first part, but its kernel redispatches every call below
    autograd even when no input requires grad: a second trip through the dispatcher into Python that made
    ``torch.ops.kabi.<op>`` (the call compiled graphs make) cost 8.6 us per call on the CPU against 5.1 us here.
    Plain tensors outside any dispatch mode or functorch transform go to the front directly, in the forward of the
    gradient too; anything else is redispatched below autograd, where modes, subclasses and fake tensors are handled.
    """
    op = spec.name
    _overloads[op] = overload
    below_autograd = torch._C._AutoDispatchBelowAutograd
    is_grad_enabled = torch._C.is_grad_enabled
    dispatch_modes = torch._C._len_torch_dispatch_stack
    functorch_active = torch._C._are_functorch_transforms_active
    schema = op_schema(op)
    attribute_names = schema.attribute_names
    attribute_defaults = [attribute.default for attribute in schema.attributes]
    complete_inputs = schema.complete_inputs

    def below_autograd_call(*inputs: torch.Tensor | None, **attributes: Any) -> Any:
        if not dispatch_modes() and not functorch_active() and all(type(tensor) in _DIRECT_TYPES for tensor in inputs):
            return implementation(*inputs, **attributes)
        with below_autograd():
            return overload(*inputs, **attributes)

    gradient = autograd_function(op, below_autograd_call, gradient_rule(spec))

    def autograd_kernel(*inputs: torch.Tensor | None, **attributes: Any) -> Any:
        if is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in inputs):
            # apply takes every input by position, absent ones too.
            return gradient.apply(*complete_inputs(inputs), *map(attributes.get, attribute_names, attribute_defaults))
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
