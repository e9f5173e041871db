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
SPLIT_K > 1 each K slice writes float32 partial sums to a ``[SPLIT_K, M, N]`` buffer that ``split_k_sum_kernel``
adds up in a second, deterministic pass. On a GPU (``PDL=True``) the two form a programmatic dependent launch: every
program of the first calls ``gdc_launch_dependents`` as it starts, so the sum's programs are launched while the
weight still streams and wait (``gdc_wait``) only for the first kernel's results, instead of paying a launch after
it ends. Only the sum is launched with ``launch_pdl``; the decode kernel waits for whatever ran before it as any
kernel does. Offsets are 32-bit.

Example (interpreter on CPU, or a GPU), M = 1 against an nn.Linear weight ``w`` [N, K]::

    b = w.t()
    grid = (triton.cdiv(N, 8), 1, 1)
    matmul_decode_kernel[grid](a, b, c, 1, N, K, *a.stride(), *b.stride(), *c.stride(), 0,
                               BLOCK_M=1, BLOCK_N=8, BLOCK_K=512, SPLIT_K=1, USE_DOT=False, WEIGHT_N_BY_K=True,
                               INPUT_PRECISION="ieee", NUM_STAGES=3, PDL=False)
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def _gemv_row(a_ptr, b_ptr, out_ptr, N, K, stride_ak, stride_bk, stride_bn, stride_on, first_k_block,
              last_k_block, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WEIGHT_N_BY_K: tl.constexpr,
              NUM_STAGES: tl.constexpr):
    # One row of a against BLOCK_N columns of b. The accumulator has the weight tile's shape and layout, so the
    # loop body holds no reduction (no shuffles, no cross-warp exchange); K is reduced once, after the loop.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
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
    tl.store(out_ptr + cols * stride_on, c.to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _dot_rows(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
              first_k_block, last_k_block, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              WEIGHT_N_BY_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
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
    out_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_decode_kernel(a_ptr, b_ptr, out_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on, stride_split,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         SPLIT_K: tl.constexpr, USE_DOT: tl.constexpr, WEIGHT_N_BY_K: tl.constexpr,
                         INPUT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr, PDL: tl.constexpr):
    # Program (tile of N, K slice, tile of M). out is c itself when SPLIT_K == 1, else the float32 partial-sum
    # buffer, one [M, N] slice per split (stride_split apart); the stores convert to whichever it is.
    if PDL and SPLIT_K > 1:
        gdc_launch_dependents()
    split = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    k_blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_k_block = split * k_blocks_per_split
    last_k_block = min(first_k_block + k_blocks_per_split, k_blocks)
    out_ptr += split * stride_split
    if USE_DOT:
        _dot_rows(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
                  first_k_block, last_k_block, BLOCK_M, BLOCK_N, BLOCK_K, WEIGHT_N_BY_K, INPUT_PRECISION, NUM_STAGES)
    else:
        row = tl.program_id(2)
        _gemv_row(a_ptr + row * stride_am, b_ptr, out_ptr + row * stride_om, N, K, stride_ak, stride_bk, stride_bn,
                  stride_on, first_k_block, last_k_block, BLOCK_N, BLOCK_K, WEIGHT_N_BY_K, NUM_STAGES)


@triton.jit
def split_k_sum_kernel(partial_ptr, c_ptr, M, N, stride_cm, stride_cn,
                       SPLIT_K: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    # c[m, n] = the sum over splits of partial[split, m, n] (contiguous float32), in split order: deterministic.
    # Launched with launch_pdl when PDL: it may start before the decode kernel ends, and waits for its results here.
    if PDL:
        gdc_wait()
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < M * N
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT_K):
        total += tl.load(partial_ptr + split * M * N + offsets, mask=in_bounds, other=0.0)
    rows = offsets // N
    cols = offsets % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, total.to(c_ptr.dtype.element_ty), mask=in_bounds)
