"""Launch configurations of the Triton matmul kernels, and the candidate lists the tuner chooses among.

A config is a frozen dataclass, so it hashes and compares by value and can key caches. Each (family, config) pair
becomes one kabi kernel; the lists below are short on purpose, and each family's ``supports`` predicate prunes
them further by shape (``fits_problem``), so tuning one problem measures a handful of candidates, not dozens.

Example::

    config = MatmulConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
    config.tag                             # 'bm128_bn128_bk64_w8_s3_g8'
    config.shared_memory_bytes(2)          # 98304: operand ring buffers for float16
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MatmulConfig:
    """Tile sizes and launch parameters of one matmul kernel instance.

    block_m/block_n/block_k: the tile of c one program computes and the K step; num_warps: 32-thread warps per
    program; num_stages: software-pipeline depth (operand buffers in shared memory); group_m: tile rows walked
    together for L2 reuse; split_k: K slices computed by separate programs (small-M family only); tail_m: rows past
    BLOCK_M that a group's last row tile absorbs, 0 for none (grouped family only); short_m: the rows of a shorter
    tile that a group's last row tile runs as when its remainder fits in it, 0 for none (grouped family only; not
    with tail_m: it is the other way to pay less for a remainder, without the tail's second accumulator).
    """

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    split_k: int = 1
    tail_m: int = 0
    short_m: int = 0

    def __post_init__(self) -> None:
        for field_name in ("block_m", "block_n", "block_k"):
            value = getattr(self, field_name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"MatmulConfig.{field_name} must be a power of two >= 16 (tl.dot's minimum); "
                                 f"got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"MatmulConfig.num_warps must be one of 1, 2, 4, 8, 16; got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"MatmulConfig.num_stages must be >= 1; got {self.num_stages}")
        if self.group_m < 1:
            raise ValueError(f"MatmulConfig.group_m must be >= 1; got {self.group_m}")
        if self.split_k < 1:
            raise ValueError(f"MatmulConfig.split_k must be >= 1; got {self.split_k}")
        if self.tail_m and (self.tail_m < 16 or self.tail_m & (self.tail_m - 1) or self.tail_m > self.block_m):
            raise ValueError(f"MatmulConfig.tail_m must be 0 or a power of two from 16 (tl.dot's minimum) to block_m "
                             f"({self.block_m}: a remainder is never taller); got {self.tail_m}")
        if self.short_m and (self.short_m < 16 or self.short_m & (self.short_m - 1)
                             or self.short_m > self.block_m // 2):
            raise ValueError(f"MatmulConfig.short_m must be 0 or a power of two from 16 (tl.dot's minimum) to half "
                             f"of block_m ({self.block_m}); got {self.short_m}")
        if self.short_m and self.tail_m:
            raise ValueError(f"MatmulConfig: tail_m ({self.tail_m}) and short_m ({self.short_m}) are two ways to "
                             f"compute a group's last rows (absorbed into the tile before them, or in a shorter tile "
                             f"of their own); set one of them")

    @property
    def tag(self) -> str:
        """A short unique name for kernel names and file names, e.g. ``bm64_bn64_bk128_w4_s4_g8_sk4`` (split-K),
        ``bm128_bn256_bk64_w8_s3_g8_t32`` (a 32-row tail) or ``bm128_bn256_bk64_w8_s3_g8_short64`` (a 64-row short
        last tile)."""
        tag = (f"bm{self.block_m}_bn{self.block_n}_bk{self.block_k}_w{self.num_warps}_s{self.num_stages}"
               f"_g{self.group_m}")
        if self.split_k > 1:
            tag += f"_sk{self.split_k}"
        if self.tail_m:
            tag += f"_t{self.tail_m}"
        return f"{tag}_short{self.short_m}" if self.short_m else tag

    @property
    def num_threads(self) -> int:
        return 32 * self.num_warps

    def shared_memory_bytes(self, element_size: int) -> int:
        """An estimate of the shared memory the pipelined operand tiles need, a tail's rows included (Triton's own
        figure comes with the compiled kernel; this one is for pruning before compiling). A short last tile's buffers
        are smaller than the full tile's and share their memory, so they add nothing."""
        return self.num_stages * (self.block_m + self.tail_m + self.block_n) * self.block_k * element_size


