"""The linear kernels on a CUDA GPU against the op's float64 reference, judged as the correctness gate judges a
candidate: the fused Triton kernel (every config that fits, bfloat16 on the tensor cores as it is) and the
torch-native kernel, at decode and prefill sizes off the tiles."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from _linear_cases import tolerances  # noqa: E402

from kabi._base.declarations import Tolerance  # noqa: E402
from kabi._selection.correctness import check_output, reference_output  # noqa: E402
from kabi.backends import torch_native  # noqa: E402
from kabi.backends.triton._families import device_facts  # noqa: E402
from kabi.backends.triton._linear import LINEAR_CONFIGS, launch_linear, linear_unsupported_reason  # noqa: E402
from kabi.ops import _references  # noqa: E402
from kabi.ops._references import ACTIVATIONS  # noqa: E402

_TOLERANCES = {name: Tolerance(**values) for name, values in tolerances().items()}
# (rows, N, K, w transposed, with bias): a Llama-3 8B layer at decode, odd sizes, a prefill-sized block of rows.
# Each case runs every config and activation against a float64 reference: sizes stay small enough for the GPU pass.
_CASES = [
    (1, 4096, 4096, False, False),
    (16, 6144, 4096, False, True),
    (7, 1000, 2056, True, True),
    (300, 520, 264, False, True),
    (1024, 1024, 768, False, False),
]
_DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _inputs(rows, n, k, w_transposed, with_bias, dtype):
    generator = torch.Generator(device="cuda").manual_seed(rows * 7919 + n)

    def normal(*shape):
        return torch.randn(*shape, device="cuda", generator=generator).to(dtype)

    x = normal(rows, k)
    w = normal(k, n).t() if w_transposed else normal(n, k)
    return x, w, normal(n) if with_bias else None


def _verdict(output, x, w, bias, activation):
    reference = reference_output(_references.linear, [x, w, bias, activation])
    return check_output(output, reference, _TOLERANCES[str(x.dtype).removeprefix("torch.")], expected_dtype=x.dtype)


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("case", _CASES, ids=lambda case: "x".join(map(str, case[:3])) + ("-wT" if case[3] else ""))
def test_fused_triton_kernel_matches_the_reference(case, dtype):
    rows, n, k, w_transposed, with_bias = case
    x, w, bias = _inputs(*case, dtype)
    arch, _ = device_facts(x.device)
    # Every config meets every activation across the cases (each pair is a compile of its own, a second or more
    # each); the CPU interpreter tests run every pair on every case.
    activations = list(ACTIVATIONS)
    case_index = _CASES.index(case)
    failures = []
    for config_index, config in enumerate(LINEAR_CONFIGS):
        if linear_unsupported_reason(config, rows, n, k, x.element_size(), arch):
            continue
        activation = activations[(config_index + case_index) % len(activations)]
        verdict = _verdict(launch_linear(config, x, w, bias, activation), x, w, bias, activation)
        if verdict is not None:
            failures.append(f"{config.tag} {activation}: {verdict}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", _DTYPES + [torch.float64], ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_torch_native_kernel_matches_the_reference(activation, dtype):
    x, w, bias = _inputs(300, 520, 264, True, True, dtype)
    assert _verdict(torch_native.linear(x, w, bias, activation), x, w, bias, activation) is None
