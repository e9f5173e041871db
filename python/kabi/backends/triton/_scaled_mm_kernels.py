"""The Triton FP8 GEMM: out[M, N] = (scale_a * a[M, K]) @ (scale_b * b[K, N]) + bias[N], rounded once to out's dtype.

Two kernels: ``scaled_mm_kernel`` reads through pointers (any strides, sm_89 and later), and
``scaled_mm_persistent_tma_kernel`` is Hopper's (sm_90): persistent programs, TMA loads and stores.

``scaled_mm_kernel``: one program per BLOCK_M x BLOCK_N tile of out, tiles visited in bands of GROUP_M rows
(``_grouped_tile``, shared with the matmul kernels). tl.dot takes the FP8 tiles as they are: on sm_90 it becomes
wgmma with FP8 operands (QGMMA, its FP8 form, in the SASS), on sm_89 the FP8 mma, both accumulating in float32.
Hopper's FP8 wgmma keeps fewer accumulator bits than float32 (Triton's default there accumulates a whole K that
way: 1.2e-3 relative error at K = 4096 on the H200, four times a float32 output's tolerance), so each BLOCK_K
step's product is added to the float32 accumulator on its own (``max_num_imprecise_acc=BLOCK_K``), as
torch._scaled_mm does without fast accumulation. The
scales are applied once, to the accumulator, then the bias, so the epilogue costs no pass over memory and no extra
rounding. A scale is read through its stride along out's rows (scale_a) or columns (scale_b): a row-wise scale's, or 0
for a per-tensor one, whose one float every row then reads; so one image serves both kinds (a device binary gets 0 from
the core for the dimension a [] scale lacks). The bias is optional: the JIT folds out a None one, a device binary
tests its pointer, NULL when the call has none. b is read through
its strides; its fast layout is the transposed view of an [N, K] weight (K contiguous), the operand layout wgmma
wants for FP8. Triton's CPU interpreter multiplies float8_e4m3fn and float8_e5m2 tiles correctly (unlike bfloat16
ones), so both kernels run there as they are.

Example (interpreter on CPU, or a GPU)::

    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    scaled_mm_kernel[grid](a, b, scale_a, scale_b, bias, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                           0, scale_b.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8)
"""

import triton
import triton.language as tl

from ._jit_kernels import _grouped_tile


@triton.jit
def _scale_and_bias(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, stride_scale_a, stride_scale_b):
    # rows and cols are in bounds (wrapped at the edges); a per-tensor scale's stride is 0, so every row or column
    # reads its one float.
    acc *= tl.load(scale_a_ptr + rows * stride_scale_a)[:, None]
    acc *= tl.load(scale_b_ptr + cols * stride_scale_b)[None, :]
    # A None bias (the JIT's specialization of an absent one) has no code; a binary's bias pointer is NULL when the
    # call has none, which one uniform branch tests (the interpreter's masks take no pointer comparison).
    if bias_ptr is not None:
        if bias_ptr.to(tl.int1):
            acc += tl.load(bias_ptr + cols).to(tl.float32)[None, :]
    return acc


@triton.jit
def scaled_mm_kernel(a_ptr, b_ptr, scale_a_ptr, scale_b_ptr, bias_ptr, out_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on, stride_scale_a, stride_scale_b,
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
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = _scale_and_bias(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows_in_bounds, cols_in_bounds, stride_scale_a,
                          stride_scale_b)
    out_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def scaled_mm_persistent_tma_kernel(a_ptr, b_ptr, scale_a_ptr, scale_b_ptr, bias_ptr, out_ptr, M, N, K,
                                    stride_am, stride_bn, stride_om, stride_scale_a, stride_scale_b, num_programs,
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
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        rows = (offset_m + tl.arange(0, BLOCK_M)) % M
        cols = (offset_n + tl.arange(0, BLOCK_N)) % N
        acc = _scale_and_bias(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, stride_scale_a, stride_scale_b)
        out_desc.store([offset_m, offset_n], acc.to(out_ptr.dtype.element_ty))
