"""The Triton matmul kernels: c[M, N] = a[M, K] @ b[K, N], accumulated in float32, stored in c's dtype.

Three families, each a ``@triton.jit`` function that Python launches (``_families.py``) and that
``compile_to_binary`` turns into a cubin with a launch manifest:

- ``matmul_tiled_kernel``: one program per BLOCK_M x BLOCK_N tile of c, tiles visited in groups of GROUP_M rows
  so that neighbouring programs share tiles of b in L2. Pointer loads with masks on K; any strides. sm_80+.
- ``matmul_persistent_tma_kernel``: Hopper. One program per SM loops over the tiles; a, b and c move through
  device-side tensor descriptors (TMA), which clip and zero-fill at the edges so no masks are needed. sm_90.
  Compiled for a device binary, it also carries a pointer-load path for row pitches TMA cannot take.
- ``matmul_small_m_kernel``: decode shapes (M <= 64). One program per (BLOCK_N columns, K slice, BLOCK_M rows):
  narrow N tiles and a split of K give enough programs to keep every SM streaming b. With SPLIT_K > 1 each slice
  writes float32 partial sums to a [SPLIT_K, M, N] buffer and ``split_k_reduce_kernel`` adds them in a second
  pass: deterministic, unlike atomics on float32, and needs no zeroed buffer.

All offsets are 32-bit: ``KernelFamily.launch`` refuses operands that span 2**31 elements or more.
Example (interpreter on CPU, or a GPU)::

    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
    matmul_tiled_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                              BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, INPUT_PRECISION="ieee",
                              CHECK_ROW_PITCHES=False)
"""

import triton
import triton.language as tl


@triton.jit
def _grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Consecutive tile ids walk down a band of GROUP_M tile rows before moving right, so programs running at the
    # same time read the same columns of b (L2 reuse) instead of sweeping all of b once per tile row.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_band = GROUP_M * tiles_n
    band = tile_id // tiles_per_band
    first_tile_m = band * GROUP_M
    band_height = min(tiles_m - first_tile_m, GROUP_M)
    tile_m = first_tile_m + (tile_id % tiles_per_band) % band_height
    tile_n = (tile_id % tiles_per_band) // band_height
    return tile_m, tile_n


