"""Configs, shape pruning, the supports predicates and registration of the Triton backend (no kernel runs here)."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kabi.backends.triton import (
    HOPPER_CONFIGS,
    SMALL_M_CONFIGS,
    TILED_CONFIGS,
    MatmulConfig,
    kernel_name,
    register_triton_kernels,
)
from kabi.backends.triton._configs import fits_problem  # noqa: E402
from kabi.backends.triton._families import FAMILIES  # noqa: E402
from kabi.backends.triton._registration import _Supports  # noqa: E402


def test_configs_are_hashable_values():
    config = MatmulConfig(128, 128, 64, num_warps=8, num_stages=3)
    assert config == MatmulConfig(128, 128, 64, num_warps=8, num_stages=3)
    assert len({config, MatmulConfig(128, 128, 64, num_warps=8, num_stages=3)}) == 1
    assert config.tag == "bm128_bn128_bk64_w8_s3_g8"
    assert MatmulConfig(16, 64, 128, num_warps=4, num_stages=4, split_k=4).tag.endswith("_sk4")
    assert MatmulConfig(128, 256, 64, num_warps=8, num_stages=3, tail_m=32).tag == "bm128_bn256_bk64_w8_s3_g8_t32"
    assert MatmulConfig(128, 256, 64, num_warps=8, num_stages=3, short_m=64).tag == \
        "bm128_bn256_bk64_w8_s3_g8_short64"
    with pytest.raises(AttributeError):
        config.block_m = 64
    for configs in (TILED_CONFIGS, HOPPER_CONFIGS, SMALL_M_CONFIGS):
        assert len({config.tag for config in configs}) == len(configs), "kernel names must be unique"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(block_m=8), "block_m must be a power of two >= 16"),
        (dict(block_n=96), "block_n must be a power of two"),
        (dict(num_warps=3), "num_warps must be one of"),
        (dict(num_stages=0), "num_stages must be >= 1"),
        (dict(split_k=0), "split_k must be >= 1"),
        (dict(tail_m=24), "tail_m must be 0 or a power of two from 16"),
        (dict(tail_m=128), r"tail_m must be .* to block_m \(64"),
        (dict(short_m=24), "short_m must be 0 or a power of two from 16"),
        (dict(short_m=64), r"short_m must be .* to half of block_m \(64"),
        (dict(tail_m=16, short_m=16), "tail_m .* and short_m .* set one of them"),
    ],
)
def test_bad_configs_are_refused(fields, message):
    arguments = dict(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3) | fields
    with pytest.raises(ValueError, match=message):
        MatmulConfig(**arguments)


def _fitting(family: str, m: int, n: int, k: int, arch: int | None = 90, element_size: int = 2) -> list:
    configs = FAMILIES[family].configs
    return [config for config in configs if not fits_problem(family, config, m, n, k, element_size, arch)]


def test_decode_shapes_go_to_small_m_configs_sized_for_m():
    assert _fitting("tiled", 64, 4096, 4096) == [] and _fitting("persistent_tma", 16, 4096, 4096) == []
    for m, block_m in ((1, 16), (16, 16), (17, 32), (33, 64), (64, 64)):
        fitting = _fitting("small_m", m, 4096, 4096)
        assert fitting and {config.block_m for config in fitting} == {block_m}
    assert _fitting("small_m", 65, 4096, 4096) == []


def test_split_k_needs_work_for_every_slice():
    # K = 128 is two 64-wide blocks at most: too few for even 2 slices of two blocks each.
    assert all(config.split_k == 1 for config in _fitting("small_m", 1, 4096, 128))
    assert any(config.split_k == 4 for config in _fitting("small_m", 1, 4096, 4096))


def test_large_tiles_are_pruned_for_small_problems_and_small_shared_memory():
    assert all(config.block_m <= 128 for config in _fitting("tiled", 100, 4096, 4096))
    assert all(config.block_n <= 64 for config in _fitting("tiled", 4096, 40, 4096))
    # sm_86 has 99 KiB of shared memory: the 3-stage 128x256x64 tiles (144 KiB) do not fit there.
    assert TILED_CONFIGS[0] in _fitting("tiled", 4096, 4096, 4096, arch=80)
    assert TILED_CONFIGS[0] not in _fitting("tiled", 4096, 4096, 4096, arch=86)
    reason = fits_problem("tiled", TILED_CONFIGS[0], 4096, 4096, 4096, 2, 86)
    assert "shared memory" in reason and "sm_86" in reason


def _problem(m, n, k, dtype="float16", layouts=("contiguous", "contiguous")):
    return SimpleNamespace(dims={"M": m, "K": k, "N": n}, dtype=dtype, layouts=layouts, device_type=1,
                           device_index=0)


def test_supports_predicates_explain_their_refusals():
    tma = FAMILIES["persistent_tma"]
    supports = _Supports(tma, tma.configs[1])
    assert supports(_problem(1024, 1024, 1024)) is True
    assert "16 bytes" in supports(_problem(1024, 1024, 1001))
    # A column-major a is read along M: its pitch is M.
    assert "16 bytes" in supports(_problem(1001, 1024, 1024, layouts=("col_strided", "contiguous")))
    small = FAMILIES["small_m"]
    assert "decode" in _Supports(small, small.configs[0])(_problem(512, 64, 64))
    assert "32-bit" in _Supports(FAMILIES["tiled"], TILED_CONFIGS[1])(_problem(2**16, 2**16, 2**16))


def test_launch_refuses_operands_beyond_32_bit_offsets():
    a = torch.empty_strided((2, 64), (2**31, 1), dtype=torch.float16, device="meta")
    b = torch.empty((64, 64), dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="32-bit offsets"):
        FAMILIES["tiled"].launch(TILED_CONFIGS[1], a, b)


def test_empty_problems_need_no_kernel():
    family = FAMILIES["tiled"]
    a, b = torch.randn(0, 8), torch.randn(8, 5)
    assert family.launch(TILED_CONFIGS[1], a, b).shape == (0, 5)
    out = family.launch(TILED_CONFIGS[1], torch.randn(3, 0), torch.randn(0, 4))
    assert out.shape == (3, 4) and not out.any()


def test_registration_refuses_devices_it_cannot_serve():
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cpu'"):
        register_triton_kernels(device="tpu")
    # This process imported Triton without TRITON_INTERPRET: the kernels cannot run on CPU tensors.
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        register_triton_kernels(device="cpu")


def test_kernel_names():
    assert kernel_name("tiled", TILED_CONFIGS[0].tag) == "triton.matmul.tiled.bm128_bn256_bk64_w8_s3_g8"
    assert kernel_name("tiled", TILED_CONFIGS[0].tag, "cpu").endswith(".cpu")