def next_power_of_two(value: int) -> int:
    return 1 << max(0, int(value) - 1).bit_length()


def ceil_div(numerator: int, denominator: int) -> int:
    """Tiles of ``denominator`` that cover ``numerator``: a launch grid's size (triton.cdiv, without Triton)."""
    return -(-numerator // denominator)


# M at or below this is "decode": only the small-M and decode families take it; the tiled families take larger M.
SMALL_M_LIMIT = 64

# Shared memory a block may opt into, by compute capability (CUDA programming guide, "Technical Specifications").
_SHARED_MEMORY_LIMIT_BY_ARCH = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def shared_memory_limit(arch: int | None) -> float:
    """Opt-in shared memory per block for an arch; unlimited for None (the CPU interpreter)."""
    if arch is None:
        return math.inf
    known = [candidate for candidate in _SHARED_MEMORY_LIMIT_BY_ARCH if candidate <= arch]
    return _SHARED_MEMORY_LIMIT_BY_ARCH[max(known)] if known else 48 * 1024


# The general tiled kernel: large tiles for prefill, narrower ones for mid-sized M or N.
TILED_CONFIGS = (
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 64, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 32, num_warps=4, num_stages=4),
    MatmulConfig(128, 64, 32, num_warps=4, num_stages=4),
    MatmulConfig(64, 128, 32, num_warps=4, num_stages=4),
    MatmulConfig(64, 64, 64, num_warps=4, num_stages=3),
)

# The Hopper kernel: wgmma wants BLOCK_M a multiple of 64 per warpgroup (4 warps) and a deep TMA pipeline.
HOPPER_CONFIGS = (
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 64, num_warps=8, num_stages=4),
    MatmulConfig(128, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(64, 128, 64, num_warps=4, num_stages=4),
)

# The small-M kernel: BLOCK_M fits M (16, 32 or 64 rows), narrow N tiles and wide K steps stream b, and split-K
# multiplies the programs when N alone gives too few to fill the GPU (e.g. N = 4096 in 64-wide tiles is 64). The
# 6-stage variant keeps more of b in flight, for the layers where bandwidth, not program count, is short.
SMALL_M_CONFIGS = tuple(
    MatmulConfig(block_m, block_n, block_k, num_warps=4, num_stages=stages, split_k=split_k)
    for block_m in (16, 32, 64)
    for block_n, block_k, stages, split_k in ((64, 128, 4, 1), (64, 128, 4, 4), (64, 128, 6, 4), (128, 64, 4, 2)))


def fits_problem(family_name: str, config: MatmulConfig, m: int, n: int, k: int, element_size: int,
                 arch: int | None) -> str:
    """Why ``config`` is a poor or impossible fit for an M x N x K problem, or "" if it fits.

    The rules keep tuning cheap: decode M goes to small-M configs whose BLOCK_M is the next power of two of M;
    larger M goes to the tiled families with BLOCK_M at most the next power of two of M; split-K never leaves a
    slice without work; the operand buffers fit the arch's shared memory.
    """
    if family_name == "small_m":
        if m > SMALL_M_LIMIT:
            return f"M={m} > {SMALL_M_LIMIT}: the small-M kernel is for decode shapes"
        if config.block_m != max(16, next_power_of_two(m)):
            return f"BLOCK_M={config.block_m} does not fit M={m} (wants {max(16, next_power_of_two(m))})"
        k_blocks = -(-k // config.block_k)
        if config.split_k > 1 and k_blocks < 2 * config.split_k:
            return f"K={k} has {k_blocks} blocks of {config.block_k}: too few for split_k={config.split_k}"
    else:
        if m <= SMALL_M_LIMIT:
            return f"M={m} <= {SMALL_M_LIMIT}: decode shapes go to the small-M kernel"
        if config.block_m > next_power_of_two(m):
            return f"BLOCK_M={config.block_m} is above M={m} rounded up to a power of two"
        if config.block_n > max(64, next_power_of_two(n)):
            return f"BLOCK_N={config.block_n} is far above N={n}"
    needed = config.shared_memory_bytes(element_size)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""
