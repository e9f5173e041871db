"""Configurations of the decode kernel (``_decode_jit_kernels.py``) and the rules that say which problems each fits.

A decode config fixes the style (``gemv`` or ``dot``), the weight layout it reads (``n_by_k``: an nn.Linear weight
``w[N, K]`` passed as ``w.T``; ``k_by_n``: a row-major ``[K, N]`` matrix), the tile and the K split. Each config
serves one layout only, because the tile that streams one layout at full width reads the other with strided,
narrow loads.

Example::

    config = DecodeConfig("gemv", "n_by_k", block_n=8, block_k=512, num_warps=4, num_stages=3)
    config.tag                                  # 'gemv_nk_bn8_bk512_w4_s3'
    decode_unsupported_reason(config, m=1, n=4096, k=4096, element_size=2, arch=90, weight_n_by_k=True)  # ''
"""

from __future__ import annotations

from dataclasses import dataclass

from ._configs import SMALL_M_LIMIT, next_power_of_two, shared_memory_limit

STYLES = ("gemv", "dot")
WEIGHT_LAYOUTS = ("n_by_k", "k_by_n")
# tl.dot's smallest tile side.
_DOT_MIN_BLOCK = 16
# The smallest copy cp.async makes, per thread.
_CP_ASYNC_MIN_BYTES = 4
# Registers a thread can give the GEMV accumulator and still leave room for the loaded tile and addresses.
_GEMV_ACCUMULATOR_FLOATS_PER_THREAD = 64


@dataclass(frozen=True)
class DecodeConfig:
    """One decode kernel instance.

    style: ``gemv`` (M = 1: element-wise FMAs into a tile-shaped float32 accumulator, reduced over K after the
    loop) or ``dot`` (tl.dot on max(16, next power of two of M) rows, fixed at launch). weight_layout: ``n_by_k``
    or ``k_by_n``. block_n/block_k: the weight tile. num_warps: as for Triton. num_stages: tiles in the K loop's
    cp.async pipeline (1: loads go straight to registers). split_k: K slices computed by separate programs, the
    last of a tile's to finish adding them up (serial split-K, in the same launch).
    """

    style: str
    weight_layout: str
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    split_k: int = 1

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"DecodeConfig.style must be one of {', '.join(STYLES)}; got {self.style!r}")
        if self.weight_layout not in WEIGHT_LAYOUTS:
            raise ValueError(f"DecodeConfig.weight_layout must be one of {', '.join(WEIGHT_LAYOUTS)}; "
                             f"got {self.weight_layout!r}")
        minimum = _DOT_MIN_BLOCK if self.style == "dot" else 1
        for field_name in ("block_n", "block_k"):
            value = getattr(self, field_name)
            if value < minimum or value & (value - 1):
                raise ValueError(f"DecodeConfig.{field_name} must be a power of two >= {minimum} for the "
                                 f"{self.style} style; got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"DecodeConfig.num_warps must be one of 1, 2, 4, 8, 16; got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"DecodeConfig.num_stages must be >= 1; got {self.num_stages}")
        if self.split_k < 1:
            raise ValueError(f"DecodeConfig.split_k must be >= 1; got {self.split_k}")
        if self.style == "gemv":
            floats = self.block_n * self.block_k // (32 * self.num_warps)
            if floats > _GEMV_ACCUMULATOR_FLOATS_PER_THREAD:
                raise ValueError(f"DecodeConfig: the gemv accumulator needs {floats} floats per thread "
                                 f"(block_n * block_k / threads); at most "
                                 f"{_GEMV_ACCUMULATOR_FLOATS_PER_THREAD} fit in registers")

    @property
    def tag(self) -> str:
        """A short unique name, e.g. ``gemv_nk_bn8_bk512_w4_s3`` or ``dot_kn_bn64_bk128_w4_s3_sk4``."""
        layout = "nk" if self.weight_layout == "n_by_k" else "kn"
        tag = f"{self.style}_{layout}_bn{self.block_n}_bk{self.block_k}_w{self.num_warps}_s{self.num_stages}"
        return tag if self.split_k == 1 else f"{tag}_sk{self.split_k}"

    @property
    def num_threads(self) -> int:
        return 32 * self.num_warps

    def rows_per_program(self, m: int) -> int:
        """BLOCK_M for M rows: 1 for GEMV (one program per row), M's next power of two (at least 16) for tl.dot."""
        return 1 if self.style == "gemv" else max(_DOT_MIN_BLOCK, next_power_of_two(m))

    def shared_memory_bytes(self, m: int, element_size: int, arch: int | None = None) -> int:
        """The pipelined operand buffers in shared memory, for pruning before compiling: ``num_stages - 1`` tiles
        of a and b, or ``num_stages`` where Triton multiplies with wgmma (sm_90, 64 rows or more: a warpgroup's
        tile), which keeps one more in flight. A GEMV's row of a is queued only where each thread's share of it is
        at least cp.async's smallest copy (4 bytes); below that it is loaded straight into registers. The compiled
        kernels take exactly this (checked for every config on sm_80 and sm_90 with Triton 3.9: at 64 rows the
        estimate without wgmma's extra stage fell 49-82 KB short)."""
        rows = self.rows_per_program(m)
        wgmma = arch == 90 and self.style == "dot" and rows >= 64
        stages = self.num_stages if wgmma else max(self.num_stages - 1, 1)
        if self.style == "gemv" and self.block_k * element_size < _CP_ASYNC_MIN_BYTES * self.num_threads:
            rows = 0
        return stages * (rows + self.block_n) * self.block_k * element_size


