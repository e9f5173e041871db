"""Adding an op takes no code outside its declaration and its kernels (issue 11, item 3).

``axpby`` is declared here, in TOML text, with a reference in this module and torch kernels registered with
``kabi.register_kernel``; nothing else of kabi knows it. It is then used through every door: ``kabi.ops.axpby``
(attributes, defaults, ``out=``, hits), ``kabi.explain``, tuning, ``kabi.use``, ``torch.ops.kabi.axpby``,
``torch.compile`` (eager and inductor backends), and a C program that registers the same op text and calls it
with ``kabi_call``. Two more toy ops cover what axpby lacks: an optional input, an enum and a required attribute
(``toy_affine``), and two outputs, one of a concrete dtype (``toy_sign_split``).

Registered ops live as long as the process, so the names here are this module's own; the kernels are removed when
the module's tests end.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess

import pytest
import torch

import _cmake
import kabi
from kabi import config
from kabi._base.declarations import read_op_declaration
from kabi._base.registry_fields import RegistryError

SCHEMA = "x: [..., N] T, y: [..., N] T, alpha: float = 1.0, beta: float = 1.0 -> out: [..., N] T"
TYPES = ("float32", "float64")
TUNING_KEY = "dtype,layout,batch,N"

AXPBY = f"""
name = "axpby"
summary = "alpha * x + beta * y, y broadcast along x's leading dimensions"
schema = "{SCHEMA}"
reference = "test_toy_op:axpby_reference"

[types]
T = {list(TYPES)!r}

# float32: one rounding of each product and of the sum, a few ulp of the largest output.
[tolerance.float32]
norm = 1e-6
extreme = 1e-5
[tolerance.float64]
norm = 1e-14
extreme = 1e-13

