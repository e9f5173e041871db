"""The linear op end to end: ``kabi.ops.linear(x, w, bias=None, *, activation="none", out=None)`` against
``F.linear`` followed by the activation, with every kernel forced in turn (``kabi.use``): the torch-native kernel, the
CPU plugin's native cpu.openblas.linear, and the fused Triton kernel in Triton's CPU interpreter (in a child process,
which sets TRITON_INTERPRET before Triton is imported); then autograd (gradcheck in float64), ``out=`` and
``torch.compile(fullgraph=True)``. test_linear_binding.py drives the native kernel below the op front.

Inputs are fresh standard-normal values; outputs are judged by the op's own gate check with the tolerances of
registry/ops/linear.toml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kabi
from kabi._selection.correctness import check_output
from kabi.ops._references import ACTIVATIONS

from _linear_checks import N, TOLERANCE, assert_matches, expected, make_inputs

# x shapes: one row, rows in one leading dimension, and two leading dimensions (flattened by the kernels). K and N
# are multiples of no tile.
X_SHAPES = ((37,), (5, 37), (2, 3, 37))
# (kernel forced, dtypes it serves on the CPU)
CPU_KERNELS = (
    ("torch.linear.cpu", (torch.float16, torch.bfloat16, torch.float32, torch.float64)),
    ("cpu.openblas.linear", (torch.float32, torch.float64)),
)
CPU_CASES = [
    pytest.param(kernel, dtype, id=f"{kernel}-{str(dtype).removeprefix('torch.')}")
    for kernel, dtypes in CPU_KERNELS for dtype in dtypes
]


@pytest.mark.parametrize(("kernel", "dtype"), CPU_CASES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_cpu_kernel_matches_f_linear(kernel: str, dtype: torch.dtype, activation: str) -> None:
    for x_shape in X_SHAPES:
        for with_bias in (True, False):
            for transposed_weight in (False, True):
                x, w, bias = make_inputs(x_shape, dtype, with_bias=with_bias, transposed_weight=transposed_weight)
                with kabi.use(linear=kernel):
                    out = kabi.ops.linear(x, w, bias, activation=activation)
                assert_matches(out, x, w, bias, activation)


def test_bias_by_keyword_and_the_default_activation() -> None:
    x, w, bias = make_inputs((4, 37), torch.float32, with_bias=True, transposed_weight=False)
    assert_matches(kabi.ops.linear(x, w, bias=bias), x, w, bias, "none")
    assert_matches(kabi.ops.linear(x, w), x, w, None, "none")


def test_out_is_written_and_returned() -> None:
    x, w, bias = make_inputs((2, 3, 37), torch.float32, with_bias=True, transposed_weight=True)
    out = torch.full((2, 3, N), float("nan"))
    returned = kabi.ops.linear(x, w, bias, activation="gelu", out=out)
    assert returned is out
    assert_matches(out, x, w, bias, "gelu")


def test_an_unknown_activation_is_refused_by_name() -> None:
    x, w, _ = make_inputs((4, 37), torch.float32, with_bias=False, transposed_weight=False)
    with pytest.raises(ValueError, match="activation"):
        kabi.ops.linear(x, w, activation="tanh")


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradcheck_in_float64(activation: str) -> None:
    x = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, bias: kabi.ops.linear(x, w, bias, activation=activation),
                                    (x, w, bias))
    assert torch.autograd.gradcheck(lambda x, w: kabi.ops.linear(x, w, activation=activation), (x, w))


def test_torch_compile_fullgraph_inductor() -> None:
    def layer(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return kabi.ops.linear(x, w, bias, activation="silu") * 2

    compiled = torch.compile(layer, fullgraph=True, backend="inductor")
    x, w, bias = make_inputs((6, 37), torch.float32, with_bias=True, transposed_weight=False)
    out = compiled(x, w, bias)
    verdict = check_output(out, 2 * expected(x, w, bias, "silu"), TOLERANCE["float32"], expected_dtype=torch.float32)
    assert verdict is None, verdict


_TRITON_WORKER = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import kabi
from kabi.backends.triton import register_triton_kernels
from kabi.backends.triton._linear import LINEAR_CONFIGS

sys.path.insert(0, sys.argv[1])
from _linear_checks import assert_matches, make_inputs
from kabi.ops._references import ACTIVATIONS

names = register_triton_kernels(device="cpu")
failures = []
runs = 0
# One row, a few rows in leading dimensions, and enough rows for the widest tile: a config declines the problems its
# tile does not fit (its supports predicate), and runs every problem it accepts.
shapes = (((37,), True, False), ((2, 3, 37), False, True), ((130, 37), True, True))
for config in LINEAR_CONFIGS:
    name = f"triton.linear.{config.tag}.cpu"
    assert name in names, (name, names)
    config_runs = 0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for activation in ACTIVATIONS:
            for x_shape, with_bias, transposed in shapes:
                x, w, bias = make_inputs(x_shape, dtype, with_bias=with_bias, transposed_weight=transposed)
                if name not in {c.name for c in kabi.explain(kabi.ops.linear, x, w, bias,
                                                               activation=activation).candidates if c.eligible}:
                    continue
                try:
                    with kabi.use(linear=name):
                        out = kabi.ops.linear(x, w, bias, activation=activation)
                    assert_matches(out, x, w, bias, activation)
                    config_runs += 1
                except Exception as error:
                    failures.append(f"{name} {dtype} {activation} {x_shape}: {type(error).__name__}: {error}")
    if config_runs == 0:
        failures.append(f"{name} accepted none of the problems")
    runs += config_runs
print(json.dumps({"runs": runs, "failures": failures}))
"""


def test_every_triton_config_in_the_interpreter_matches_f_linear() -> None:
    pytest.importorskip("triton")
    environment = dict(os.environ, TRITON_INTERPRET="1")
    here = Path(__file__).parent
    completed = subprocess.run([sys.executable, "-c", _TRITON_WORKER, str(here)], capture_output=True, text=True,
                               env=environment, timeout=900, cwd=here)
    assert completed.returncode == 0, f"the Triton worker failed:\n{completed.stderr[-4000:]}"
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert not report["failures"], "\n".join(report["failures"])
    assert report["runs"] > 0
