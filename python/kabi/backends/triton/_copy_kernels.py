"""The Triton copy kernel of ``triton.matmul.aligned_copies``: one pass that writes a matrix into a target of any
size, zeros where the target reaches past the source.

torch's strided copy of a 2-byte matrix whose rows start at odd addresses (a pitch that is not a multiple of 8
elements) moves about a quarter of the HBM bandwidth on the H200: 57 us for a 4093 x 4091 bfloat16 matrix padded to
4096 columns, 45 us for the product's copy back to 4099 columns (benchmarks/results/debug-aligned-copies-
nvidia-h200.txt). Here each program copies a BLOCK_ROWS x BLOCK_COLUMNS tile, the columns of a row read by
neighbouring threads, so every access is coalesced whatever the pitch. Offsets are 64-bit.

Example (interpreter on CPU, or a GPU)::

    grid = (triton.cdiv(target_rows, 8) * triton.cdiv(target_columns, 256),)
    padded_copy_kernel[grid](source, target, rows, columns, *source.stride(), target_rows, target_columns,
                             *target.stride(), BLOCK_ROWS=8, BLOCK_COLUMNS=256)
"""

import triton
import triton.language as tl


@triton.jit
def padded_copy_kernel(source_ptr, target_ptr, rows, columns, source_row_stride, source_column_stride,
                       target_rows, target_columns, target_row_stride, target_column_stride,
                       BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    # target[r, c] = source[r, c] inside the source's rows x columns, 0 elsewhere in target_rows x target_columns.
    # One program per tile, a flat grid of row bands (a 2-D grid would cap the columns at 65535 tiles).
    column_blocks = tl.cdiv(target_columns, BLOCK_COLUMNS)
    row_block = tl.program_id(0) // column_blocks
    column_block = tl.program_id(0) % column_blocks
    row = (row_block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)[:, None]
    column = (column_block * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)).to(tl.int64)[None, :]
    inside_source = (row < rows) & (column < columns)
    values = tl.load(source_ptr + row * source_row_stride + column * source_column_stride, mask=inside_source,
                     other=0.0)
    inside_target = (row < target_rows) & (column < target_columns)
    tl.store(target_ptr + row * target_row_stride + column * target_column_stride, values, mask=inside_target)
