"""Gradients declared in the op's TOML: the [gradient] format and its every load-time error (naming the file and the
field), matmul's rule coming from its declaration, a toy op differentiated through its declared rule in terms of
kabi's matmul, activation_grad against autograd of the reference activations, linear's declared gradient against
autograd of kabi.ops._references.linear, and the errors of an op without a gradient."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

import pytest
import torch

import kabi
from kabi._base.declarations import load_op_file, op_spec
from kabi._base.gradient_declarations import GRADIENT_FUNCTIONS, parse_gradient
from kabi._base.registry_fields import RegistryError
from kabi.ops import _references
from kabi.ops._autograd import GradientRule, autograd_function, gradient_rule
from kabi.ops._gradient_functions import FUNCTIONS, activation_grad
from kabi.ops._references import ACTIVATIONS

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
MATMUL = (REGISTRY / "ops" / "matmul.toml").read_text()
LINEAR_FILE = REGISTRY / "ops" / "linear.toml"
GRADIENT = '[gradient]\na = "matmul_summed(grad, b.mH, a.shape)"\nb = "matmul_summed(a.mH, grad, b.shape)"\n'


def write_op(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "registry" / "ops" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def matmul_with(tmp_path: Path, gradient: str, top_level: str = "") -> Path:
    """matmul.toml with its [gradient] section replaced by ``gradient``, and ``top_level`` keys added before the
    first table."""
    assert GRADIENT in MATMUL
    text = MATMUL.replace(GRADIENT, gradient).replace('reference = "torch.matmul"\n',
                                                      f'reference = "torch.matmul"\n{top_level}')
    return write_op(tmp_path, "matmul", text)


def test_matmul_declares_its_gradient():
    spec = op_spec("matmul")
    assert spec.differentiable is True
    assert {name: expression.text for name, expression in spec.gradient.gradients.items()} == {
        "a": "matmul_summed(grad, b.mH, a.shape)", "b": "matmul_summed(a.mH, grad, b.shape)",
    }
    # matmul_summed calls the kabi op itself: the expressions name no op.
    assert spec.gradient.grad_names == ("grad",) and spec.gradient.ops == frozenset()
    # Each gradient keeps only the other operand's values, and its own input's shape.
    assert spec.gradient.inputs_read(["a"]) == ({"b"}, {"a"})
    assert spec.gradient.inputs_read(["b"]) == ({"a"}, {"b"})
    assert spec.gradient.inputs_read(["a", "b"]) == ({"a", "b"}, frozenset())


def test_the_gradient_functions_are_implemented_under_their_declared_names():
    assert set(FUNCTIONS) == set(GRADIENT_FUNCTIONS)


@pytest.mark.parametrize(
    "gradient, message",
    [
        ('[gradient]\na = "matmul_summed(grad, c.mH, a.shape)"\n', "gradient.a: unknown name 'c'; a gradient expression "
         "may use the inputs \\(a, b\\), grad, the kabi ops \\((\\w+, )*matmul(, \\w+)*\\) and the functions "
         "activation_grad"),
        ('[gradient]\na = "abs(grad)"\n', "gradient.a: unknown name 'abs'"),
        ('[gradient]\na = "__import__(\'os\')"\n', "gradient.a: unknown name '__import__'"),
        ('[gradient]\na = "matmul_summed(grad, b.mH"\n', "gradient.a: not a valid Python expression"),
        ('[gradient]\na = "grad @ b.mH"\n', "gradient.a: '@' would run torch's product; call the kabi op"),
        ('[gradient]\na = "(lambda: grad)()"\n', "gradient.a: Lambda is not allowed"),
        ('[gradient]\na = "grad.__class__"\n', r"gradient.a: unknown tensor attribute .__class__"),
        ('[gradient]\na = "[grad for grad in b]"\n', "gradient.a: ListComp is not allowed"),
        ('[gradient]\na = 1\n', "gradient.a: expected str, got 1"),
        ('[gradient]\nc = "grad"\n', "gradient.c: 'c' is not an input of matmul; a gradient is declared for its inputs: "
         "a, b"),
        ('[gradient]\nout = "grad"\n', "gradient.out: 'out' is not an input of matmul"),
        ('[gradient]\n', "gradient: declares no input's gradient"),
        ('[gradient]\n[gradient.let]\np = "grad"\n', "gradient: declares no input's gradient"),
        ('[gradient]\na = "p"\n[gradient.let]\np = "q.mH"\nq = "p.mH"\n',
         "gradient.let.p: the intermediates p -> q -> p refer to each other in a cycle"),
        ('[gradient]\na = "p"\n[gradient.let]\np = "sum_to(p, a.shape)"\n',
         "gradient.let.p: the intermediates p -> p refer to each other in a cycle"),
        ('[gradient]\na = "p"\n[gradient.let]\np = "grad"\nq = "grad"\n',
         "gradient.let.q: no gradient uses this intermediate; remove it"),
        ('[gradient]\na = "grad"\n[gradient.let]\nb = "grad"\n', "gradient.let.b: 'b' is already an input of matmul"),
        ('[gradient]\na = "rows"\n[gradient.let]\nrows = "grad"\n', "gradient.let.rows: 'rows' is already a gradient "
         "function"),
        ('[gradient]\na = "grad"\nlet = 3\n', "gradient.let: expected dict"),
    ],
)
def test_a_broken_gradient_names_the_file_and_the_field(tmp_path, gradient, message):
    with pytest.raises(RegistryError, match=f"registry/ops/matmul.toml: {message}"):
        load_op_file(matmul_with(tmp_path, gradient))


@pytest.mark.parametrize(
    "gradient, top_level, message",
    [
        (GRADIENT, "differentiable = false\n", "differentiable: false, but the file has a \\[gradient\\] table"),
        ("", "differentiable = true\n", "differentiable: true, but the file has no \\[gradient\\] table"),
        ("", 'differentiable = "no"\n', "differentiable: expected bool"),
    ],
)
def test_a_broken_differentiable_declaration_names_the_file_and_the_field(tmp_path, gradient, top_level, message):
    path = matmul_with(tmp_path, gradient, top_level)
    with pytest.raises(RegistryError, match=f"registry/ops/matmul.toml: {message}"):
        load_op_file(path)


def test_an_intermediate_is_evaluated_only_when_a_gradient_that_needs_it_is(tmp_path):
    gradient = ('[gradient]\na = "sum_to(grad_b_side if b.shape[0] < 0 else matmul(grad, b.mH), a.shape)"\n'
                'b = "matmul_summed(a.mH, grad, b.shape)"\n'
                '[gradient.let]\ngrad_b_side = "unknown_at_run_time"\n')
    with pytest.raises(RegistryError, match="gradient.let.grad_b_side: unknown name 'unknown_at_run_time'"):
        load_op_file(matmul_with(tmp_path, gradient))
    # A valid intermediate on a branch not taken is never evaluated: this one would raise (a 3x5 b does not multiply
    # itself), so gradients coming out right show it was skipped.
    lazy = gradient.replace('"unknown_at_run_time"', '"matmul(b, b)"')
    spec = load_op_file(matmul_with(tmp_path / "lazy", lazy))
    a, b, grad = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    grad_a, grad_b = GradientRule("matmul", spec.gradient).input_gradients((True, True), (a, b), {}, (grad,))
    torch.testing.assert_close(grad_a, grad @ b.T)
    torch.testing.assert_close(grad_b, a.T @ grad)


def test_the_rule_is_the_declaration(tmp_path, spy):
    """A matmul declaration whose gradient differs from the true one (a's doubled) gives that gradient: the rule
    comes from the file, and its products run through kabi's dispatch."""
    doubled = GRADIENT.replace('a = "matmul_summed(grad, b.mH, a.shape)"', 'a = "2 * matmul_summed(grad, b.mH, a.shape)"')
    spec = load_op_file(matmul_with(tmp_path, doubled))
    function = autograd_function("matmul", torch.matmul, gradient_rule(spec))
    a = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, 4, 5, dtype=torch.float64)
    grad_a, grad_b = torch.autograd.grad(function.apply(a, b), (a, b), grad)
    torch.testing.assert_close(grad_a, 2 * grad @ b.detach().T)
    torch.testing.assert_close(grad_b, (a.detach().mT @ grad).sum(0))
    assert spy.calls == [((2, 4, 5), (5, 3)), ((3, 8), (8, 5))]


