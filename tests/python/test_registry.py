"""Every file under registry/ follows the schema (kabi/_base/declarations.py); a broken file fails naming the file and
field; the declarations agree with what is registered."""

from __future__ import annotations

from pathlib import Path

import pytest

import kabi
from kabi._base.registry_fields import RegistryError
from kabi._base.declarations import (
    DTYPE_NAMES,
    Tolerance,
    kernel_specs,
    load_kernel_file,
    load_op_file,
    op_specs,
    registry_root,
)
from kabi._base.tensors import dtype_name, torch_dtype

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
OP_FILES = sorted((REGISTRY / "ops").glob("*.toml"))
KERNEL_FILES = sorted((REGISTRY / "kernels").glob("*/*.toml"))


def test_the_registry_has_files():
    assert OP_FILES and KERNEL_FILES
    assert sorted(p.name for p in REGISTRY.iterdir() if p.is_dir()) == ["kernels", "ops"]
    assert all(p.suffix == ".toml" for p in REGISTRY.rglob("*") if p.is_file())


@pytest.mark.parametrize("path", OP_FILES, ids=lambda p: p.name)
def test_op_file_is_valid(path):
    spec = load_op_file(path)
    assert set(spec.tolerance) == set(spec.dtypes)
    assert spec.name in kabi._core.op_list()


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kernel_file_is_valid(path):
    specs = load_kernel_file(path)
    assert specs
    for spec in specs:
        assert spec.op in op_specs(), f"{path}: kernel {spec.name} names unknown op {spec.op}"
        assert set(spec.dtypes) <= set(op_specs()[spec.op].problem_dtypes)


def test_python_kernels_are_registered_as_declared():
    for spec in kernel_specs("torch"):
        info = kabi.kernel_info(spec.op, spec.name)
        assert (info.backend, info.device, info.kind, info.priority) == (spec.backend, spec.device, "external", spec.priority)
        assert set(info.dtypes) == set(spec.dtypes) and info.batch_mode == spec.batch_mode


def test_the_installed_registry_is_found():
    assert (registry_root() / "ops" / "matmul.toml").is_file()


GOOD_OP = (REGISTRY / "ops" / "matmul.toml").read_text()
GOOD_KERNEL = (REGISTRY / "kernels" / "torch" / "matmul.toml").read_text()


def write(tmp_path: Path, relative: str, text: str) -> Path:
    path = tmp_path / "registry" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace('name = "matmul"', 'name = "mm"'), "registry/ops/matmul.toml: name: 'mm' must match"),
        (lambda t: t.replace('"bfloat16"', '"float128"', 1), r"types.T\[1\]: 'float128' is not one of"),
        (lambda t: t.replace("[tolerance.float64]", "[tolerance.int32]\nnorm = 1e-6\nextreme = 1e-6\n[tolerance.float64]"),
         "tolerance.int32: int32 results are compared exactly; remove this tolerance"),
        (lambda t: t.replace('vectors = { a = "M", b = "N" }', 'vectors = { a = 1 }'), "vectors.a: expected a dimension name"),
        (lambda t: t.replace("norm = 2e-5", "norm = -2e-5"), "tolerance.float32.norm: expected a positive number"),
        (lambda t: t.replace("norm = 2e-5", 'norm = "small"'), "tolerance.float32.norm: expected int or float"),
        (lambda t: t.replace("[tolerance.float64]\nnorm = 1e-12\nextreme = 1e-10\n", ""), "tolerance.float64: missing"),
        (lambda t: t.replace('summary = "', 'sumary = "'), "summary: missing"),
        (lambda t: t + '\ncolour = "blue"\n', "colour: unknown field"),
        (lambda t: t.replace("[8, 8, 8]", "[8, 0, 8]"), r"suites.smoke.shapes\[0\]: expected 3 positive sizes \[M, N, K\]"),
        (lambda t: t.replace('schema = "', 'schema = "x').replace('{ a = "M"', '{ xa = "M"'), None),
        (lambda t: t.replace("[tuning]", "[tuning"), "not valid TOML"),
        (lambda t: t.replace("[tuning]", '[tuning]\ndistributed = "rank0"'),
         "tuning.distributed: expected one of split, every-rank, got 'rank0'"),
    ],
)
def test_broken_op_file_names_file_and_field(tmp_path, edit, message):
    path = write(tmp_path, "ops/matmul.toml", edit(GOOD_OP))
    if message is None:
        load_op_file(path)
        return
    with pytest.raises(RegistryError, match=message):
        load_op_file(path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace('device = "cpu"', 'device = "abacus"'), r"kernels\[0\].device: 'abacus' is not one of"),
        (lambda t: t.replace('batch_mode = "any"', 'batch_mode = "all"', 1), r"kernels\[0\].batch_mode"),
        (lambda t: t.replace('layouts = ["any"]', 'layouts = ["diagonal"]', 1), r"kernels\[0\].layouts\[0\]"),
        (lambda t: t.replace("priority = 0", "priority = 0.5", 1), r"kernels\[0\].priority: expected int"),
        (lambda t: t.replace('implementation = "kabi.backends.torch_native:matmul"\n', "", 1), r"kernels\[0\].implementation: a kernel names exactly one"),
        (lambda t: t.replace('implementation = "kabi.backends.torch_native:matmul"', 'implementation = "torch.matmul"', 1), r"kernels\[0\].implementation: expected 'module:attribute'"),
        (lambda t: t.replace('name = "torch.matmul.cpu"', 'name = "torch.matmul.cpu"\narchs = [90, -1]'), r"kernels\[0\].archs\[1\]"),
        (lambda t: t.replace('name = "torch.matmul.cpu"', 'name = "torch.matmul.cpu"\nspeed = 3'), r"kernels\[0\].speed: unknown field"),
    ],
)
def test_broken_kernel_file_names_file_and_field(tmp_path, edit, message):
    path = write(tmp_path, "kernels/torch/matmul.toml", edit(GOOD_KERNEL))
    with pytest.raises(RegistryError, match=f"registry/kernels/torch/matmul.toml: {message}"):
        load_kernel_file(path)


def test_schema_without_arrow_is_rejected(tmp_path):
    path = write(tmp_path, "ops/matmul.toml", GOOD_OP.replace(" -> out: [..., M, N]", ""))
    with pytest.raises(RegistryError, match="schema: expected 'inputs -> outputs'"):
        load_op_file(path)


def test_type_variables_come_from_the_types_table():
    spec = op_specs()["matmul"]
    assert list(spec.type_variables) == ["T"] and spec.dtypes == spec.type_variables["T"]
    assert spec.type_variables_text == kabi._core.op_info("matmul")["type_variables"]


def test_integer_dtypes_are_compared_exactly_and_vectors_are_declared():
    spec = op_specs()["matmul"]
    assert {"uint8", "int8", "int16", "int32", "int64", "complex64", "complex128"} <= set(spec.dtypes)
    assert spec.tolerance["int16"] == Tolerance(0.0, 0.0)
    assert spec.tolerance["complex64"].norm > 0
    assert spec.vectors == {"a": "M", "b": "N"}


def test_one_dtype_vocabulary_from_the_core():
    # The registry and the torch mapping read the core's KABI_DTYPE_* names; the generator of libkabi's built-in ops
    # passes the op files' dtype names through for the core to read.
    assert DTYPE_NAMES == tuple(kabi._core.DTYPES)
    for name in DTYPE_NAMES:
        assert dtype_name(torch_dtype(name)) == name
