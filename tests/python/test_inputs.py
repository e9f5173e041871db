"""The input generator (kabi.ops._inputs): shapes from named dims and a batch shape, a dtype per type variable,
concrete dtypes, absent optional inputs, kinds declared in an op's TOML, whole-op generators, inputs like a call's,
determinism by seed, and errors that name the argument."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kabi import _core
from kabi._base.declarations import INPUT_KINDS, load_op_file
from kabi._base.registry_fields import RegistryError
from kabi._base.errors import InvalidArgumentError
from kabi.ops import _inputs
from kabi.ops._inputs import DEFAULT_SEED, input_like, inputs_like, problem_inputs

TOY = "test_inputs_toy"
TOY_SCHEMA = ("x: [..., K] T, w: [N, K] T, bias?: [N] T, scale: [N] float32, offsets: [G] int32, "
              "activation: enum(none, relu) = none, alpha: float = 0.5 -> out: [..., N] T")
MIXED = "test_inputs_mixed"


@pytest.fixture(scope="module")
def toy() -> str:
    """An op with a batched input, an optional one, a concrete float32 scale, int32 offsets and attributes; ops
    live as long as the process, so it is registered once."""
    if TOY not in _core.op_list():
        _core.register_op(TOY, TOY_SCHEMA, "T: float16, bfloat16, float32, float64")
    return TOY


@pytest.fixture(scope="module")
def mixed() -> str:
    if MIXED not in _core.op_list():
        _core.register_op(MIXED, "a: [N] T, b: [N] U -> out: [N] T", "T: float32, float64; U: int8, int32, float32")
    return MIXED


def toy_file(tmp_path, inputs_table: str) -> object:
    """The toy op's declaration with an ``[inputs]`` part, read by the registry loader."""
    path = tmp_path / "registry" / "ops" / f"{TOY}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(f'''\
        name = "{TOY}"
        summary = "a toy"
        schema = "{TOY_SCHEMA}"
        reference = "torch.matmul"
        [types]
        T = ["float32", "float64"]
        [tolerance.float32]
        norm = 1e-5
        extreme = 1e-4
        [tolerance.float64]
        norm = 1e-12
        extreme = 1e-10
        [tuning]
        key = "dtype"
        ''') + textwrap.dedent(inputs_table))
    return load_op_file(path)


def test_shapes_dtypes_and_absent_inputs_follow_the_problem(toy):
    x, w, bias, scale, offsets = problem_inputs(toy, {"K": 5, "N": 3, "G": 4}, (2, 3), {"T": "bfloat16"})
    assert (x.shape, w.shape, bias, scale.shape, offsets.shape) == ((2, 3, 5), (3, 5), None, (3,), (4,))
    # The type variable's dtype for x and w; the schema's own dtypes for scale and offsets.
    assert (x.dtype, w.dtype, scale.dtype, offsets.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32, torch.int32)
    assert all(tensor.is_contiguous() and tensor.device.type == "cpu" for tensor in (x, w, scale, offsets))
    with_bias = problem_inputs(toy, {"K": 5, "N": 3, "G": 4}, (), "float64", present={"bias"})
    assert with_bias[2].shape == (3,) and with_bias[2].dtype == torch.float64 and with_bias[0].shape == (5,)


def test_each_type_variable_gets_its_dtype(mixed):
    a, b = problem_inputs(mixed, {"N": 64}, dtypes={"T": "float64", "U": "int8"}, generator=3)
    assert (a.dtype, b.dtype) == (torch.float64, torch.int8)
    assert bool((b.abs() <= 8).all()) and len(b.unique()) > 3  # small integers, not a constant
    same = problem_inputs(mixed, {"N": 4}, dtypes="float32")  # one name: every variable
    assert same[0].dtype == same[1].dtype == torch.float32


def test_default_numerics_are_the_tuners_standard_normal_draws():
    # The gate's tolerances were set for these values: float32 standard normal draws, a's then b's, rounded.
    a, b = problem_inputs("matmul", {"M": 6, "N": 4, "K": 5}, (2,), "float16", generator=11)
    generator = torch.Generator().manual_seed(11)
    expected_a = torch.randn(2 * 6 * 5, generator=generator).to(torch.float16).reshape(2, 6, 5)
    expected_b = torch.randn(2 * 5 * 4, generator=generator).to(torch.float16).reshape(2, 5, 4)
    assert torch.equal(a, expected_a) and torch.equal(b, expected_b)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool", "float32", "complex64"])
def test_a_tensor_is_never_all_zeros(dtype):
    tensor = torch.empty(1, dtype=getattr(torch, dtype))
    for seed in range(40):
        assert bool((input_like(tensor, seed) != 0).any()), seed
    if dtype == "uint8":
        assert int(input_like(torch.empty(1000, dtype=torch.uint8), 1).max()) <= 8  # small, not wrapped negatives


def test_large_inputs_are_drawn_a_chunk_at_a_time(monkeypatch):
    # A float32 draw of a whole MoE weight (7.5e9 elements) needs 28 GiB of scratch beside the bf16 result; the
    # draws stay within a chunk, and every element is still written.
    monkeypatch.setattr(_inputs, "_DRAW_CHUNK_ELEMENTS", 7)
    sizes = []
    draw = _inputs._draw
    monkeypatch.setattr(_inputs, "_draw", lambda kind, count, *rest: sizes.append(count) or draw(kind, count, *rest))
    like = torch.full((10, 10), float("nan"), dtype=torch.bfloat16)[:, :9]
    values = input_like(like, 3)
    assert max(sizes) == 7 and sum(sizes) == 9 * 10 + 9  # the view spans nine rows of 10 and a last one of 9
    assert values.stride() == like.stride() and bool(torch.isfinite(values).all())
    assert values.float().unique().numel() > 60 and torch.equal(values, input_like(like, 3))
    sizes.clear()
    integers = input_like(torch.empty(20, dtype=torch.int32), 4)
    assert max(sizes) == 7 and sum(sizes) == 20 and bool((integers != 0).any())


def test_same_seed_same_values_another_seed_other_values(toy):
    def make(seed):
        return problem_inputs(toy, {"K": 7, "N": 5, "G": 3}, (4,), "float32", present={"bias"}, generator=seed)

    first, again, other = make(5), make(5), make(6)
    assert all(torch.equal(p, q) for p, q in zip(first, again))
    assert not torch.equal(first[0], other[0]) and not torch.equal(first[2], other[2])
    default = problem_inputs(toy, {"K": 7, "N": 5, "G": 3}, (4,), "float32", present={"bias"})
    assert torch.equal(default[0], make(DEFAULT_SEED)[0])
    shared = torch.Generator().manual_seed(5)
    assert torch.equal(problem_inputs(toy, {"K": 7, "N": 5, "G": 3}, (4,), "float32", generator=shared)[0], first[0])


def test_kinds_declared_in_the_op_file(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs.scale]
        kind = "positive"
        [inputs.x]
        kind = "uniform"
        [inputs.offsets]
        kind = "offsets"
        total = "K"
        ''')
    x, w, _, scale, offsets = problem_inputs(spec, {"K": 50, "N": 300, "G": 6}, (40,), "float32", generator=2)
    assert bool((x >= -1).all()) and bool((x < 1).all()) and float(x.std()) < 0.7  # uniform, not normal
    assert bool((scale >= 0.5).all()) and bool((scale < 2).all()) and scale.dtype == torch.float32
    assert float(w.abs().max()) > 2  # undeclared: standard normal
    assert offsets.dtype == torch.int32 and int(offsets[-1]) == 50
    assert bool((offsets[1:] >= offsets[:-1]).all()) and int(offsets.min()) >= 0