@pytest.mark.parametrize(
    "declaration, message",
    [
        ("differentiable = false\n", "kabi op matmul is declared not differentiable \\(differentiable = false in "
         "registry/ops/matmul.toml\\); it has no gradient"),
        ("", "kabi op matmul has no gradient: registry/ops/matmul.toml declares neither a \\[gradient\\] table nor "
         "differentiable = false"),
    ],
    ids=["declared-not-differentiable", "undeclared"],
)
def test_differentiating_an_op_without_a_gradient_raises_naming_it(tmp_path, declaration, message):
    spec = load_op_file(matmul_with(tmp_path, "", declaration))
    assert spec.gradient is None and spec.differentiable is (False if declaration else None)
    function = autograd_function("matmul", torch.matmul, gradient_rule(spec))
    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5)
    product = function.apply(a, b)
    torch.testing.assert_close(product, a.detach() @ b)
    with pytest.raises(kabi.NotFoundError, match=message):
        product.sum().backward()


# A toy op with an attribute, registered in the core for this module: scaled_linear(x, w, *, scale) = scale * x @ w^T.
TOY_SCHEMA = "x: [..., K] T, w: [N, K] T, scale: float = 1.0 -> out: [..., N] T"
TOY_GRADIENT = """
[gradient]
x = "scale * matmul(grad, w)"
w = "scale * matmul(rows(grad).mT, rows(x))"
"""


