"""The persistent grouped GEMM kernel of ``grouped_mm``: one product per group (expert) over its rows.

A fixed number of programs (one per SM on a GPU) walks one work list of (group, tile) items: the groups in order,
each contributing cdiv(rows, BLOCK_M) * cdiv(N, BLOCK_N) tiles, item i going to program i % num_programs. Every
program computes the list from the offsets itself (one scalar load per group), so the launch needs no host copy of
them and the same launch is valid inside a CUDA graph whatever routing the offsets hold later.

The form is the offsets pointer's: given, x is [R, K] and the offsets route its rows (2-D form); None (a Python
launch, specialized when compiling) or NULL at run time (a device binary's launch of the 3-D form: the core passes
NULL for an absent optional input), x is [E, R, K] and every group has R rows. So one binary serves both forms.

Offsets are never trusted: group g's rows are [end of g-1, offs[g]] clamped into [end of g-1, R], so no values make
the kernel read or write outside x and out. Rows past the last offset (a "tail" item after the last group) are
written as zeros.

Two ways to read the operands: masked pointer loads through any strides, or (``USE_TMA``, sm_90) device-side tensor
descriptors, which zero-fill past each tensor's edge; x's rows past a group's end are then the next group's rows (or
zeros), which only feed output rows the masked store drops. w is [E, K, N] or the transposed view of an nn.Linear
[E, N, K] weight (``W_N_BY_K``), read in place either way. Offsets into a group are 64-bit, so no size of x, w or out
overflows them.

``TAIL_M`` > 0 (a config's ``tail_m``) lets a group's last row tile take up to TAIL_M rows past its BLOCK_M, computed
in the same K loop as a swapped product (the weight tile as the MMA's M side, the extra rows as its N side), so a
group a little taller than BLOCK_M costs one tile and one pass over its weights instead of two tiles, the second
nearly empty. Absorbing only removes items, so the item counts of a launch without a tail bound those with one.

``SHORT_M`` > 0 (a config's ``short_m``, not with a tail) runs a group's last row tile, when at most SHORT_M rows are
left for it, as a separate SHORT_M x BLOCK_N tile (its own accumulator and, with TMA, its own x descriptor), so a
remainder of a few rows costs a half or quarter tile of MMA work. Every other tile runs the code of the config without
it, with no second accumulator beside its own (a tail's costs every tile registers: 255 and a spill for 32 rows past
a 128x256 tile); the work items are the same.

Example (interpreter on CPU, or a GPU)::

    grouped_mm_kernel[(num_programs,)](x, w, offs, out, E, T, N, K, 0, *x.stride(), *w.stride(), 0,
                                       *out.stride(), num_programs, USE_TMA=False, ...)
"""

import triton
import triton.language as tl