@triton.jit
def _tiled_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                INPUT_PRECISION: tl.constexpr):
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows and columns past the edge wrap around to valid ones, so the K loop needs a mask on K only; the store
    # below drops what they computed.
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
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr, CHECK_ROW_PITCHES: tl.constexpr):
    # Loads vectorize (and pipeline through cp.async) only when Triton knows that rows start 16 bytes apart and
    # that N and K keep the edge masks constant over 16-byte runs. The JIT learns it from the values it
    # specializes on; a device binary cannot (CHECK_ROW_PITCHES=True, row-major operands): it checks at run time
    # and, when they hold, rewrites each value as (value // multiple) * multiple, equal but with a divisibility
    # Triton can see.
    if CHECK_ROW_PITCHES:
        multiple = 128 // a_ptr.dtype.element_ty.primitive_bitwidth
        if ((stride_am % multiple == 0) & (stride_bk % multiple == 0) & (stride_cm % multiple == 0)
                & (N % multiple == 0) & (K % multiple == 0)):
            _tiled_tile(a_ptr, b_ptr, c_ptr, M, (N // multiple) * multiple, (K // multiple) * multiple,
                        (stride_am // multiple) * multiple, stride_ak, (stride_bk // multiple) * multiple, stride_bn,
                        (stride_cm // multiple) * multiple, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                        INPUT_PRECISION)
        else:
            _tiled_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION)
    else:
        _tiled_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION)


@triton.jit
def _tma_tiles(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               A_COLUMN_MAJOR: tl.constexpr, B_COLUMN_MAJOR: tl.constexpr):
    # A column-major operand is described as the row-major transpose it is stored as and transposed after the
    # load, which the MMA reads for free.
    if A_COLUMN_MAJOR:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_a, 1], block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_COLUMN_MAJOR:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1], block_shape=[BLOCK_M, BLOCK_N])

    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    for tile_id in range(tl.program_id(0), num_tiles, num_programs):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offset_m = tile_m * BLOCK_M
        offset_n = tile_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_block in range(0, k_blocks):
            offset_k = k_block * BLOCK_K
            if A_COLUMN_MAJOR:
                a = a_desc.load([offset_k, offset_m]).T
            else:
                a = a_desc.load([offset_m, offset_k])
            if B_COLUMN_MAJOR:
                b = b_desc.load([offset_n, offset_k]).T
            else:
                b = b_desc.load([offset_k, offset_n])
            acc = tl.dot(a, b, acc)
        c_desc.store([offset_m, offset_n], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def _pointer_tiles(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   A_COLUMN_MAJOR: tl.constexpr, B_COLUMN_MAJOR: tl.constexpr):
    # The same tiles as _tma_tiles through masked pointer loads, for row pitches TMA cannot take.
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    for tile_id in range(tl.program_id(0), num_tiles, num_programs):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if A_COLUMN_MAJOR:
            a_ptrs = a_ptr + (rows % M)[:, None] + ks[None, :] * stride_a
            a_step = BLOCK_K * stride_a
        else:
            a_ptrs = a_ptr + (rows % M)[:, None] * stride_a + ks[None, :]
            a_step = BLOCK_K
        if B_COLUMN_MAJOR:
            b_ptrs = b_ptr + ks[:, None] + (cols % N)[None, :] * stride_b
            b_step = BLOCK_K
        else:
            b_ptrs = b_ptr + ks[:, None] * stride_b + (cols % N)[None, :]
            b_step = BLOCK_K * stride_b
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_block in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k_block * BLOCK_K
            a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += a_step
            b_ptrs += b_step
        c_ptrs = c_ptr + rows[:, None] * stride_c + cols[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_persistent_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, A_COLUMN_MAJOR: tl.constexpr,
                                 B_COLUMN_MAJOR: tl.constexpr, CHECK_PITCHES: tl.constexpr):
    # stride_a/stride_b/stride_c are the leading (non-unit) strides. TMA needs them to be 16-byte multiples. The
    # Python launcher guarantees that (CHECK_PITCHES=False); a device binary cannot declare it to the core, so it
    # checks at run time and falls back to pointer loads (CHECK_PITCHES=True).
    if CHECK_PITCHES:
        pitch_multiple = 128 // a_ptr.dtype.element_ty.primitive_bitwidth
        if (stride_a % pitch_multiple == 0) & (stride_b % pitch_multiple == 0) & (stride_c % pitch_multiple == 0):
            _tma_tiles(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_COLUMN_MAJOR, B_COLUMN_MAJOR)
        else:
            _pointer_tiles(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
                           BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_COLUMN_MAJOR, B_COLUMN_MAJOR)
    else:
        _tma_tiles(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c, num_programs,
                   BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_COLUMN_MAJOR, B_COLUMN_MAJOR)


@triton.jit
def _small_m_tile(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on,
                  stride_split, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  SPLIT_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    # out is c itself when SPLIT_K == 1, else the float32 partial-sum buffer with one [M, N] slice per split
    # (stride_split apart); the store converts to whichever it is.
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    tile_m = tl.program_id(2)
    k_blocks = tl.cdiv(K, BLOCK_K)
    k_blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_k_block = split * k_blocks_per_split
    last_k_block = min(first_k_block + k_blocks_per_split, k_blocks)

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_in_bounds = rows % M
    cols_in_bounds = cols % N
    ks = first_k_block * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows_in_bounds[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_in_bounds[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(first_k_block, last_k_block):
        k_left = K - k_block * BLOCK_K
        k_in_block = tl.arange(0, BLOCK_K)
        a = tl.load(a_ptrs, mask=k_in_block[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=k_in_block[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    out_ptrs = out_ptr + split * stride_split + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_small_m_kernel(a_ptr, b_ptr, out_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_om, stride_on, stride_split,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          SPLIT_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, CHECK_ROW_PITCHES: tl.constexpr):
    # CHECK_ROW_PITCHES: as in matmul_tiled_kernel.
    if CHECK_ROW_PITCHES:
        multiple = 128 // a_ptr.dtype.element_ty.primitive_bitwidth
        if ((stride_am % multiple == 0) & (stride_bk % multiple == 0) & (stride_om % multiple == 0)
                & (N % multiple == 0) & (K % multiple == 0)):
            _small_m_tile(a_ptr, b_ptr, out_ptr, M, (N // multiple) * multiple, (K // multiple) * multiple,
                          (stride_am // multiple) * multiple, stride_ak, (stride_bk // multiple) * multiple,
                          stride_bn, (stride_om // multiple) * multiple, stride_on, stride_split, BLOCK_M, BLOCK_N,
                          BLOCK_K, SPLIT_K, INPUT_PRECISION)
        else:
            _small_m_tile(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om,
                          stride_on, stride_split, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, INPUT_PRECISION)
    else:
        _small_m_tile(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om,
                      stride_on, stride_split, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, INPUT_PRECISION)


@triton.jit
def split_k_reduce_kernel(partial_ptr, c_ptr, M, N, stride_cm, stride_cn,
                          SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    # partial is [SPLIT_K, M, N], contiguous float32; c[m, n] = sum over splits, in c's dtype.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < M * N
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT_K):
        total += tl.load(partial_ptr + split * M * N + offsets, mask=in_bounds, other=0.0)
    rows = offsets // N
    cols = offsets % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, total.to(c_ptr.dtype.element_ty), mask=in_bounds)
