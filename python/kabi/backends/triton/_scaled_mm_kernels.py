"""The Triton FP8 GEMM: out[M, N] = (scale_a * a[M, K]) @ (scale_b * b[K, N]) + bias[N], rounded once to out's dtype.

Two kernels: ``scaled_mm_kernel`` reads through pointers (any strides, sm_89 and later), and
``scaled_mm_persistent_tma_kernel`` is Hopper's (sm_90): persistent programs, TMA loads and stores.

``scaled_mm_kernel``: one program per BLOCK_M x BLOCK_N tile of out, tiles visited in bands of GROUP_M rows
(``_grouped_tile``, shared with the matmul kernels). tl.dot takes the FP8 tiles as they are: on sm_90 it becomes
wgmma with FP8 operands (QGMMA, its FP8 form, in the SASS), on sm_89 the FP8 mma, both accumulating in float32. The
scales are applied once, to the accumulator (a per-tensor scale as one float, a row-wise one as a column of M or a
row of N floats), then the bias, so the epilogue costs no pass over memory and no extra rounding. b is read through
its strides; its fast layout is the transposed view of an [N, K] weight (K contiguous), the operand layout wgmma
wants for FP8. Triton's CPU interpreter multiplies float8_e4m3fn and float8_e5m2 tiles correctly (unlike bfloat16
ones), so both kernels run there as they are.

Example (interpreter on CPU, or a GPU)::

    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    scaled_mm_kernel[grid](a, b, scale_a, scale_b, bias, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                           ROW_SCALE_A=False, ROW_SCALE_B=True, HAS_BIAS=True, BLOCK_M=128, BLOCK_N=128,
                           BLOCK_K=128, GROUP_M=8)
"""

import triton
import triton.language as tl

from ._jit_kernels import _grouped_tile


@triton.jit
def scaled_mm_kernel(a_ptr, b_ptr, scale_a_ptr, scale_b_ptr, bias_ptr, out_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
                     ROW_SCALE_A: tl.constexpr, ROW_SCALE_B: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows and columns past the edge wrap around to valid ones, so the K loop, the scales and the bias need no row
    # or column mask; the store drops what they computed.
    rows_in_bounds = rows % M
    cols_in_bounds = cols % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows_in_bounds[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_in_bounds[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k_block * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if ROW_SCALE_A:
        acc *= tl.load(scale_a_ptr + rows_in_bounds)[:, None]
    else:
        acc *= tl.load(scale_a_ptr)
    if ROW_SCALE_B:
        acc *= tl.load(scale_b_ptr + cols_in_bounds)[None, :]
    else:
        acc *= tl.load(scale_b_ptr)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols_in_bounds).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def scaled_mm_persistent_tma_kernel(a_ptr, b_ptr, scale_a_ptr, scale_b_ptr, bias_ptr, out_ptr, M, N, K,
                                    stride_am, stride_bn, stride_om, num_programs,
                                    ROW_SCALE_A: tl.constexpr, ROW_SCALE_B: tl.constexpr, HAS_BIAS: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                    GROUP_M: tl.constexpr):
    # Hopper: one program per SM loops over the tiles; a ([M, K]), b (stored as the [N, K] weight whose transposed
    # view it is) and out move through device-side tensor descriptors (TMA), which clip and zero-fill at the edges,
    # so the K loop needs no mask. The launcher guarantees unit inner strides and 16-byte row pitches.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[stride_om, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    for tile_id in range(tl.program_id(0), num_tiles, num_programs):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offset_m = tile_m * BLOCK_M
        offset_n = tile_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_block in range(0, k_blocks):
            offset_k = k_block * BLOCK_K
            a = a_desc.load([offset_m, offset_k])
            b = b_desc.load([offset_n, offset_k]).T
            acc = tl.dot(a, b, acc)
        rows = (offset_m + tl.arange(0, BLOCK_M)) % M
        cols = (offset_n + tl.arange(0, BLOCK_N)) % N
        if ROW_SCALE_A:
            acc *= tl.load(scale_a_ptr + rows)[:, None]
        else:
            acc *= tl.load(scale_a_ptr)
        if ROW_SCALE_B:
            acc *= tl.load(scale_b_ptr + cols)[None, :]
        else:
            acc *= tl.load(scale_b_ptr)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols).to(tl.float32)[None, :]
        out_desc.store([offset_m, offset_n], acc.to(out_ptr.dtype.element_ty))
