"""The decode matmul kernel: c[M, N] = a[M, K] @ b[K, N] for M <= 64, where the time is the time to read b once.

At decode sizes the weight b is the only large operand: a (M x K) and c (M x N) are a few kilobytes, so the kernel
is built around streaming b from HBM exactly once, with wide loads along whichever of its dimensions is contiguous:

- ``WEIGHT_N_BY_K=True``: b is the transposed view of an nn.Linear weight ``w[N, K]`` (``a @ w.T``), read in place
  as ``[BLOCK_N, BLOCK_K]`` tiles of w, each row a contiguous run along K;
- ``WEIGHT_N_BY_K=False``: b is a ``[K, N]`` matrix read as ``[BLOCK_K, BLOCK_N]`` tiles, rows contiguous along N.

Two ways to multiply a tile, chosen by ``USE_DOT``:

- GEMV (``USE_DOT=False``, one row of a per program, for M = 1): the products ``a[k] * b[k, n]`` are added
  element-wise into a float32 accumulator shaped like the weight tile and reduced over K once, after the loop.
- dot (``USE_DOT=True``): ``tl.dot`` on BLOCK_M = 16, 32 or 64 rows. With more than one row the GEMV form would
  read the weight once per row, and its FMAs (M per weight element) would outrun the memory system; the tensor
  cores take M rows at little cost next to the weight's stream (16 rows is 16 flops per weight byte: at 4.3 TB/s,
  under a tenth of an H200's tensor throughput).

Both loop over K with ``tl.range(..., num_stages=NUM_STAGES)``: above 1, the tiles of the next steps are queued
through cp.async into shared memory (Triton pipelines a loop without tl.dot only when the loop asks for it), which
keeps bytes in flight without holding them in registers.

The grid is (tiles of N, K slices, tiles of M); the launcher keeps all of M in one tile, so b is read once. With
SPLIT_K > 1 the K slices of a tile are added in the same launch by ``store_split_k_tile`` (``_jit_kernels.py``,
shared with the small-M kernel): each slice stores its float32 part to scratch (partial_ptr) and the last one of
the tile to arrive, counted on a zeroed int32 counter (counter_ptr), adds the parts in split order and stores c.
Offsets are 32-bit.

Example (interpreter on CPU, or a GPU), M = 1 against an nn.Linear weight ``w`` [N, K]::

    b = w.t()
    grid = (triton.cdiv(N, 8), 1, 1)
    matmul_decode_kernel[grid](a, b, c, None, None, 1, N, K, *a.stride(), *b.stride(), *c.stride(),
                               BLOCK_M=1, BLOCK_N=8, BLOCK_K=512, SPLIT_K=1, USE_DOT=False, WEIGHT_N_BY_K=True,
                               INPUT_PRECISION="ieee", NUM_STAGES=3)
"""

import triton
import triton.language as tl

from ._jit_kernels import store_split_k_tile


@triton.jit
def _gemv_row(a_ptr, b_ptr, cols, N, K, stride_ak, stride_bk, stride_bn, first_k_block, last_k_block,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WEIGHT_N_BY_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    # One row of a against the BLOCK_N columns ``cols`` of b, in float32. The accumulator has the weight tile's shape
    # and layout, so the loop body holds no reduction (no shuffles, no cross-warp exchange); K is reduced once, after
    # the loop.
    ks = tl.arange(0, BLOCK_K)
    first_ks = first_k_block * BLOCK_K + ks
    # Loaded straight into registers (NUM_STAGES = 1), a would need converting to the weight tile's layout through
    # shared memory, with a barrier, in every iteration; for w[N, K] a tile of pointers shaped like the weight's
    # (every row the same addresses, served by L1) gets the weight's layout from the start. (For w[K, N] such a
    # tile would take the layout of its own unit stride, along K, and cost a whole-tile conversion.) Pipelined
    # (NUM_STAGES > 1), a passes through shared memory anyway and is read back in the layout needed.
    if WEIGHT_N_BY_K:
        b_ptrs = b_ptr + (cols % N)[:, None] * stride_bn + first_ks[None, :] * stride_bk
        if NUM_STAGES == 1:
            a_ptrs = a_ptr + first_ks[None, :] * stride_ak + cols[:, None] * 0
        else:
            a_ptrs = a_ptr + first_ks[None, :] * stride_ak
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    else:
        b_ptrs = b_ptr + first_ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
        a_ptrs = a_ptr + first_ks[:, None] * stride_ak
        acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for k_block in tl.range(first_k_block, last_k_block, num_stages=NUM_STAGES):
        k_left = K - k_block * BLOCK_K
        if WEIGHT_N_BY_K:
            k_in_bounds = ks[None, :] < k_left
        else:
            k_in_bounds = ks[:, None] < k_left
        a = tl.load(a_ptrs, mask=k_in_bounds, other=0.0)
        b = tl.load(b_ptrs, mask=k_in_bounds, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if WEIGHT_N_BY_K:
        c = tl.sum(acc, axis=1)
    else:
        c = tl.sum(acc, axis=0)
    return c


@triton.jit
def _dot_rows(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, first_k_block,
              last_k_block, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              WEIGHT_N_BY_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    # Rows ``rows`` of a against columns ``cols`` of b, in float32.
    ks = tl.arange(0, BLOCK_K)
    first_ks = first_k_block * BLOCK_K + ks
    # Columns past the edge wrap to valid ones, so the weight needs a mask on K only; the store drops what they
    # computed. Rows of a past M (all but one of 16 at M = 1) are masked instead: zero-filled, never read.
    a_ptrs = a_ptr + rows[:, None] * stride_am + first_ks[None, :] * stride_ak
    if WEIGHT_N_BY_K:
        b_ptrs = b_ptr + (cols % N)[:, None] * stride_bn + first_ks[None, :] * stride_bk
    else:
        b_ptrs = b_ptr + first_ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in tl.range(first_k_block, last_k_block, num_stages=NUM_STAGES):
        k_left = K - k_block * BLOCK_K
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        if WEIGHT_N_BY_K:
            b = tl.trans(tl.load(b_ptrs, mask=ks[None, :] < k_left, other=0.0))
        else:
            b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def matmul_decode_kernel(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         SPLIT_K: tl.constexpr, USE_DOT: tl.constexpr, WEIGHT_N_BY_K: tl.constexpr,
                         INPUT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    # Program (tile of N, K slice, tile of M). partial_ptr and counter_ptr: see store_split_k_tile (None when
    # SPLIT_K == 1).
    split = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    k_blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_k_block = split * k_blocks_per_split
    last_k_block = min(first_k_block + k_blocks_per_split, k_blocks)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if USE_DOT:
        rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
        acc = _dot_rows(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        first_k_block, last_k_block, BLOCK_M, BLOCK_N, BLOCK_K, WEIGHT_N_BY_K, INPUT_PRECISION,
                        NUM_STAGES)
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tile_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        store_split_k_tile(acc, c_ptrs, (rows[:, None] < M) & (cols[None, :] < N), tile_offsets, partial_ptr,
                           counter_ptr, SPLIT_K, BLOCK_M * BLOCK_N)
    else:
        row = tl.program_id(2)
        acc = _gemv_row(a_ptr + row * stride_am, b_ptr, cols, N, K, stride_ak, stride_bk, stride_bn, first_k_block,
                        last_k_block, BLOCK_N, BLOCK_K, WEIGHT_N_BY_K, NUM_STAGES)
        store_split_k_tile(acc, c_ptr + row * stride_cm + cols * stride_cn, cols < N, tl.arange(0, BLOCK_N),
                           partial_ptr, counter_ptr, SPLIT_K, BLOCK_N)