# Sized for an H200 (132 SMs, ~4.5 TB/s read) on Llama-3 8B/70B and Mixtral layers (N from 4096 to 57344), by what
# the first H200 run showed (docs/triton.md, "Decode kernels"): a call costs ~4.7 us plus the weight's bytes at the
# rate the memory system is kept busy, and that rate follows the bytes in flight. Every resident program queues
# (num_stages - 1) weight tiles through cp.async (num_stages = 1, loads into registers, keeps one and always lost);
# about 8 MB in flight over the GPU (60+ KB per SM) reached 4.3-4.9 TB/s, 4-6 MB 3.3-3.9. So each config aims at
# 8+ MB for the layers it is meant for, from (programs resident) x (tiles queued) x (tile bytes), with shared memory
# (tl.dot also queues its 16-64 rows of a) bounding the programs per SM. [K, N] weights are read in runs of
# BLOCK_N elements per K row: dot tiles with 32-byte runs (BLOCK_N 16) read at 1.9-2.8 TB/s, 128-byte runs 4.6, so
# the k_by_n configs read 64 columns (32 for the deepest GEMV; 16 for the GEMV that won the 8B qkv at M = 1) and
# take programs from split-K where N is small.
# Split-K adds its slices in the same launch (``_decode_jit_kernels.py``). Comments give the shared memory, programs
# per SM and weight bytes in flight per program on sm_90 (bfloat16; dot at M <= 16).
DECODE_CONFIGS = (
    # GEMV (M = 1), nn.Linear weight: 1-2 KB rows, 8+ programs per SM.
    DecodeConfig("gemv", "n_by_k", block_n=8, block_k=512, num_warps=4, num_stages=3),   # 18 KB, 7/SM, 16 KB
    DecodeConfig("gemv", "n_by_k", block_n=4, block_k=1024, num_warps=4, num_stages=3),  # 20 KB, 8/SM, 16 KB
    DecodeConfig("gemv", "n_by_k", block_n=4, block_k=1024, num_warps=4, num_stages=4),  # 30 KB, 7/SM, 24 KB
    DecodeConfig("gemv", "n_by_k", block_n=16, block_k=512, num_warps=8, num_stages=3),  # 34 KB, 2/SM, 32 KB
    # GEMV (M = 1), [K, N] weight.
    DecodeConfig("gemv", "k_by_n", block_n=16, block_k=256, num_warps=4, num_stages=3),  # 17 KB, 8/SM, 16 KB
    DecodeConfig("gemv", "k_by_n", block_n=32, block_k=512, num_warps=8, num_stages=3),  # 66 KB, 2/SM, 64 KB
    DecodeConfig("gemv", "k_by_n", block_n=64, block_k=128, num_warps=8, num_stages=3, split_k=4),  # 32 KB, 3/SM, 32 KB
    DecodeConfig("gemv", "k_by_n", block_n=64, block_k=128, num_warps=8, num_stages=4, split_k=2),  # 48 KB, 2/SM, 48 KB
    # dot, nn.Linear weight. BLOCK_N 16 gives N/16 programs (256-384 on the 8B layers), enough for one resident
    # wave with a deep queue; BLOCK_N 32 for the larger layers.
    DecodeConfig("dot", "n_by_k", block_n=16, block_k=256, num_warps=4, num_stages=5),   # 64 KB, 3/SM, 32 KB
    DecodeConfig("dot", "n_by_k", block_n=16, block_k=512, num_warps=4, num_stages=4),   # 96 KB, 2/SM, 48 KB
    DecodeConfig("dot", "n_by_k", block_n=32, block_k=256, num_warps=4, num_stages=3),   # 48 KB, 4/SM, 32 KB
    DecodeConfig("dot", "n_by_k", block_n=32, block_k=256, num_warps=4, num_stages=5),   # 96 KB, 2/SM, 64 KB
    DecodeConfig("dot", "n_by_k", block_n=64, block_k=128, num_warps=4, num_stages=4, split_k=4),  # 60 KB, 3/SM, 48 KB
    # BLOCK_N 64 without split-K: at M = 8-16 they beat every config above by 2-7% on the Mixtral expert, the 8B qkv
    # and gate_up layers (benchmarks/results/debug-decode-config-sweep-nvidia-h200.txt).
    DecodeConfig("dot", "n_by_k", block_n=64, block_k=128, num_warps=4, num_stages=4),   # 60 KB, 3/SM, 48 KB
    DecodeConfig("dot", "n_by_k", block_n=64, block_k=256, num_warps=4, num_stages=3),   # 80 KB, 2/SM, 64 KB
    # dot, [K, N] weight: 128-byte runs of N.
    DecodeConfig("dot", "k_by_n", block_n=64, block_k=128, num_warps=4, num_stages=3),   # 40 KB, 5/SM, 32 KB
    DecodeConfig("dot", "k_by_n", block_n=64, block_k=256, num_warps=4, num_stages=3),   # 80 KB, 2/SM, 64 KB
    DecodeConfig("dot", "k_by_n", block_n=64, block_k=128, num_warps=4, num_stages=5, split_k=2),  # 80 KB, 2/SM, 64 KB
    DecodeConfig("dot", "k_by_n", block_n=64, block_k=128, num_warps=4, num_stages=4, split_k=4),  # 60 KB, 3/SM, 48 KB
    # A fourth stage, and 256-byte runs of N: at M = 8-16, 16-17% faster than every config above on the 8B qkv layer
    # (past cuBLAS there), 2-4% on the 70B o and gate_up and the 8B gate_up layers (the same sweep).
    DecodeConfig("dot", "k_by_n", block_n=64, block_k=256, num_warps=4, num_stages=4),   # 120 KB, 1/SM, 96 KB
    DecodeConfig("dot", "k_by_n", block_n=128, block_k=64, num_warps=4, num_stages=4),   # 54 KB, 4/SM, 48 KB
)


def decode_unsupported_reason(config: DecodeConfig, m: int, n: int, k: int, element_size: int, arch: int | None,
                              weight_n_by_k: bool) -> str:
    """Why ``config`` should not run an M x N x K problem, or "" if it should. ``weight_n_by_k``: b is the
    transposed view of an [N, K] matrix (unit stride along K)."""
    if m > SMALL_M_LIMIT:
        return f"M={m} > {SMALL_M_LIMIT}: the decode kernel keeps all of M in one program"
    if (config.weight_layout == "n_by_k") != weight_n_by_k:
        wanted = "an nn.Linear weight [N, K] passed as w.T" if config.weight_layout == "n_by_k" else \
            "a row-major [K, N] matrix"
        return f"this config streams {wanted}; b is laid out the other way"
    if config.style == "gemv" and m > 1:
        return f"M={m}: the gemv style is for one row (it would read the weight once per row); dot takes M > 1"
    k_blocks = -(-k // config.block_k)
    if config.split_k > 1 and k_blocks < 2 * config.split_k:
        return f"K={k} has {k_blocks} blocks of {config.block_k}: too few for split_k={config.split_k}"
    needed = config.shared_memory_bytes(m, element_size, arch)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""
