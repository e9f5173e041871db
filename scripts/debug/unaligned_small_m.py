"""Why kabi's small-M kernel takes twice Inductor's time on unaligned row-major problems (7x14335x4097: 154.8 us
against Inductor's 72.9 us with the same tile, benchmarks/results/nvidia-h200-matmul-odd-bfloat16.json).

Both compile to the same scalar loads (a row pitch of 14335 elements rules out 16-byte ones; the SASS of each has 80
LDG.E.U16 per K step), but kabi's kernel walks 64-bit pointer tiles through the K loop and reads its strides at run
time (168 registers), where Inductor's template recomputes 32-bit offsets each step from strides it bakes in (79).
This times, in CUDA-graph replay, on the same inputs:
- kabi's binary and its Python twin (the pointer walk, run-time strides);
- the same tile with offsets recomputed each K step from run-time strides;
- that with the sizes and strides compile-time constants, as Inductor compiles it;
- torch.matmul.

    python scripts/debug/unaligned_small_m.py [--shapes 7x14335x4097 127x4097x4095] [--replays 50]
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

import kabi
from kabi.backends.triton._families import FAMILIES

from _probe_common import graph_time_us


@triton.jit
def _recomputed(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    _recomputed_body(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _recomputed_static(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       stride_am: tl.constexpr, stride_ak: tl.constexpr, stride_bk: tl.constexpr,
                       stride_bn: tl.constexpr, stride_cm: tl.constexpr, stride_cn: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    _recomputed_body(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _recomputed_body(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile_n = tl.program_id(0)
    tile_m = tl.program_id(2)
    rows = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    in_block = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(0, tl.cdiv(K, BLOCK_K)):
        ks = k_block * BLOCK_K + in_block
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak, mask=ks[None, :] < K, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn, mask=ks[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["7x14335x4097", "127x4097x4095", "1001x1003x1005"])
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--tile", default="16x64x128", help="BLOCK_M x BLOCK_N x BLOCK_K of the variants")
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--stages", type=int, default=4)
    args = parser.parse_args()
    block_m, block_n, block_k = (int(size) for size in args.tile.split("x"))
    family = FAMILIES["small_m"]
    config = next(config for config in family.configs
                  if (config.block_m, config.block_n, config.block_k, config.num_warps, config.split_k)
                  == (block_m, block_n, block_k, args.warps, 1))
    binary = f"triton.matmul.small_m.{config.tag}.row_major.bfloat16.sm90"
    for shape in args.shapes:
        m, n, k = (int(size) for size in shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        expected = a.float() @ b.float()
        grid = (triton.cdiv(n, block_n), 1, triton.cdiv(m, block_m))
        strides = (*a.stride(), *b.stride(), *c.stride())
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=args.warps, num_stages=args.stages)
        subjects = {
            "torch.matmul": lambda: torch.matmul(a, b, out=c),
            f"python twin {config.tag}": lambda: family.launch(config, a, b, c),
            "offsets recomputed, run-time strides": lambda: _recomputed[grid](a, b, c, m, n, k, *strides, **meta),
            "offsets recomputed, static strides": lambda: _recomputed_static[grid](a, b, c, m, n, k, *strides, **meta),
        }
        try:
            with kabi.use(matmul=binary):
                kabi.ops.matmul(a, b, out=c)
            subjects[f"kabi binary {binary}"] = lambda: kabi.ops.matmul(a, b, out=c)
        except kabi.KabiError as error:
            print(f"{shape}: the binary is not eligible: {error}")
        print(f"{shape} bfloat16 row-major, tile {args.tile} w{args.warps} s{args.stages}")
        for name, function in subjects.items():
            forced = kabi.use(matmul=binary) if name.startswith("kabi binary") else None
            if forced is not None:
                forced.__enter__()
            try:
                function()
                error = ((c.float() - expected).abs().max() / expected.abs().max()).item()
                us = graph_time_us([function] * 20, args.replays, 0)
                print(f"  {name:55s} {us:9.1f} us   max rel error {error:.1e}")
            finally:
                if forced is not None:
                    forced.__exit__(None, None, None)


if __name__ == "__main__":
    main()
