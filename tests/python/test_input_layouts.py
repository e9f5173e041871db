"""Kernels that take their layouts per input (ABI 2.4): ``register_kernel(layouts={input: names})``, dispatch that
picks such a kernel only for the layouts it declares, the reason ``kabi.explain`` and a forced call give for the
others, a mapping that names no input of the op, and the table form of a kernel declaration."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kabi
from kabi._base.declarations import load_kernel_file
from kabi._base.registry_fields import RegistryError
from kabi.ops._kernel_registration import register_declared

pytestmark = pytest.mark.usefixtures("untuned")

NAME = "test.input_layouts.linear"


@pytest.fixture
def linear_kernel():
    """A float64 matmul that takes nn.Linear's layout: a row-major, b column-major (a transposed weight)."""
    calls = []

    def matmul(a, b, out=None):
        calls.append((a.stride(), b.stride()))
        return torch.matmul(a, b, out=out)

    info = kabi.register_kernel("matmul", matmul, name=NAME, dtypes=["float64"], priority=100,
                                layouts={"a": ["contiguous", "row_strided"], "b": "col_strided"})
    yield info, calls
    kabi.unregister_kernel("matmul", NAME)


def test_the_declaration_gives_the_layouts_per_input(linear_kernel):
    info, _ = linear_kernel
    assert info.input_layouts == (("a", ("contiguous", "row_strided")), ("b", ("col_strided",)))
    assert dict(info.input_layouts)["b"] == ("col_strided",)
    assert info.layouts == tuple(kabi._core.LAYOUTS)
    assert info.layouts_text == "a: contiguous,row_strided; b: col_strided"
    assert kabi.kernel_info("matmul", NAME) == info


def test_dispatch_picks_it_only_for_its_layouts(linear_kernel):
    _, calls = linear_kernel
    x = torch.randn(4, 8, dtype=torch.float64)
    weight = torch.randn(5, 8, dtype=torch.float64)
    torch.testing.assert_close(kabi.ops.matmul(x, weight.t()), x @ weight.t())
    assert calls == [((8, 1), (1, 8))]
    torch.testing.assert_close(kabi.ops.matmul(x, weight.t().contiguous()), x @ weight.t())
    torch.testing.assert_close(kabi.ops.matmul(x.t().contiguous().t(), weight.t()), x @ weight.t())
    assert len(calls) == 1
    # The same call again goes through the remembered decision: still this kernel, and only for its layouts.
    kabi.ops.matmul(x, weight.t())
    kabi.ops.matmul(x, weight.t().contiguous())
    assert len(calls) == 2


def test_explain_and_a_forced_call_name_the_input(linear_kernel):
    x = torch.randn(4, 8, dtype=torch.float64)
    b = torch.randn(8, 5, dtype=torch.float64)
    explanation = kabi.explain(kabi.ops.matmul, x, b)
    candidate = next(candidate for candidate in explanation.candidates if candidate.name == NAME)
    assert not candidate.eligible
    assert candidate.reason == "b is contiguous; the kernel takes {col_strided} for b"
    assert explanation.pick != NAME
    assert kabi.explain(kabi.ops.matmul, x, b.t().contiguous().t()).pick == NAME
    with kabi.use(matmul=NAME), pytest.raises(kabi.NoEligibleKernelError,
                                              match=r"b is contiguous; the kernel takes \{col_strided\} for b"):
        kabi.ops.matmul(x, b)


def test_a_mapping_that_names_no_input_of_the_op_is_refused():
    def matmul(a, b, out=None):
        return torch.matmul(a, b, out=out)

    with pytest.raises(ValueError, match="layouts names 'weight', not an input of op matmul; its inputs are a, b"):
        kabi.register_kernel("matmul", matmul, name=NAME, layouts={"a": "contiguous", "weight": ["col_strided"]})
    with pytest.raises(ValueError, match="layouts of b: unknown layout 'diagonal'"):
        kabi.register_kernel("matmul", matmul, name=NAME, layouts={"b": ["diagonal"]})
    assert NAME not in {kernel.name for kernel in kabi.kernels("matmul")}


def test_a_declaration_takes_the_table_form(tmp_path: Path):
    path = tmp_path / "registry" / "kernels" / "test" / "matmul.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f"""
[[kernels]]
op = "matmul"
name = "{NAME}"
backend = "test"
device = "cpu"
implementation = "kabi.backends.torch_native:matmul"
dtypes = ["float64"]
layouts = {{ b = ["col_strided", "general"] }}
batch_mode = "any"
""")
    (spec,) = load_kernel_file(path)
    assert spec.input_layouts == {"b": ("col_strided", "general")} and spec.layouts == ("any",)
    info = register_declared(spec)
    try:
        assert info.input_layouts == (("a", tuple(kabi._core.LAYOUTS)), ("b", ("col_strided", "general")))
        assert info.layouts_text == "a: any; b: col_strided,general"
    finally:
        kabi.unregister_kernel("matmul", NAME)
    path.write_text(path.read_text().replace('b = ["col_strided", "general"]', 'b = ["diagonal"]'))
    load_kernel_file.cache_clear()
    with pytest.raises(RegistryError, match=r"kernels\[0\].layouts.b\[0\]: 'diagonal' is not one of"):
        load_kernel_file(path)
