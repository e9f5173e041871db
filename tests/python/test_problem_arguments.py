"""Problem shapes (kabi._base.declarations.parse_problem_shape, the one reader of suites and --shape) and the
generic problem arguments of the command line: named dims, positional sizes in the op's shape_order, --batch, --attr
parsed against the op's declared types, --dtype per type variable, --absent; with errors that exit 2 and name the
option. A toy op with attributes checks what is reachable before the generic op front (kabi.register_op) lands."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.declarations import ProblemShape, load_op_file, op_spec, parse_problem_shape
from kabi.cli import build_parser, main
from kabi.cli._arguments import problems

pytestmark = pytest.mark.usefixtures("untuned")

TOY = "test_cli_toy"
MATMUL_ORDER = ("M", "N", "K")
REGISTRY = Path(__file__).resolve().parents[2] / "registry"


@pytest.fixture(scope="module")
def toy() -> str:
    """An op with a batched input, an optional one and attributes of three types, with a float32 kernel that
    follows the kernel call convention (inputs, out=None, attributes by name)."""
    if TOY not in _core.op_list():
        _core.register_op(TOY, "x: [..., N] T, bias?: [N] T, mode: enum(add, mul) = add, factor: float = 2.0, "
                          "steps: int = 1, exact: bool = false -> out: [..., N] T", "T: float32, float64")
    return TOY


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


@pytest.mark.parametrize(
    "value, expected",
    [
        ("512x256x128", ProblemShape((("M", 512), ("N", 256), ("K", 128)))),
        ("2x16x24x40", ProblemShape((("M", 16), ("N", 24), ("K", 40)), (2,))),
        ("K=40,M=16,N=24", ProblemShape((("K", 40), ("M", 16), ("N", 24)))),
        ("batch=2x3, M=1,N=2,K=3", ProblemShape((("M", 1), ("N", 2), ("K", 3)), (2, 3))),
        ([8, 8, 8], ProblemShape((("M", 8), ("N", 8), ("K", 8)))),
        ({"batch": 64, "N": 4096, "K": 4096}, ProblemShape((("N", 4096), ("K", 4096)), (64,))),
        ({"batch": [2, 3], "N": 5}, ProblemShape((("N", 5),), (2, 3))),
    ],
)
def test_shapes_named_and_positional(value, expected):
    shape = parse_problem_shape(value, MATMUL_ORDER)
    assert shape == expected
    assert parse_problem_shape(str(shape), MATMUL_ORDER) == shape  # the printed form reads back


@pytest.mark.parametrize(
    "value, message",
    [
        ("512x512", r"expected 3 positive sizes \[M, N, K\], or 4 with a leading batch size \[B, M, N, K\], got \[512, 512\]"),
        ("8x0x8", r"got \[8, 0, 8\]"),
        ("axbxc", r"got \['a', 'b', 'c'\]"),
        ("M=8,N", r"expected NAME=SIZE items separated by commas, got 'N'"),
        ("M=8,M=9", "M is given twice"),
        ("M=eight", "M: expected a positive size, got 'eight'"),
        ("batch=0,M=1", r"batch: expected a positive size or a list of them, got \[0\]"),
        ({"batch": 1.5, "M": 2}, "batch: expected a positive size or a list of them, got 1.5"),
        ({"M": True}, "M: expected a positive size, got True"),
        ("1-2=3", "'1-2' is not a dimension name"),
        ({}, "expected a table of named dimensions"),
    ],
)
def test_bad_shapes_say_what_was_expected(value, message):
    with pytest.raises(ValueError, match=message):
        parse_problem_shape(value, MATMUL_ORDER)


def test_positional_sizes_need_the_ops_shape_order():
    with pytest.raises(ValueError, match="sizes without names need the op's shape_order"):
        parse_problem_shape([8, 8])


def test_matmul_suites_read_in_its_shape_order():
    spec = op_spec("matmul")
    assert spec.shape_order == MATMUL_ORDER
    assert spec.suites["quick"].shapes[2] == ProblemShape((("M", 16), ("N", 24), ("K", 40)), (2,))
    assert spec.suites["quick"].shapes[2].positional(MATMUL_ORDER) == (2, 16, 24, 40)


def test_named_dim_suites_as_the_linear_declaration_writes_them():
    spec = load_op_file(REGISTRY / "ops" / "linear.toml")
    assert spec.shape_order == ("N", "K")
    assert spec.suites["smoke"].shapes[0] == ProblemShape((("N", 8), ("K", 8)), (1,))
    assert all(shape.batch for suite in spec.suites.values() for shape in suite.shapes)


def test_a_bad_named_shape_in_a_suite_names_file_and_field(tmp_path):
    path = tmp_path / "registry" / "ops" / "matmul.toml"
    path.parent.mkdir(parents=True)
    text = (REGISTRY / "ops" / "matmul.toml").read_text()
    path.write_text(text.replace("[[8, 8, 8], [64, 64, 64]", "[{ M = 8, N = 0, K = 8 }, [64, 64, 64]"))
    with pytest.raises(kabi.KabiError, match=r"registry/ops/matmul.toml: suites.smoke.shapes\[0\]: N: expected a positive size"):
        load_op_file(path)
    path.write_text(text.replace('shape_order = ["M", "N", "K"]', 'shape_order = ["M", "M"]'))
    with pytest.raises(kabi.KabiError, match="shape_order: expected distinct dimension names"):
        load_op_file(path)


def test_matmul_named_dims_through_explain_tune_and_verify(cache_dir, capsys):
    status, output = run_cli(capsys, "explain", "matmul", "--shape", "K=16,M=64,N=32", "--device", "cpu")
    assert status == 0 and "pick: cpu.openblas.gemm" in output
    status, output = run_cli(capsys, "verify", "matmul", "--shape", "M=9,N=4,K=6", "--batch", "3", "--dtype", "T=float64")
    assert status == 0 and "batch=3,M=9,N=4,K=6 float64 on cpu" in output and "passed" in output
    status, output = run_cli(capsys, "tune", "matmul", "--shape", "M=12,N=10,K=8", "--transpose", "b",
                             "--repeat", "3", "--warmup", "1", "--min-time-s", "0")
    assert status == 0 and "M=12,N=10,K=8 float32 b transposed" in output and "col_strided" in output and "pick:" in output
    # M is bucketed to the next power of two in the tuning key.
    assert any(record.problem.endswith("|16|10|8") for record in kabi.cache.show("matmul"))


def test_the_problem_of_a_toy_op_with_attributes(toy):
    arguments = build_parser().parse_args(["run", toy, "--shape", "N=6", "--batch", "2,3", "--attr", "mode=mul",
                                           "--attr", "factor=0.25", "--attr", "steps=3", "--attr", "exact=yes",
                                           "--dtype", "float64", "--device", "cpu"])
    [problem] = problems(arguments)
    assert dict(problem.attributes) == {"mode": "mul", "factor": 0.25, "steps": 3, "exact": True}
    assert problem.present == {"bias"} and dict(problem.dtypes) == {"T": "float64"}
    x, bias = problem.inputs(seed=1)
    assert x.shape == (2, 3, 6) and bias.shape == (6,) and x.dtype == bias.dtype == torch.float64
    assert torch.equal(problem.inputs(seed=1)[0], x) and not torch.equal(problem.inputs(seed=2)[0], x)
    assert problem.label == "batch=2x3,N=6 float64 mode=mul factor=0.25 steps=3 exact=True"
    [absent] = problems(build_parser().parse_args(["run", toy, "--shape", "N=6", "--absent", "bias", "--device", "cpu"]))
    assert absent.inputs(seed=1)[1] is None and absent.label == "N=6 float32 no bias"
    assert dict(absent.attributes) == {"mode": "add", "factor": 2.0, "steps": 1, "exact": False}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--attr", "mode=pow"], "--attr mode: expected one of add, mul, got 'pow'"),
        (["--attr", "factor=big"], "--attr factor: expected a float, got 'big'"),
        (["--attr", "steps=1.5"], "--attr steps: expected an int, got '1.5'"),
        (["--attr", "exact=maybe"], "--attr exact: expected a bool (true or false), got 'maybe'"),
        (["--attr", "scale=2"], f"--attr scale: {TOY} has no attribute scale; expected among mode, factor, steps, exact"),
        (["--attr", "mode"], "--attr: expected NAME=VALUE, got 'mode'"),
        (["--attr", "mode=add", "--attr", "mode=mul"], "--attr mode: given twice"),
        (["--absent", "x"], f"--absent x: {TOY} has no optional input x; expected among bias"),
        (["--transpose", "y"], f"--transpose y: {TOY} has no input y"),
        (["--dtype", "float16"], f"--dtype: {TOY} is not defined for float16 as T; expected among float32, float64"),
        (["--dtype", "U=float32"], f"--dtype: {TOY} has no type variable U; expected among T"),
        (["--dtype", "float128"], "--dtype: unknown dtype 'float128'"),
        (["--batch", "2,x"], "--batch: expected positive sizes separated by commas"),
        (["--shape", "M=3"], f"--shape M=3: {TOY} has no dim M; expected N=..."),
        (["--shape", "4"], "sizes without names need the op's shape_order"),
        ([], f"kabi run: {TOY} has no kabi.ops function"),
    ],
)
def test_bad_problem_arguments_exit_2_naming_the_option(toy, capsys, extra, message):
    shape = [] if "--shape" in extra else ["--shape", "N=4"]
    status, output = run_cli(capsys, "run", toy, *shape, "--device", "cpu", "--repeat", "1", *extra)
    assert status == 2
    assert message in output


def test_a_shape_without_a_needed_dim_or_with_a_batch_nothing_takes(capsys):
    status, output = run_cli(capsys, "explain", "matmul", "--shape", "M=4,N=4", "--device", "cpu")
    assert status == 2 and "--shape M=4,N=4: lacks K; expected M=..., K=..., N=..." in output
    status, output = run_cli(capsys, "explain", "matmul", "--shape", "2x4x4x4", "--batch", "3", "--device", "cpu")
    assert status == 2 and "has a batch (2) and --batch gives another" in output


def test_info_and_list_show_the_ops_schema_type_variables_and_attributes(toy, capsys):
    status, output = run_cli(capsys, "info", toy)
    assert status == 0
    for text in ("x: [..., N] T; bias?: [N] T", "T: float32, float64", "mode: enum(add, mul) = add",
                 "factor: float = 2.0", "exact: bool = False"):
        assert text in output, text
    status, output = run_cli(capsys, "list", "matmul")
    assert status == 0
    for text in ("a: [..., M, K] T; b: [..., K, N] T", "shape order", "M, N, K", "attributes", "cpu.openblas.gemm"):
        assert text in output, text
