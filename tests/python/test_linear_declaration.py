"""registry/ops/linear.toml and the linear kernel declarations beside it: read by the registry loader, complete, and
consistent with the Python side and the core's parse of the schema."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from kabi import _core
from kabi._base.declarations import kernel_specs, load_op_file, op_specs
from kabi.ops._references import ACTIVATIONS

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
OP_FILE = REGISTRY / "ops" / "linear.toml"
KERNEL_FILES = tuple(REGISTRY / "kernels" / backend / "linear.toml" for backend in ("torch", "cpu"))


@pytest.fixture(scope="module")
def declaration() -> dict:
    return tomllib.loads(OP_FILE.read_text())


def test_the_loader_reads_it_and_the_core_knows_the_op():
    spec = load_op_file(OP_FILE)
    installed = op_specs()["linear"]
    assert (installed.schema, installed.tolerance, installed.suites) == (spec.schema, spec.tolerance, spec.suites)
    assert all(shape.batch and set(shape.sizes) == {"N", "K"} for shape in spec.suites["smoke"].shapes)
    assert spec.type_variables == {"T": ("float16", "bfloat16", "float32", "float64")}
    assert {kernel.name for kernel in kernel_specs() if kernel.op == "linear" and kernel.plugin != "kabi-cuda"} == {
        "torch.linear.cpu", "torch.linear.cuda", "cpu.openblas.linear"}
    schema = _core.op_schema("linear")
    assert [entry["name"] for entry in schema["attributes"]] == ["activation"]
    assert tuple(schema["attributes"][0]["enum_values"]) == tuple(ACTIVATIONS)


def test_schema_types_and_reference(declaration):
    assert declaration["name"] == "linear"
    assert declaration["schema"] == ("x: [..., K] T, w: [N, K] T, bias?: [N] T, "
                                     "activation: enum(none, relu, gelu, gelu_tanh, silu) = none -> out: [..., N] T")
    enum = re.search(r"enum\(([^)]*)\)", declaration["schema"]).group(1)
    assert [value.strip() for value in enum.split(",")] == list(ACTIVATIONS)
    assert declaration["types"] == {"T": ["float16", "bfloat16", "float32", "float64"]}
    module, attribute = declaration["reference"].split(":")
    assert getattr(importlib.import_module(module), attribute).__name__ == "linear"


def test_every_dtype_has_a_tolerance_that_tightens_with_precision(declaration):
    tolerance = declaration["tolerance"]
    assert set(tolerance) == set(declaration["types"]["T"])
    order = ["bfloat16", "float16", "float32", "float64"]
    for looser, tighter in zip(order, order[1:]):
        for measure in ("norm", "extreme"):
            assert tolerance[looser][measure] > tolerance[tighter][measure] > 0


def test_tuning_key_names_only_what_the_schema_has(declaration):
    items = [item.split(":")[0] for item in declaration["tuning"]["key"].split(",")]
    assert items == ["dtype", "layout", "batch", "N", "K", "activation"]


def test_suites_are_named_dims_of_llama3_layers(declaration):
    suites = declaration["suites"]
    assert {"llama3-8b-decode", "llama3-8b-prefill", "llama3-70b-decode", "llama3-70b-prefill"} <= set(suites)
    for name, suite in suites.items():
        assert suite["description"] and set(suite["dtypes"]) <= set(declaration["types"]["T"]), name
        for shape in suite["shapes"]:
            assert set(shape) == {"batch", "N", "K"}, (name, shape)
            sizes = [*shape["batch"]] if isinstance(shape["batch"], list) else [shape["batch"]]
            assert all(isinstance(size, int) and size > 0 for size in [*sizes, shape["N"], shape["K"]]), (name, shape)
    decode_rows = {shape["batch"] for shape in suites["llama3-8b-decode"]["shapes"]}
    assert max(decode_rows) <= 64 and 1 in decode_rows
    assert min(shape["batch"] for shape in suites["llama3-70b-prefill"]["shapes"]) >= 512
    # The 8B layers as N x K: qkv, o, gate_up, down.
    layers = {(shape["N"], shape["K"]) for shape in suites["llama3-8b-prefill"]["shapes"]}
    assert layers == {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)}


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda path: path.parent.name)
def test_kernel_declarations_name_the_op_and_existing_code(path, declaration):
    for kernel in tomllib.loads(path.read_text())["kernels"]:
        assert kernel["op"] == "linear"
        assert set(kernel["dtypes"]) <= set(declaration["types"]["T"])
        if "implementation" in kernel:
            module, attribute = kernel["implementation"].split(":")
            assert callable(getattr(importlib.import_module(module), attribute))
        else:
            assert kernel["plugin"] == "kabi-cpu" and kernel["name"] == "cpu.openblas.linear"
