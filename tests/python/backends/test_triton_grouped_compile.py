"""The persistent grouped GEMM compiled to cubins for sm_90a and sm_80 on a machine without a GPU: on sm_90a the
prefill tile reads through TMA (tensor-map loads) into wgmma (HGMMA in the SASS), on sm_80 the pointer path uses
mma.sync (HMMA), and the 3-D form and the [E, K, N] weight layout compile too."""

import subprocess
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

import torch  # noqa: E402

from kabi.backends.triton._grouped import GROUPED_CONFIGS, compile_grouped_mm  # noqa: E402

_CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
_PREFILL = GROUPED_CONFIGS[0]
_MID = next(config for config in GROUPED_CONFIGS if config.block_m == 64)
_DECODE = next(config for config in GROUPED_CONFIGS if config.block_m == 16)
# (config, dtype, arch, has_offsets, w_n_by_k)
_KERNELS = {
    "prefill-sm90-bf16-linear-weight": (_PREFILL, torch.bfloat16, 90, True, True),
    "prefill-sm80-bf16-linear-weight": (_PREFILL, torch.bfloat16, 80, True, True),
    "mid-sm90-f16-3d-row-major-weight": (_MID, torch.float16, 90, False, False),
    "decode-sm90-bf16-linear-weight": (_DECODE, torch.bfloat16, 90, True, True),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("grouped-cubins")
    kernels = {}
    for name, (config, dtype, arch, has_offsets, w_n_by_k) in _KERNELS.items():
        kernel = compile_grouped_mm(config, dtype, arch, has_offsets=has_offsets, w_n_by_k=w_n_by_k)
        cubin = directory / f"{name}.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        kernels[name] = (kernel, cubin)
    return kernels


def _sass(cubin: Path) -> str:
    return subprocess.run([str(_CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout


def test_sm90_reads_through_tma_and_sm80_through_pointers(compiled):
    hopper_ptx = compiled["prefill-sm90-bf16-linear-weight"][0].asm["ptx"]
    assert "cp.async.bulk.tensor" in hopper_ptx and "wgmma" in hopper_ptx
    ampere_ptx = compiled["prefill-sm80-bf16-linear-weight"][0].asm["ptx"]
    assert "cp.async.bulk.tensor" not in ampere_ptx and "mma.sync" in ampere_ptx
    assert ".target sm_90a" in hopper_ptx


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_tensor_cores_carry_the_product(compiled):
    for name in ("prefill-sm90-bf16-linear-weight", "mid-sm90-f16-3d-row-major-weight"):
        sass = _sass(compiled[name][1])
        assert "HGMMA" in sass and "UTMALDG" in sass, name
    for name in ("prefill-sm80-bf16-linear-weight", "decode-sm90-bf16-linear-weight"):
        sass = _sass(compiled[name][1])
        assert "HMMA" in sass and "HGMMA" not in sass, name