@triton.jit
def _tile_product(x_ptr, w_ptr, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end, col_start, N, K,
                  stride_xm, stride_xk, stride_wk, stride_wn, k_blocks,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TAIL_M: tl.constexpr,
                  USE_TMA: tl.constexpr, W_N_BY_K: tl.constexpr, DOT_IN_FLOAT32: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr):
    # The float32 product of one BLOCK_M x BLOCK_N tile of a group (k_blocks is 0 for the tail's zero tiles) and,
    # when TAIL_M > 0, of the TAIL_M rows after it as a BLOCK_N x TAIL_M tile: w times those rows' transpose.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Without a tail (TAIL_M 0) a 16-column placeholder, which nothing reads, so the compiler drops it.
    tail_acc = tl.zeros((BLOCK_N, TAIL_M if TAIL_M > 0 else 16), dtype=tl.float32)
    if USE_TMA:
        for k_block in range(0, k_blocks):
            offset_k = k_block * BLOCK_K
            x = x_desc.load([x_group, row_start, offset_k]).reshape(BLOCK_M, BLOCK_K)
            if W_N_BY_K:
                w = w_desc.load([w_group, col_start, offset_k]).reshape(BLOCK_N, BLOCK_K).T
            else:
                w = w_desc.load([w_group, offset_k, col_start]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
            if TAIL_M > 0:
                x_tail = x_tail_desc.load([x_group, row_start + BLOCK_M, offset_k]).reshape(TAIL_M, BLOCK_K)
                tail_acc = tl.dot(w.T, x_tail.T, tail_acc, input_precision=INPUT_PRECISION)
    else:
        rows = row_start + tl.arange(0, BLOCK_M)
        cols = col_start + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm + ks[None, :] * stride_xk
        w_ptrs = w_ptr + ks.to(tl.int64)[:, None] * stride_wk + cols.to(tl.int64)[None, :] * stride_wn
        x_step = BLOCK_K * tl.cast(stride_xk, tl.int64)
        w_step = BLOCK_K * tl.cast(stride_wk, tl.int64)
        row_mask = rows[:, None] < end
        col_mask = cols[None, :] < N
        tail_rows = row_start + BLOCK_M + tl.arange(0, TAIL_M if TAIL_M > 0 else 16)
        tail_ptrs = x_ptr + tail_rows.to(tl.int64)[:, None] * stride_xm + ks[None, :] * stride_xk
        tail_mask = tail_rows[:, None] < end
        for k_block in range(0, k_blocks):
            k_left = K - k_block * BLOCK_K
            x = tl.load(x_ptrs, mask=row_mask & (ks[None, :] < k_left), other=0.0)
            w = tl.load(w_ptrs, mask=(ks[:, None] < k_left) & col_mask, other=0.0)
            if DOT_IN_FLOAT32:
                # Triton's CPU interpreter multiplies bfloat16 operands as raw bit patterns.
                x = x.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
            if TAIL_M > 0:
                x_tail = tl.load(tail_ptrs, mask=tail_mask & (ks[None, :] < k_left), other=0.0)
                if DOT_IN_FLOAT32:
                    x_tail = x_tail.to(tl.float32)
                tail_acc = tl.dot(w.T, x_tail.T, tail_acc, input_precision=INPUT_PRECISION)
                tail_ptrs += x_step
            x_ptrs += x_step
            w_ptrs += w_step
    return acc, tail_acc


@triton.jit
def _store_tile(out_base, acc, row_start, end, col_start, N, stride_om, stride_on,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = row_start + tl.arange(0, BLOCK_M)
    cols = col_start + tl.arange(0, BLOCK_N)
    out_ptrs = out_base + rows.to(tl.int64)[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_base.dtype.element_ty), mask=(rows[:, None] < end) & (cols[None, :] < N))


@triton.jit
def _item(x_base, w_base, out_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end, col_start, N, K,
          stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, k_blocks,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TAIL_M: tl.constexpr,
          USE_TMA: tl.constexpr, W_N_BY_K: tl.constexpr, DOT_IN_FLOAT32: tl.constexpr,
          INPUT_PRECISION: tl.constexpr):
    # One work item: its tile (and, with TAIL_M > 0, the TAIL_M rows after it) computed and stored.
    acc, tail_acc = _tile_product(x_base, w_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end,
                                  col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, k_blocks,
                                  BLOCK_M, BLOCK_N, BLOCK_K, TAIL_M, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32,
                                  INPUT_PRECISION)
    if TAIL_M > 0:
        _store_tile(out_base, tail_acc.T, row_start + BLOCK_M, end, col_start, N, stride_om, stride_on, TAIL_M,
                    BLOCK_N)
    _store_tile(out_base, acc, row_start, end, col_start, N, stride_om, stride_on, BLOCK_M, BLOCK_N)


@triton.jit
def grouped_mm_kernel(x_ptr, w_ptr, offs_ptr, out_ptr, E, R, N, K,
                      stride_xe, stride_xm, stride_xk, stride_we, stride_wk, stride_wn,
                      stride_oe, stride_om, stride_on, num_programs,
                      USE_TMA: tl.constexpr, W_N_BY_K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      DOT_IN_FLOAT32: tl.constexpr, INPUT_PRECISION: tl.constexpr, TAIL_M: tl.constexpr,
                      SHORT_M: tl.constexpr):
    # 2-D form (offsets given): x [R, K] and out [R, N] (stride_xe and stride_oe unused), group g's rows from offs.
    # 3-D form: x [E, R, K] and out [E, R, N], every group R rows.
    pid = tl.program_id(0)
    if offs_ptr is None:
        has_offsets = False
    else:
        has_offsets = offs_ptr.to(tl.int1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    full_k_blocks = tl.cdiv(K, BLOCK_K)
    # The 2-D form's x is one matrix; a group stride of 0 also reads one matrix for every group (one group, or a
    # broadcast).
    x_group_stride = tl.where(has_offsets, 0, stride_xe)
    out_group_stride = tl.where(has_offsets, 0, stride_oe)
    x_shared = x_group_stride == 0
    w_shared = stride_we == 0
    x_desc = None
    x_tail_desc = None
    x_short_desc = None
    w_desc = None
    if USE_TMA:
        # TMA takes no stride of 0: a shared group dimension becomes one group, read at coordinate 0, with the stride
        # of a dense stack of matrices, which no load steps by.
        x_groups = tl.where(x_shared, 1, E)
        x_group_pitch = tl.where(x_shared, tl.cast(R, tl.int64) * stride_xm, x_group_stride)
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[x_groups, R, K], strides=[x_group_pitch, stride_xm, 1],
                                           block_shape=[1, BLOCK_M, BLOCK_K])
        if TAIL_M > 0:
            x_tail_desc = tl.make_tensor_descriptor(x_ptr, shape=[x_groups, R, K],
                                                    strides=[x_group_pitch, stride_xm, 1],
                                                    block_shape=[1, TAIL_M, BLOCK_K])
        if SHORT_M > 0:
            x_short_desc = tl.make_tensor_descriptor(x_ptr, shape=[x_groups, R, K],
                                                     strides=[x_group_pitch, stride_xm, 1],
                                                     block_shape=[1, SHORT_M, BLOCK_K])
        if W_N_BY_K:
            w_desc = tl.make_tensor_descriptor(
                w_ptr, shape=[tl.where(w_shared, 1, E), N, K],
                strides=[tl.where(w_shared, tl.cast(N, tl.int64) * stride_wn, stride_we), stride_wn, 1],
                block_shape=[1, BLOCK_N, BLOCK_K])
        else:
            w_desc = tl.make_tensor_descriptor(
                w_ptr, shape=[tl.where(w_shared, 1, E), K, N],
                strides=[tl.where(w_shared, tl.cast(K, tl.int64) * stride_wk, stride_we), stride_wk, 1],
                block_shape=[1, BLOCK_K, BLOCK_N])
    tile_base = 0
    start = 0
    # With offsets, item E is the tail: the rows past the last offset, written as zeros.
    for group in range(0, tl.where(has_offsets, E + 1, E)):
        start = tl.where(has_offsets, start, 0)
        if offs_ptr is None:
            end = R
        else:
            routed_end = tl.load(offs_ptr + group, mask=has_offsets & (group < E), other=R)
            end = tl.minimum(tl.maximum(routed_end, start), R)
        x_base = x_ptr + tl.cast(group, tl.int64) * x_group_stride
        out_base = out_ptr + tl.cast(group, tl.int64) * out_group_stride
        k_blocks = tl.where(group < E, full_k_blocks, 0)
        tiles_m = tl.cdiv(end - start, BLOCK_M)
        if TAIL_M > 0:
            # The last row tile absorbs a remainder of at most TAIL_M rows.
            absorbed = (tiles_m > 1) & (end - start - (tiles_m - 1) * BLOCK_M <= TAIL_M)
            tiles_m = tl.where(absorbed, tiles_m - 1, tiles_m)
        group_tiles = tiles_m * tiles_n
        # This program's items of the group: those whose index in the whole list is pid modulo num_programs.
        first = tile_base + ((pid - tile_base) % num_programs + num_programs) % num_programs
        for item in range(first, tile_base + group_tiles, num_programs):
            local = item - tile_base
            tile_m = local // tiles_n
            tile_n = local % tiles_n
            row_start = start + tile_m * BLOCK_M
            col_start = tile_n * BLOCK_N
            w_base = w_ptr + tl.cast(group, tl.int64) * stride_we
            x_group = tl.where(x_shared, 0, group)
            w_group = tl.where(w_shared, 0, group)
            # Only the last row tile reaches past BLOCK_M rows, and then by at most TAIL_M.
            if TAIL_M > 0:
                if end - row_start > BLOCK_M:
                    _item(x_base, w_base, out_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end,
                          col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, k_blocks,
                          BLOCK_M, BLOCK_N, BLOCK_K, TAIL_M, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32, INPUT_PRECISION)
                else:
                    _item(x_base, w_base, out_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end,
                          col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, k_blocks,
                          BLOCK_M, BLOCK_N, BLOCK_K, 0, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32, INPUT_PRECISION)
            elif SHORT_M > 0:
                # Only a group's last row tile (or the tail's) can have SHORT_M rows or fewer left.
                if end - row_start <= SHORT_M:
                    _item(x_base, w_base, out_base, x_short_desc, x_tail_desc, w_desc, x_group, w_group, row_start,
                          end, col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on,
                          k_blocks, SHORT_M, BLOCK_N, BLOCK_K, 0, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32, INPUT_PRECISION)
                else:
                    _item(x_base, w_base, out_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end,
                          col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, k_blocks,
                          BLOCK_M, BLOCK_N, BLOCK_K, 0, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32, INPUT_PRECISION)
            else:
                _item(x_base, w_base, out_base, x_desc, x_tail_desc, w_desc, x_group, w_group, row_start, end,
                      col_start, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om, stride_on, k_blocks,
                      BLOCK_M, BLOCK_N, BLOCK_K, 0, USE_TMA, W_N_BY_K, DOT_IN_FLOAT32, INPUT_PRECISION)
        tile_base += group_tiles
        start = end
