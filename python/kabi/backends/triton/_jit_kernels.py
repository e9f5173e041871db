"""The Triton matmul kernels: c[M, N] = a[M, K] @ b[K, N], accumulated in float32, stored in c's dtype.

Three families, each a ``@triton.jit`` function that Python launches (``_families.py``) and that
``compile_to_binary`` turns into a cubin with a launch manifest:

- ``matmul_tiled_kernel``: one program per BLOCK_M x BLOCK_N tile of c, tiles visited in groups of GROUP_M rows
  so that neighbouring programs share tiles of b in L2. Pointer loads with masks on K; any strides. sm_80+.
- ``matmul_persistent_tma_kernel``: Hopper. One program per SM loops over the tiles; a, b and c move through
  device-side tensor descriptors (TMA), which clip and zero-fill at the edges so no masks are needed. sm_90.
  Compiled for a device binary, it also carries a pointer-load path for row pitches TMA cannot take.
- ``matmul_small_m_kernel``: decode shapes (M <= 64). One program per (BLOCK_N columns, K slice, BLOCK_M rows):
  narrow N tiles and a split of K give enough programs to keep every SM streaming b. With SPLIT_K > 1 the slices
  of a tile are added in the same launch (serial split-K, ``store_split_k_tile``, which the decode kernel shares):
  each slice stores its float32 part to scratch, and the last of a tile's slices to arrive adds them in split
  order (deterministic, unlike float32 atomics on c) and stores c. One launch, so a device binary can describe it
  (a scratch and a zeroed-scratch parameter in its manifest) and a call pays no second launch.

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
def store_split_k_tile(acc, c_ptrs, c_mask, tile_offsets, partial_ptr, counter_ptr, SPLIT_K: tl.constexpr,
                       TILE_SIZE: tl.constexpr):
    # Stores a program's float32 tile of c (acc; c_ptrs, c_mask and tile_offsets, each shaped like it: where each
    # element goes in c, which exist, and its place in a TILE_SIZE tile). Programs are (tile of N, K slice, tile of
    # M). With SPLIT_K > 1 acc is one K slice's part (serial split-K, one launch): each program writes it to its own
    # slot of partial_ptr (scratch of TILE_SIZE floats per program, the SPLIT_K slots of a tile side by side) and
    # counts itself in on the tile's counter (counter_ptr, int32, zero at the launch's start); the program that
    # arrives last adds the SPLIT_K slots in split order, so the sum does not depend on which split ran last, stores
    # c and sets the counter back to zero for the next launch.
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptrs.dtype.element_ty), mask=c_mask)
    else:
        tile = tl.program_id(2) * tl.num_programs(0) + tl.program_id(0)
        slots = partial_ptr + tile * (SPLIT_K * TILE_SIZE) + tile_offsets
        # Only the elements c has: a 16-row tile at M = 1 would otherwise move 16 times the bytes it needs.
        tl.store(slots + tl.program_id(1) * TILE_SIZE, acc, mask=c_mask)
        # Every thread's part is stored before the one thread that performs a scalar atomic publishes it: the
        # barrier orders the program's stores before the atomic, whose release (gpu scope) makes them visible to
        # the program that acquires the count after them.
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            # .cg reads from L2, where the other programs' parts are, never a line this SM's L1 kept.
            total = tl.load(slots, mask=c_mask, other=0.0, cache_modifier=".cg")
            for split in tl.static_range(1, SPLIT_K):
                total += tl.load(slots + split * TILE_SIZE, mask=c_mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptrs.dtype.element_ty), mask=c_mask)
            tl.store(counter_ptr + tile, 0)


@triton.jit
def _small_m_tile(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                  stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
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
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tile_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    store_split_k_tile(acc, c_ptrs, (rows[:, None] < M) & (cols[None, :] < N), tile_offsets, partial_ptr,
                       counter_ptr, SPLIT_K, BLOCK_M * BLOCK_N)


@triton.jit
def matmul_small_m_kernel(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          SPLIT_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, CHECK_ROW_PITCHES: tl.constexpr):
    # partial_ptr and counter_ptr: see store_split_k_tile (None when SPLIT_K == 1). CHECK_ROW_PITCHES: as in
    # matmul_tiled_kernel.
    if CHECK_ROW_PITCHES:
        multiple = 128 // a_ptr.dtype.element_ty.primitive_bitwidth
        if ((stride_am % multiple == 0) & (stride_bk % multiple == 0) & (stride_cm % multiple == 0)
                & (N % multiple == 0) & (K % multiple == 0)):
            _small_m_tile(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, (N // multiple) * multiple,
                          (K // multiple) * multiple, (stride_am // multiple) * multiple, stride_ak,
                          (stride_bk // multiple) * multiple, stride_bn, (stride_cm // multiple) * multiple,
                          stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, INPUT_PRECISION)
        else:
            _small_m_tile(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                          stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, INPUT_PRECISION)
    else:
        _small_m_tile(a_ptr, b_ptr, c_ptr, partial_ptr, counter_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                      stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, INPUT_PRECISION)