@pytest.fixture(scope="module")
def toy_op() -> str:
    name = f"gradient_toy_{uuid.uuid4().hex[:8]}"
    kabi._core.register_op(name, TOY_SCHEMA, "T: float32, float64")
    return name


def toy_declaration(directory: Path, name: str, gradient: str) -> Path:
    return write_op(directory, name, f"""
name = "{name}"
summary = "A linear layer scaled by an attribute, to test declared gradients"
schema = "{TOY_SCHEMA}"
reference = "tests:none"
[types]
T = ["float32", "float64"]
[tolerance.float32]
norm = 1e-5
extreme = 1e-4
[tolerance.float64]
norm = 1e-12
extreme = 1e-10
[tuning]
key = "dtype,N,K"
{gradient}""")


def scaled_linear(x: torch.Tensor, w: torch.Tensor, *, scale: float) -> torch.Tensor:
    return scale * torch.nn.functional.linear(x, w)


@pytest.mark.parametrize("x_shape", [(5, 3), (2, 4, 3), (3,)], ids=str)
def test_a_toy_op_is_differentiated_through_its_declared_rule(tmp_path, toy_op, x_shape, spy):
    spec = load_op_file(toy_declaration(tmp_path, toy_op, TOY_GRADIENT))
    assert list(spec.gradient.gradients) == ["x", "w"] and spec.gradient.ops == frozenset({"matmul"})
    function = autograd_function(toy_op, scaled_linear, gradient_rule(spec))
    x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(()).item() + 0.5
    assert torch.autograd.gradcheck(lambda x, w: function.apply(x, w, scale), (x, w))
    assert torch.autograd.gradgradcheck(lambda x, w: function.apply(x, w, scale), (x, w))
    assert spy.calls, "the declared gradient's products run through kabi's matmul"
    # Only what the needed gradients read is kept: grad_x reads w, grad_w reads x.
    rule = gradient_rule(spec)
    assert rule.kept((True, False)) == ({1}, frozenset()) and rule.kept((False, True)) == ({0}, frozenset())


def test_a_declared_gradient_is_checked_against_the_registered_schema(tmp_path, toy_op):
    with pytest.raises(RegistryError, match=f"registry/ops/{toy_op}.toml: gradient.w: unknown name 'factor'"):
        load_op_file(toy_declaration(tmp_path, toy_op, TOY_GRADIENT.replace("scale * matmul(rows", "factor * matmul(rows")))
    unregistered = f"gradient_unregistered_{uuid.uuid4().hex[:8]}"
    with pytest.raises(RegistryError, match="gradient: op .* is not registered in libkabi"):
        load_op_file(toy_declaration(tmp_path, unregistered, TOY_GRADIENT))


