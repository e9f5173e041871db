"""Problems for the linear kernel tests, shared by the torch-native tests and the Triton interpreter worker: fresh
random inputs (never zeros) over every x rank from 1 to 4, each weight layout and each kind of bias, at sizes that
are multiples of no block; the problems a device binary of the Triton kernel admits; and the op's tolerances.
Imports neither Triton nor kabi, so the worker can set TRITON_INTERPRET before either is imported."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import NamedTuple

import torch

LINEAR_DECLARATION = Path(__file__).resolve().parents[3] / "registry" / "ops" / "linear.toml"


def tolerances() -> dict:
    """The op's correctness tolerances by dtype name: {"float16": {"norm": ..., "extreme": ...}, ...}."""
    return tomllib.loads(LINEAR_DECLARATION.read_text())["tolerance"]


class LinearCase(NamedTuple):
    """One problem: x's shape, N, how w is laid out and which bias it has."""

    x_shape: tuple
    n: int
    weight: str  # "dense" [N, K]; "transposed": the .t() view of a dense [K, N]; "slice": every other column;
    # "pitched": rows 16 elements longer than K (a row-major view, as a device binary takes it)
    bias: str  # "none", "dense", or "strided" (every other element)

    @property
    def name(self) -> str:
        shape = "x".join(map(str, self.x_shape))
        return f"x{shape}-n{self.n}-w_{self.weight}-bias_{self.bias}"


# N and K off every power of two; rows from 1 to 3 * 2 * 7.
LINEAR_CASES = (
    LinearCase((37,), 29, "dense", "dense"),
    LinearCase((5, 37), 29, "transposed", "none"),
    LinearCase((3, 7, 19), 45, "slice", "strided"),
    LinearCase((3, 2, 7, 19), 45, "transposed", "dense"),
    LinearCase((2, 3, 33), 17, "dense", "none"),
    LinearCase((67, 71), 33, "slice", "dense"),
)
# What a device binary of the kernel admits (x dense, w row-major, bias dense or absent, K, N and w's pitch multiples
# of 16), over every x rank from 1 to 4: sizes off every block, so the edges are masked, and both kinds of bias.
BINARY_LINEAR_CASES = tuple(
    LinearCase(x_shape, n, weight, bias)
    for x_shape, n, weight in (((48,), 80, "dense"), ((5, 48), 80, "pitched"), ((3, 7, 144), 48, "dense"),
                               ((2, 3, 5, 16), 112, "pitched"))
    for bias in ("none", "dense"))


def make_inputs(case: LinearCase, dtype: torch.dtype, seed: int) -> tuple:
    """(x, w, bias) of ``case`` in ``dtype``: standard normal values, drawn in float32 and rounded to ``dtype``."""
    generator = torch.Generator().manual_seed(seed)
    k = case.x_shape[-1]

    def normal(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    x = normal(*case.x_shape)
    if case.weight == "dense":
        w = normal(case.n, k)
    elif case.weight == "transposed":
        w = normal(k, case.n).t()
    elif case.weight == "pitched":
        w = normal(case.n, k + 16)[:, :k]
    else:
        w = normal(case.n, 2 * k)[:, ::2]
    if case.bias == "none":
        return x, w, None
    return x, w, normal(case.n) if case.bias == "dense" else normal(2 * case.n)[::2]