[tuning]
key = "{TUNING_KEY}"
"""

AFFINE = """
name = "toy_affine"
summary = "x, negated or kept, plus an optional shift, repeated"
schema = "x: [..., N] T, shift?: [N] T, mode: enum(keep, negate), repeat: int = 1 -> out: [..., N] T"
reference = "test_toy_op:affine_reference"
[types]
T = ["float32", "float64"]
[tolerance.float32]
norm = 1e-6
extreme = 1e-5
[tolerance.float64]
norm = 1e-14
extreme = 1e-13
[tuning]
key = "dtype,layout,batch,N,mode"
"""

SIGN_SPLIT = """
name = "toy_sign_split"
summary = "|x| and the sign of x"
schema = "x: [..., N] T -> magnitude: [..., N] T, sign: [..., N] int8"
reference = "test_toy_op:sign_split_reference"
[types]
T = ["float32", "float64"]
[tolerance.float32]
norm = 1e-7
extreme = 1e-7
[tolerance.float64]
norm = 1e-15
extreme = 1e-15
[tuning]
key = "dtype,layout,batch,N"
"""


def axpby_reference(x, y, alpha=1.0, beta=1.0):
    return alpha * x + beta * y


def affine_reference(x, shift=None, mode="keep", repeat=1):
    result = (-x if mode == "negate" else x) * repeat
    return result if shift is None else result + shift * repeat


def sign_split_reference(x):
    return x.abs(), torch.sign(x).to(torch.int8)


def axpby_torch(x, y, out=None, *, alpha, beta):
    return torch.add(torch.mul(x, alpha), y, alpha=beta, out=out)


def axpby_in_place(x, y, out=None, *, alpha, beta):
    result = x.mul(alpha).add_(y, alpha=beta)
    return result if out is None else out.copy_(result)


def affine_torch(x, shift=None, out=None, *, mode, repeat):
    result = affine_reference(x, shift, mode, repeat)
    return result if out is None else out.copy_(result)


def sign_split_torch(x, out=None):
    magnitude, sign = sign_split_reference(x)
    if out is None:
        return magnitude, sign
    out[0].copy_(magnitude)
    out[1].copy_(sign)
    return out


KERNELS = [
    ("axpby", axpby_torch, "toy.axpby.torch"),
    ("axpby", axpby_in_place, "toy.axpby.in_place"),
    ("toy_affine", affine_torch, "toy.affine.torch"),
    ("toy_sign_split", sign_split_torch, "toy.sign_split.torch"),
]


@pytest.fixture(scope="module", autouse=True)
def toy_ops():
    """The toy ops (registered once per process) and their kernels (removed when the module ends)."""
    for text in (AXPBY, AFFINE, SIGN_SPLIT):
        if read_op_declaration(text).name not in kabi.ops.__all__:
            kabi.register_op(text)
    for op, fn, name in KERNELS:
        kabi.register_kernel(op, fn, name=name, type_constraints={"T": ["float32", "float64"]})
    yield
    for op, _, name in KERNELS:
        kabi.unregister_kernel(op, name)


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _random(generator: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=dtype)


def _coefficient(generator: torch.Generator) -> float:
    return float(torch.empty(()).uniform_(0.5, 3.0, generator=generator)) * (-1) ** int(torch.randint(2, (), generator=generator))


# -- the op exists everywhere ------------------------------------------------------------------------------------


def test_register_op_makes_the_op_function_and_the_torch_op():
    assert "axpby" in kabi.ops.__all__ and "register_op" in kabi.__all__
    assert kabi.ops.axpby.__module__ == "kabi.ops" and kabi.ops.axpby.__name__ == "axpby"
    assert str(inspect.signature(kabi.ops.axpby)) == "(x, y, /, *, alpha=1.0, beta=1.0, out=None)"
    assert str(inspect.signature(kabi.ops.toy_affine)) == "(x, /, shift=None, *, mode, repeat=1, out=None)"
    assert SCHEMA in kabi.ops.axpby.__doc__ and "alpha is a float (default 1.0)" in kabi.ops.axpby.__doc__
    assert str(torch.ops.kabi.axpby.default._schema) == \
        "kabi::axpby(Tensor x, Tensor y, *, float alpha=1., float beta=1.) -> Tensor"
    assert str(torch.ops.kabi.toy_affine.default._schema) == \
        'kabi::toy_affine(Tensor x, Tensor? shift=None, *, str mode, int repeat=1) -> Tensor'
    assert str(torch.ops.kabi.toy_sign_split.default._schema) == \
        "kabi::toy_sign_split(Tensor x) -> (Tensor, Tensor)"


def test_a_second_registration_of_a_name_is_refused():
    with pytest.raises(kabi.AlreadyExistsError, match="op 'axpby' is already registered"):
        kabi.register_op(AXPBY)
    with pytest.raises(kabi.AlreadyExistsError, match="matmul"):
        kabi.register_op(AXPBY.replace('name = "axpby"', 'name = "matmul"'))


def test_a_declaration_is_checked_like_an_op_file(tmp_path):
    with pytest.raises(RegistryError, match=r"<op declaration text>: tolerance\.float64: missing \(required\)"):
        kabi.register_op(AXPBY.replace("[tolerance.float64]\nnorm = 1e-14\nextreme = 1e-13\n", ""))
    with pytest.raises(RegistryError, match="<op declaration text>: not valid TOML"):
        kabi.register_op("name = ")
    path = tmp_path / "toy_file_op.toml"
    path.write_text(AXPBY.replace('name = "axpby"', 'name = "other_name"'))
    with pytest.raises(RegistryError, match="'other_name' must match the file name 'toy_file_op'"):
        kabi.register_op(path)
    assert "toy_file_op" not in kabi.ops.__all__ and "other_name" not in kabi.ops.__all__


def test_an_op_is_registered_from_its_file(tmp_path, generator):
    path = tmp_path / "toy_file_axpby.toml"
    path.write_text(AXPBY.replace('name = "axpby"', 'name = "toy_file_axpby"'))
    function = kabi.register_op(str(path))
    assert function is kabi.ops.toy_file_axpby
    kabi.register_kernel("toy_file_axpby", axpby_torch, name="toy.file_axpby.torch")
    try:
        x, y = _random(generator, 4, 6), _random(generator, 6)
        torch.testing.assert_close(kabi.ops.toy_file_axpby(x, y, beta=-2.0), x - 2.0 * y)
    finally:
        kabi.unregister_kernel("toy_file_axpby", "toy.file_axpby.torch")


# -- calls -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_op_computes_its_reference_with_the_callers_attributes(dtype, generator):
    alpha, beta = _coefficient(generator), _coefficient(generator)
    x, y = _random(generator, 3, 4, 9, dtype=dtype), _random(generator, 9, dtype=dtype)
    result = kabi.ops.axpby(x, y, alpha=alpha, beta=beta)
    assert result.dtype == dtype and result.shape == (3, 4, 9)
    torch.testing.assert_close(result, axpby_reference(x.double(), y.double(), alpha, beta).to(dtype))
    # Defaults, one attribute given, and the other.
    torch.testing.assert_close(kabi.ops.axpby(x, y), x + y)
    torch.testing.assert_close(kabi.ops.axpby(x, y, alpha=alpha), axpby_reference(x, y, alpha))
    torch.testing.assert_close(kabi.ops.axpby(x, y, beta=beta), axpby_reference(x, y, beta=beta))


def test_each_attribute_value_is_its_own_decision_and_repeats_are_hits(generator):
    table = kabi.ops._front.front_of("axpby").cache
    x, y = _random(generator, 5, 7), _random(generator, 5, 7)
    results = {}
    for alpha in (1.5, -0.25, 1.5, -0.25):
        results.setdefault(alpha, []).append(kabi.ops.axpby(x, y, alpha=alpha))
    hits = table.hits
    misses = table.misses
    for alpha, (first, second) in results.items():
        torch.testing.assert_close(first, axpby_reference(x, y, alpha))
        torch.testing.assert_close(second, first)
    kabi.ops.axpby(x, y, alpha=1.5)
    kabi.ops.axpby(x, y, alpha=1.5, beta=2.0)
    assert (table.hits, table.misses) == (hits + 1, misses + 1)


def test_out_is_written_and_returned(generator):
    x, y = _random(generator, 6, 8), _random(generator, 8)
    out = torch.empty(6, 8)
    assert kabi.ops.axpby(x, y, alpha=3.0, out=out) is out
    torch.testing.assert_close(out, 3.0 * x + y)
    strided = torch.empty(8, 6).t()
    assert kabi.ops.axpby(x, y, beta=0.5, out=strided) is strided
    torch.testing.assert_close(strided, x + 0.5 * y)
    with pytest.raises(kabi.InvalidArgumentError, match=r"axpby: out has shape \[6, 7\]; expected \[6, 8\]"):
        kabi.ops.axpby(x, y, out=torch.empty(6, 7))
    # On a hit (alpha=3.0 was decided above) out is checked against the decision's result.
    with pytest.raises(kabi.InvalidArgumentError, match=r"axpby: out has shape \[6, 8\], dtype float64 on cpu; "
                                                        r"expected shape \[6, 8\], dtype float32 on cpu"):
        kabi.ops.axpby(x, y, alpha=3.0, out=torch.empty(6, 8, dtype=torch.float64))
    with pytest.raises(kabi.ArgumentTypeError, match="axpby: out must be a torch.Tensor, got builtins.list"):
        kabi.ops.axpby(x, y, alpha=3.0, out=[0.0] * 48)


def test_each_kernel_forced_matches_the_reference(generator):
    x, y = _random(generator, 2, 3, 16, dtype=torch.float64), _random(generator, 3, 16, dtype=torch.float64)
    alpha, beta = _coefficient(generator), _coefficient(generator)
    for _, _, name in KERNELS[:2]:
        with kabi.use(axpby=name):
            torch.testing.assert_close(kabi.ops.axpby(x, y, alpha=alpha, beta=beta), axpby_reference(x, y, alpha, beta))
            assert kabi.explain(kabi.ops.axpby, x, y, alpha=alpha).pick == name


def test_the_kernel_decorator_registers_for_a_type_variable(generator):
    @kabi.kernel("axpby", name="toy.axpby.float64_only", type_constraints={"T": ["float64"]}, priority=50)
    def float64_only(x, y, out=None, *, alpha, beta):
        return axpby_torch(x, y, out, alpha=alpha, beta=beta)

    try:
        x, y = _random(generator, 7, dtype=torch.float64), _random(generator, 7, dtype=torch.float64)
        assert kabi.kernel_info("axpby", "toy.axpby.float64_only").type_constraints == "T: float64"
        with kabi.use(axpby="toy.axpby.float64_only"):
            torch.testing.assert_close(kabi.ops.axpby(x, y, alpha=0.5), 0.5 * x + y)
        candidates = kabi.explain(kabi.ops.axpby, x.float(), y.float()).candidates
        [declined] = [candidate for candidate in candidates if candidate.name == "toy.axpby.float64_only"]
        assert not declined.eligible and "float32" in declined.reason
    finally:
        kabi.unregister_kernel("axpby", "toy.axpby.float64_only")


def test_an_optional_input_may_be_given_by_position_or_name_or_left_out(generator):
    x, shift = _random(generator, 4, 5, dtype=torch.float64), _random(generator, 5, dtype=torch.float64)
    torch.testing.assert_close(kabi.ops.toy_affine(x, mode="negate"), -x)
    torch.testing.assert_close(kabi.ops.toy_affine(x, shift, mode="keep", repeat=3), (x + shift) * 3)
    torch.testing.assert_close(kabi.ops.toy_affine(x, shift=shift, mode="negate"), shift - x)
    torch.testing.assert_close(kabi.ops.toy_affine(x, None, mode="keep"), x)
    explanation = kabi.explain(kabi.ops.toy_affine, x, mode="negate", repeat=2)
    assert explanation.problem.layouts == ("contiguous", "absent")
    assert explanation.problem.attributes == ("negate", 2)


def test_two_outputs_come_back_as_a_tuple_and_out_takes_one(generator):
    x = _random(generator, 3, 10)
    magnitude, sign = kabi.ops.toy_sign_split(x)
    assert magnitude.dtype == torch.float32 and sign.dtype == torch.int8
    torch.testing.assert_close(magnitude, x.abs())
    assert torch.equal(sign, torch.sign(x).to(torch.int8))
    out = (torch.empty(3, 10), torch.empty(3, 10, dtype=torch.int8))
    result = kabi.ops.toy_sign_split(x, out=out)
    assert result[0] is out[0] and result[1] is out[1]
    assert torch.equal(out[1], sign) and torch.equal(out[0], magnitude)
    with pytest.raises(kabi.InvalidArgumentError, match=r"toy_sign_split: out\[1\] has .*dtype float32.*expected .*int8"):
        kabi.ops.toy_sign_split(x, out=(torch.empty(3, 10), torch.empty(3, 10)))
    with pytest.raises(kabi.ArgumentTypeError, match="toy_sign_split: out must be a tuple of 2 tensors, got Tensor"):
        kabi.ops.toy_sign_split(x, out=torch.empty(3, 10))


def test_inputs_that_require_grad_keep_the_attributes_and_name_the_missing_gradient(generator):
    x, y = _random(generator, 3, 5).requires_grad_(), _random(generator, 5)
    for _ in range(2):  # the miss, then the hit
        result = kabi.ops.axpby(x, y, alpha=-3.0, beta=0.25)
        assert result.grad_fn is not None
        torch.testing.assert_close(result, -3.0 * x + 0.25 * y)
    with pytest.raises(kabi.NotFoundError, match=r"kabi op axpby has no gradient: <op declaration text> declares neither a \[gradient\] table"):
        result.sum().backward()


# -- errors name the argument ------------------------------------------------------------------------------------


def test_errors_name_the_argument_and_what_it_takes(generator):
    x, y = _random(generator, 4), _random(generator, 4)
    with pytest.raises(kabi.ArgumentTypeError, match=r"^axpby: alpha must be a float, got 'x'$"):
        kabi.ops.axpby(x, y, alpha="x")
    with pytest.raises(kabi.ArgumentTypeError, match=r"^axpby: beta must be a float, got True$"):
        kabi.ops.axpby(x, y, beta=True)
    with pytest.raises(TypeError, match="gamma"):
        kabi.ops.axpby(x, y, gamma=1.0)
    with pytest.raises(TypeError, match="missing a required argument: 'mode'"):
        kabi.ops.toy_affine(x)
    with pytest.raises(kabi.InvalidArgumentError, match=r"^toy_affine: mode must be one of keep, negate; got 'swap'$"):
        kabi.ops.toy_affine(x, mode="swap")
    with pytest.raises(kabi.ArgumentTypeError, match=r"^toy_affine: repeat must be an int, got 1.5$"):
        kabi.ops.toy_affine(x, mode="keep", repeat=1.5)
    with pytest.raises(kabi.ArgumentTypeError, match=r"^toy_affine: shift must be a tensor or None, got list$"):
        kabi.ops.toy_affine(x, [1.0, 2.0, 3.0, 4.0], mode="keep")
    with pytest.raises(kabi.ArgumentTypeError, match=r"axpby: y must be a torch.Tensor, got builtins.list"):
        kabi.ops.axpby(x, [1.0] * 4)
    with pytest.raises(kabi.UnsupportedDtypeError, match="y"):
        kabi.ops.axpby(x, y.double())
    with pytest.raises(kabi.InvalidArgumentError, match="y"):
        kabi.ops.axpby(x, _random(generator, 5))


# -- explain, tuning -----------------------------------------------------------------------------------------------


def test_explain_selects_with_the_attributes(generator):
    x, y = _random(generator, 8, 32), _random(generator, 32)
    explanation = kabi.explain(kabi.ops.axpby, x, y, alpha=2.0)
    assert explanation.op == "axpby" and explanation.pick in {"toy.axpby.torch", "toy.axpby.in_place"}
    assert explanation.problem.attributes == (2.0, 1.0)
    assert explanation.problem.dims == {"N": 32} and explanation.problem.batch_shape == (8,)
    assert {candidate.name for candidate in explanation.candidates if candidate.eligible} == \
        {"toy.axpby.torch", "toy.axpby.in_place"}
    with pytest.raises(kabi.ArgumentTypeError, match="axpby: alpha must be a float"):
        kabi.explain(kabi.ops.axpby, x, y, alpha=[2.0])


def test_first_call_tuning_records_every_kernel_for_the_problem(generator):
    x, y = _random(generator, 16, 64, dtype=torch.float64), _random(generator, 64, dtype=torch.float64)
    alpha, beta = _coefficient(generator), _coefficient(generator)
    problem = kabi.explain(kabi.ops.axpby, x, y, alpha=alpha, beta=beta).problem_key
    with kabi.tuning("first-call", warmup=1, repeat=3, min_time_s=0.0):
        result = kabi.ops.axpby(x, y, alpha=alpha, beta=beta)
    torch.testing.assert_close(result, axpby_reference(x, y, alpha, beta))
    recorded = {record.kernel for record in kabi.cache.show("axpby") if record.problem == problem}
    assert recorded == {"toy.axpby.torch", "toy.axpby.in_place"}
    assert kabi.explain(kabi.ops.axpby, x, y, alpha=alpha, beta=beta).pick_reason == "tuned"


def test_tune_measures_every_kernel_with_the_attributes(generator):
    x, y = _random(generator, 4, 48), _random(generator, 4, 48)
    from kabi._selection.tuning_policy import TuningSettings

    report = kabi.tune(kabi.ops.axpby, x, y, alpha=-1.5, settings=TuningSettings(warmup=1, repeat=3, min_time_s=0.0))
    assert {item.kernel for item in report.measurements} == {"toy.axpby.torch", "toy.axpby.in_place"}
    assert all(item.passed for item in report.measurements), report


def test_the_gate_rejects_a_kernel_that_ignores_an_attribute(generator):
    def ignores_beta(x, y, out=None, *, alpha, beta):
        return axpby_torch(x, y, out, alpha=alpha, beta=1.0)

    kabi.register_kernel("axpby", ignores_beta, name="toy.axpby.ignores_beta", priority=100)
    try:
        x, y = _random(generator, 3, 20), _random(generator, 3, 20)
        with kabi.tuning("off"):
            result = kabi.ops.axpby(x, y, beta=-2.0)
        torch.testing.assert_close(result, x - 2.0 * y)
        explanation = kabi.explain(kabi.ops.axpby, x, y, beta=-2.0)
        assert explanation.pick != "toy.axpby.ignores_beta"
        assert "wrong result" in explanation.gate_failures["toy.axpby.ignores_beta"]
    finally:
        kabi.unregister_kernel("axpby", "toy.axpby.ignores_beta")


def test_two_outputs_pass_the_gate_per_output(generator):
    def wrong_sign(x, out=None):
        return x.abs(), torch.zeros_like(x, dtype=torch.int8)

    kabi.register_kernel("toy_sign_split", wrong_sign, name="toy.sign_split.wrong", priority=100)
    try:
        x = _random(generator, 2, 12, dtype=torch.float64)
        with kabi.tuning("off"):
            magnitude, sign = kabi.ops.toy_sign_split(x)
        assert torch.equal(sign, torch.sign(x).to(torch.int8))
        failures = kabi.explain(kabi.ops.toy_sign_split, x).gate_failures
        assert failures["toy.sign_split.wrong"].startswith("output 1: wrong result")
    finally:
        kabi.unregister_kernel("toy_sign_split", "toy.sign_split.wrong")


# -- torch -------------------------------------------------------------------------------------------------------


def test_the_torch_op_takes_attributes_by_keyword(generator):
    x, y = _random(generator, 2, 6), _random(generator, 6)
    torch.testing.assert_close(torch.ops.kabi.axpby(x, y, alpha=0.5, beta=4.0), 0.5 * x + 4.0 * y)
    torch.testing.assert_close(torch.ops.kabi.axpby(x, y), x + y)
    shift = _random(generator, 6)
    torch.testing.assert_close(torch.ops.kabi.toy_affine(x, shift, mode="negate", repeat=2), (shift - x) * 2)
    torch.testing.assert_close(torch.ops.kabi.toy_affine(x, mode="keep"), x)
    magnitude, sign = torch.ops.kabi.toy_sign_split(x)
    assert sign.dtype == torch.int8 and torch.equal(magnitude, x.abs())


def test_the_fake_implementation_follows_the_schema():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, y = torch.empty(3, 4, 8, dtype=torch.float64), torch.empty(8, dtype=torch.float64)
        assert torch.ops.kabi.axpby(x, y, alpha=2.0).shape == (3, 4, 8)
        magnitude, sign = torch.ops.kabi.toy_sign_split(x)
        assert (magnitude.dtype, sign.dtype, sign.shape) == (torch.float64, torch.int8, (3, 4, 8))
        assert torch.ops.kabi.toy_affine(x, None, mode="keep").shape == (3, 4, 8)
        with pytest.raises(kabi.UnsupportedDtypeError, match=r"toy_sign_split: x's dtype float16 is not one of float32, float64 \(the dtypes of its type T\)"):
            torch.ops.kabi.toy_sign_split(x.half())
        with pytest.raises(kabi.UnsupportedDtypeError, match="axpby: x has dtype float64 but y has float32; both have type T"):
            torch.ops.kabi.axpby(x, y.float())
        with pytest.raises(kabi.InvalidArgumentError, match="toy_affine: mode must be one of keep, negate; got 'up'"):
            torch.ops.kabi.toy_affine(x, None, mode="up")
        with pytest.raises(kabi.InvalidArgumentError, match="axpby: y has shape"):
            torch.ops.kabi.axpby(x, torch.empty(5, dtype=torch.float64))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_torch_compile_fullgraph(backend, generator):
    torch._dynamo.reset()

    def model(x, y, shift):
        scaled = kabi.ops.axpby(x, y, alpha=2.0, beta=-0.5)
        magnitude, sign = kabi.ops.toy_sign_split(scaled)
        return kabi.ops.toy_affine(magnitude, shift, mode="negate", repeat=3) * sign

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x, y, shift = _random(generator, 5, 12), _random(generator, 12), _random(generator, 12)
    expected = model(x, y, shift)
    torch.testing.assert_close(compiled(x, y, shift), expected)
    x2 = _random(generator, 5, 12)
    torch.testing.assert_close(compiled(x2, y, shift), model(x2, y, shift))


# -- from C ------------------------------------------------------------------------------------------------------


def test_a_c_program_registers_the_same_op_text_and_calls_it_with_attributes(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    library_dir = config.library_dir()
    program = tmp_path / "toy_op_axpby"
    source = _cmake.REPOSITORY / "tests" / "cpp" / "toy_op_axpby.c"
    command = [
        compiler, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic",
        f"-I{_cmake.REPOSITORY / 'csrc' / 'include'}", f"-I{_cmake.dlpack_include_dir()}",
        f"-I{source.parent}", str(source), f"-L{library_dir}", "-lkabi", f"-Wl,-rpath,{library_dir}", "-lm",
        "-o", str(program),
    ]
    build = subprocess.run(command, capture_output=True, text=True)
    assert build.returncode == 0, f"{' '.join(command)}\n{build.stderr}"
    declaration = read_op_declaration(AXPBY)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("KABI_")}
    environment["KABI_CACHE_DIR"] = str(tmp_path / "cache")
    arguments = [declaration.schema, declaration.type_variables_text, declaration.tuning_key]
    result = subprocess.run([str(program), *arguments], capture_output=True, text=True,
                            env=environment, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