# -- activation_grad ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_activation_grad_is_the_derivative_of_the_reference_activation(activation):
    x = torch.randn(64, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(64, dtype=torch.float64)
    (expected,) = torch.autograd.grad(ACTIVATIONS[activation].function(x), x, grad)
    torch.testing.assert_close(activation_grad(activation, grad, x.detach()), expected)
    # Differentiable itself (the double backward of linear): its own derivatives, checked numerically.
    assert torch.autograd.gradcheck(lambda grad, x: activation_grad(activation, grad, x),
                                    (grad.requires_grad_(), x))


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_activation_grad_in_half_precision_is_within_a_rounding_of_float64(activation, dtype):
    x = torch.randn(256, dtype=torch.float64) * 4
    grad = torch.randn(256, dtype=torch.float64)
    exact = activation_grad(activation, grad.to(dtype).double(), x.to(dtype).double())
    actual = activation_grad(activation, grad.to(dtype), x.to(dtype))
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.double(), exact, rtol=torch.finfo(dtype).eps, atol=torch.finfo(dtype).eps)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_activation_grad_stays_finite_far_from_zero(activation):
    x = torch.tensor([-1e4, -60.0, -20.0, 20.0, 60.0, 1e4], dtype=torch.float32)
    slope = activation_grad(activation, torch.ones_like(x), x)
    assert torch.isfinite(slope).all()
    torch.testing.assert_close(slope[-3:], torch.ones(3))
    if activation != "none":
        torch.testing.assert_close(slope[:3], torch.zeros(3), atol=1e-6, rtol=0)


def test_activation_grad_names_its_vocabulary():
    with pytest.raises(ValueError, match="activation must be one of none, relu, gelu, gelu_tanh, silu; got 'tanh'"):
        activation_grad("tanh", torch.ones(2), torch.ones(2))


# -- linear's declared gradient ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linear_rule() -> GradientRule:
    """linear's [gradient] from its declaration, for an op of linear's schema registered under a name of its own,
    with the reference standing in for the kabi op linear: the expressions are checked apart from any kernel."""
    declaration = tomllib.loads(LINEAR_FILE.read_text())
    name = f"gradient_linear_{uuid.uuid4().hex[:8]}"
    kabi._core.register_op(name, declaration["schema"], "T: float16, bfloat16, float32, float64")
    gradient = parse_gradient(LINEAR_FILE, declaration["gradient"], kabi._core.op_schema(name), {"linear", "matmul"})
    return GradientRule(name, gradient, ops={"linear": _references.linear})


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("x_shape", [(5, 4), (2, 3, 4), (4,)], ids=str)
def test_linear_gradient_expressions_equal_autograd_of_the_reference(linear_rule, activation, with_bias, x_shape):
    x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, requires_grad=True) if with_bias else None
    inputs = (x, w) + ((bias,) if with_bias else ())
    output = _references.linear(x, w, bias, activation)
    grad = torch.randn_like(output)
    expected = torch.autograd.grad(output, inputs, grad)
    actual = linear_rule.input_gradients((True, True, with_bias), (x.detach(), w.detach(), bias),
                                         {"activation": activation}, (grad,))
    assert actual[2] is None or with_bias
    for actual_grad, expected_grad in zip(actual, expected):
        assert actual_grad.shape == expected_grad.shape
        torch.testing.assert_close(actual_grad, expected_grad)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_linear_gradient_is_differentiable_twice(linear_rule, activation):
    function = autograd_function(linear_rule.op, _references.linear, linear_rule)
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *inputs: function.apply(*inputs, activation), (x, w, bias))
    assert torch.autograd.gradgradcheck(lambda *inputs: function.apply(*inputs, activation), (x, w, bias))


def test_linear_recomputes_the_pre_activation_only_with_an_activation(linear_rule):
    calls = []

    def counted_linear(*inputs: torch.Tensor | None) -> torch.Tensor:
        calls.append(len(inputs))
        return _references.linear(*inputs)

    rule = GradientRule(linear_rule.op, linear_rule.gradient, ops={"linear": counted_linear})
    x, w, grad = torch.randn(3, 4), torch.randn(5, 4), torch.randn(3, 5)
    for activation in ACTIVATIONS:
        calls.clear()
        rule.input_gradients((True, True, False), (x, w, None), {"activation": activation}, (grad,))
        assert calls == ([] if activation == "none" else [3]), activation
    assert rule.kept((True, False, False)) == ({0, 1, 2}, frozenset())
