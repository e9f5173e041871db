"""The fused Triton linear kernel compiled to cubins for sm_90a and sm_80 on a machine without a GPU: tensor-core
instructions in the SASS (wgmma where the tile allows it), the epilogue's exp in the code, the bias folded out
when there is none."""

import subprocess
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

import torch  # noqa: E402

from kabi.backends.triton._manifest import ptx_entry_params  # noqa: E402
from kabi.backends.triton._linear import LINEAR_CONFIGS, compile_linear  # noqa: E402

_CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
# (name, config, dtype, arch, activation, has_bias): a wgmma-sized prefill tile on sm_90a, the same tile on sm_80,
# a decode tile (BLOCK_M 16, below wgmma's 64 rows) on sm_90a, and a kernel without bias.
_KERNELS = {
    "prefill-sm90-bf16-gelu": (LINEAR_CONFIGS[0], torch.bfloat16, 90, "gelu", True),
    "prefill-sm80-f16-silu": (LINEAR_CONFIGS[0], torch.float16, 80, "silu", True),
    "decode-sm90-bf16-silu": (LINEAR_CONFIGS[3], torch.bfloat16, 90, "silu", True),
    "mid-sm90-f16-relu-no-bias": (LINEAR_CONFIGS[1], torch.float16, 90, "relu", False),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("linear-cubins")
    kernels = {}
    for name, (config, dtype, arch, activation, has_bias) in _KERNELS.items():
        kernel = compile_linear(config, dtype, arch, activation=activation, has_bias=has_bias)
        cubin = directory / f"{name}.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        kernels[name] = (kernel, cubin)
    return kernels


def _sass(cubin: Path) -> str:
    return subprocess.run([str(_CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_tensor_cores_carry_the_product(compiled):
    prefill_hopper = _sass(compiled["prefill-sm90-bf16-gelu"][1])
    assert "HGMMA" in prefill_hopper
    assert "HGMMA" in _sass(compiled["mid-sm90-f16-relu-no-bias"][1])
    for name in ("prefill-sm80-f16-silu", "decode-sm90-bf16-silu"):
        sass = _sass(compiled[name][1])
        assert "HMMA" in sass and "HGMMA" not in sass, name


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_the_activation_is_in_the_epilogue(compiled):
    # silu's exp runs on the special-function unit as an exp2; relu needs none.
    assert "MUFU.EX2" in _sass(compiled["prefill-sm80-f16-silu"][1])
    assert "MUFU.EX2" not in _sass(compiled["mid-sm90-f16-relu-no-bias"][1])


def test_the_entry_takes_a_bias_only_when_there_is_one(compiled):
    def pointers(name):
        return ptx_entry_params(compiled[name][0].asm["ptx"]).count("u64")

    # x, w, bias, out and Triton's two scratch pointers; without a bias, one fewer.
    assert pointers("prefill-sm90-bf16-gelu") == 6
    assert pointers("mid-sm90-f16-relu-no-bias") == 5


def test_compile_refuses_what_the_kernel_does_not_take():
    with pytest.raises(TypeError, match="dtype"):
        compile_linear(LINEAR_CONFIGS[0], torch.float64, 90, activation="none", has_bias=True)
    with pytest.raises(ValueError, match="activation must be one of"):
        compile_linear(LINEAR_CONFIGS[0], torch.float16, 90, activation="tanh", has_bias=True)