def test_a_whole_op_generator_is_called_with_the_problem(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs]
        generator = "_input_generators:counting"
        ''')
    x, w, bias, _, offsets = problem_inputs(spec, {"K": 3, "N": 2, "G": 2}, (2,), "float64", {"alpha": 10.0},
                                            present={"bias"})
    assert x.tolist() == [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]] and x.dtype == torch.float64
    assert bool((w == 1).all()) and bool((bias == -1).all()) and offsets.tolist() == [0, 1]


def test_a_whole_op_generator_that_returns_the_wrong_shape_is_named(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs]
        generator = "_input_generators:wrong_shape"
        ''')
    with pytest.raises(InvalidArgumentError, match=r"the input generator _input_generators:wrong_shape returned "
                                                   r"\[3, 2\] float32 on cpu for w; expected \[2, 3\] float32 on cpu"):
        problem_inputs(spec, {"K": 3, "N": 2, "G": 2}, (), "float32")


def test_inputs_like_a_call_keep_its_layout_and_the_declared_kinds(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs.offsets]
        kind = "offsets"
        total = "N"
        ''')
    x = torch.empty(6, 4, 9)[:, :, :7]  # padded rows
    w = torch.empty(7, 5).t()  # [N=5, K=7], column-major
    scale, offsets = torch.empty(5), torch.empty(1, 6, dtype=torch.int32).expand(3, 6)[0]
    fresh = inputs_like(spec, [x, w, None, scale, offsets], generator=9)
    for made, original in zip(fresh, (x, w, None, scale, offsets)):
        if original is None:
            assert made is None
            continue
        assert (made.shape, made.stride(), made.dtype) == (original.shape, original.stride(), original.dtype)
        assert made.data_ptr() % 256 == original.data_ptr() % 256
    assert int(fresh[4][-1]) == 5 and bool((fresh[4][1:] >= fresh[4][:-1]).all())
    again = inputs_like(spec, [x, w, None, scale, offsets], generator=9)
    assert all(p is None or torch.equal(p, q) for p, q in zip(fresh, again))


def test_inputs_like_a_broadcast_offsets_tensor_is_constant_along_the_broadcast(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs.offsets]
        kind = "offsets"
        total = "K"
        ''')
    broadcast = torch.empty(1, dtype=torch.int32).expand(4)  # stride 0: one value seen four times
    fresh = inputs_like(spec, [torch.empty(3, 8), torch.empty(2, 8), None, torch.empty(2), broadcast])
    assert fresh[4].stride() == (0,) and len(set(fresh[4].tolist())) == 1


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: problem_inputs(TOY, {"N": 3, "G": 2}, (), "float32"), "dims lacks K; expected sizes of G, K, N"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2, "Q": 1}, (), "float32"), "dims names Q, which no input has"),
        (lambda: problem_inputs(TOY, {"K": -3, "N": 3, "G": 2}, (), "float32"), "dims: K must be a size"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2}, (), {"V": "float32"}), "dtypes names V, which is not a type variable"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2}, (), "int8"), "dtypes: T may be float16, bfloat16, float32, float64, got 'int8'"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2}, (), {}), "dtypes gives no dtype for the type variable T"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2}, (), "float32", present={"w"}), "present names w, which is not an optional input; expected among bias"),
        (lambda: problem_inputs(TOY, {"K": 3, "N": 3, "G": 2}, (), "float32", {"beta": 1}), "attributes names beta, which the op does not have"),
        (lambda: problem_inputs("matmul", {"M": 2, "N": 2, "K": 2}, (3,), "float32", device="cpu", generator="7"), "generator: expected a torch.Generator or an int seed"),
        (lambda: inputs_like(TOY, [torch.empty(2, 3)]), "takes 5 inputs"),
        (lambda: inputs_like(TOY, [torch.empty(2, 3), None, None, torch.empty(2), torch.empty(2)]), "input w is required, got None"),
        (lambda: input_like(torch.empty(3), kind="offsets"), "kind must be one of normal, uniform, positive, integers"),
    ],
)
def test_errors_name_the_argument_and_what_was_expected(toy, call, message):
    with pytest.raises((InvalidArgumentError, TypeError), match=message):
        call()


