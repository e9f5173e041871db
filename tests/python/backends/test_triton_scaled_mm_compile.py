"""The Triton FP8 kernels compiled to cubins on a machine without a GPU: on sm_90a the product is FP8 wgmma (PTX
``wgmma.mma_async ... e4m3.e4m3``, SASS ``QGMMA``, the FP8 form of HGMMA), e5m2 too, and the persistent kernel loads
its tiles with TMA (``UTMALDG``); on sm_89 the pointer kernel takes the FP8 mma of Ada (SASS ``QMMA``, no wgmma);
the bias is folded out when there is none."""

import subprocess
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

import torch  # noqa: E402

from kabi.backends.triton._scaled_mm import SCALED_MM_CONFIGS, SCALED_MM_TMA_CONFIGS, compile_scaled_mm  # noqa: E402

_CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
# (name: config, operand dtype, output dtype, arch, row-wise scales, bias, the persistent TMA kernel)
_KERNELS = {
    "sm90-e4m3-bf16-row-bias": (SCALED_MM_CONFIGS[1], torch.float8_e4m3fn, torch.bfloat16, 90, True, True, False),
    "sm90-e5m2-f32-tensor": (SCALED_MM_CONFIGS[3], torch.float8_e5m2, torch.float32, 90, False, False, False),
    "sm89-e4m3-f16-tensor": (SCALED_MM_CONFIGS[3], torch.float8_e4m3fn, torch.float16, 89, False, False, False),
    "sm90-tma-e4m3-bf16-row": (SCALED_MM_TMA_CONFIGS[0], torch.float8_e4m3fn, torch.bfloat16, 90, True, False, True),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("scaled-mm-cubins")
    kernels = {}
    for name, (config, dtype, out_dtype, arch, row_scales, has_bias, tma) in _KERNELS.items():
        kernel = compile_scaled_mm(config, dtype, out_dtype, arch, row_scales=row_scales, has_bias=has_bias, tma=tma)
        cubin = directory / f"{name}.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        kernels[name] = (kernel, cubin)
    return kernels


def _sass(cubin: Path) -> str:
    return subprocess.run([str(_CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout


def test_sm90a_takes_fp8_wgmma(compiled):
    e4m3 = compiled["sm90-e4m3-bf16-row-bias"][0].asm["ptx"]
    assert ".target sm_90a" in e4m3
    assert "wgmma.mma_async" in e4m3 and ".e4m3.e4m3" in e4m3
    e5m2 = compiled["sm90-e5m2-f32-tensor"][0].asm["ptx"]
    assert "wgmma.mma_async" in e5m2 and ".e5m2.e5m2" in e5m2


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_the_sass_carries_the_product_on_fp8_tensor_cores(compiled):
    for name, operands in (("sm90-e4m3-bf16-row-bias", ".E4M3.E4M3"), ("sm90-e5m2-f32-tensor", ".E5M2.E5M2"),
                           ("sm90-tma-e4m3-bf16-row", ".E4M3.E4M3")):
        product = [line for line in _sass(compiled[name][1]).splitlines() if "QGMMA" in line]
        assert product and all(operands in line for line in product), name
    ada = _sass(compiled["sm89-e4m3-f16-tensor"][1])
    assert "QMMA" in ada and "GMMA" not in ada


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_the_persistent_kernel_moves_tiles_with_tma(compiled):
    assert "UTMALDG" in _sass(compiled["sm90-tma-e4m3-bf16-row"][1])
    assert "UTMALDG" not in _sass(compiled["sm90-e4m3-bf16-row-bias"][1])


def test_without_bias_the_bias_pointer_is_gone(compiled):
    ptx_params = compiled["sm90-e5m2-f32-tensor"][0].asm["ptx"].split(")", 1)[0]
    with_bias = compiled["sm90-e4m3-bf16-row-bias"][0].asm["ptx"].split(")", 1)[0]
    assert ptx_params.count(".u64") == with_bias.count(".u64") - 1


@pytest.mark.parametrize(("dtype", "out_dtype"), [(torch.bfloat16, torch.bfloat16),
                                                  (torch.float8_e4m3fn, torch.float8_e4m3fn)])
def test_other_dtypes_are_refused_by_name(dtype, out_dtype):
    with pytest.raises(TypeError, match="dtype must be one of"):
        compile_scaled_mm(SCALED_MM_CONFIGS[3], dtype, out_dtype, 90, row_scales=False, has_bias=False)