def test_a_batch_for_an_op_without_batch_dimensions_is_refused(mixed):
    with pytest.raises(InvalidArgumentError, match=r"batch_shape \[2\] given, but no input .* has leading batch"):
        problem_inputs(mixed, {"N": 4}, (2,), "float32")


def test_a_kind_that_does_not_fit_the_dtype_names_the_input(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs.offsets]
        kind = "positive"
        ''')
    with pytest.raises(InvalidArgumentError, match=r"input offsets: kind 'positive' fills floating-point tensors"):
        problem_inputs(spec, {"K": 3, "N": 3, "G": 2}, (), "float32")


def test_an_inputs_table_for_a_tensor_the_schema_lacks_is_named(toy, tmp_path):
    spec = toy_file(tmp_path, '''
        [inputs.scales]
        kind = "positive"
        ''')
    with pytest.raises(InvalidArgumentError, match=r"\[inputs.scales\] names no input of the schema"):
        problem_inputs(spec, {"K": 3, "N": 3, "G": 2}, (), "float32")


@pytest.mark.parametrize(
    "table, message",
    [
        ('[inputs.x]\nkind = "gaussian"\n', r"inputs.x.kind: 'gaussian' is not one of normal, uniform"),
        ('[inputs.offsets]\nkind = "offsets"\n', r"inputs.offsets.total: an \"offsets\" tensor names the dimension"),
        ('[inputs.x]\nkind = "normal"\ntotal = "K"\n', r"inputs.x.total: .* other kinds take no total"),
        ('[inputs.x]\nkind = "normal"\nmean = 1\n', r"inputs.x.mean: unknown field"),
        ('[inputs]\ngenerator = "no_colon"\n', r"inputs.generator: expected 'module:function'"),
        ('[inputs]\nx = "normal"\n', r"inputs.x: expected a table such as"),
    ],
)
def test_a_bad_inputs_table_names_file_and_field(toy, tmp_path, table, message):
    with pytest.raises(RegistryError, match=rf"registry/ops/{TOY}.toml: {message}"):
        toy_file(tmp_path, table)


def test_the_kind_vocabulary_is_the_generators():
    assert set(INPUT_KINDS) == set(_inputs._ELEMENTWISE_KINDS) | {"offsets"}
