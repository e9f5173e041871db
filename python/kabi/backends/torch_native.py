"""The torch-native backend: each op through torch itself, on every device torch runs on.

Its kernels are declared in ``registry/kernels/torch/<op>.toml`` (one per device type, all dtypes, layouts and
batch broadcasts) and registered when kabi is imported, below native kernels in the heuristic order. torch is
also every op's reference, so this backend is the one that always works.

Example::

    >>> with kabi.use(matmul="torch"):
    ...     kabi.ops.matmul(a, b)  # torch.matmul, chosen through kabi
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .._base.core_answers import KernelInfo, Problem
from .._base.declarations import kernel_specs
from ..ops._kernel_registration import register_declared
from ..ops._references import activation_named, group_bounds

__all__ = ["CopyInto", "aligned_length", "aligned_product", "grouped_mm", "grouped_mm_loop", "linear", "matmul",
           "matmul_aligned_copies", "matmul_aligned_copies_supports", "register", "scaled_mm",
           "scaled_mm_cuda_supports", "zero_padded"]

# torch.matmul's own signature, matmul(a, b, *, out=None), is the Python kernel convention: registering the
# builtin itself keeps a wrapper's call off every dispatch.
matmul = torch.matmul


# Row pitches in elements of a 2-byte dtype that make every row start 16-byte aligned.
_PITCH_MULTIPLE = 8
# Below this many multiply-adds the copies cost more than an unaligned product loses.
_ALIGNED_COPIES_MIN_MACS = 1 << 27


def aligned_length(length: int) -> int:
    """length rounded up to a whole number of 16-byte pitches of a 2-byte dtype."""
    return -(-length // _PITCH_MULTIPLE) * _PITCH_MULTIPLE


# copy_into(source, target): target holds source where the two overlap and zeros in the rest of it, whether target
# is larger than source (a padded operand, its pitch's padding included) or the same size (the product's first N
# columns). What the two aligned-copies kernels differ in: torch's strided copy and fills, or one Triton pass.
CopyInto = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _torch_copy_into(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # The pitch's padding is zeroed too: torch's CPU bfloat16 product was seen reading it.
    height, width = source.shape
    target[:height, :width].copy_(source)
    target[:height, width:].zero_()
    target[height:].zero_()
    return target


def zero_padded(matrix: torch.Tensor, rows: int, columns: int, copy_into: CopyInto) -> torch.Tensor:
    """A copy of a 2-D row- or column-major matrix grown with zeros to ``rows`` x ``columns``, whose pitch is a
    multiple of 16 bytes (a column-major one stays column-major), made by ``copy_into``; everything outside the
    matrix is zero, the pitch's padding included."""
    if matrix.stride(0) == 1 and matrix.stride(1) != 1:
        return zero_padded(matrix.mT, columns, rows, copy_into).mT
    return copy_into(matrix, matrix.new_empty((rows, aligned_length(columns))))[:, :columns]


def aligned_product(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, copy_into: CopyInto) -> torch.Tensor:
    """``a @ b`` for 2-D a and b through torch.mm over zero-padded copies: K and N rounded up to multiples of 8,
    so that every pitch is a multiple of 16 bytes and K's steps need no tail; the zeros add nothing to the product,
    whose first N columns are the result, written into ``out`` (or a new contiguous tensor) by ``copy_into`` too. An
    operand that needs no padding is not copied, nor is a product whose N needs none. (Aligning the pitches alone is
    not enough: with K = 4091 cuBLAS still took 1454 us at 4093x4099x4091 bfloat16 on the H200, where Inductor,
    which pads K too, took 230 us.)"""
    m, k = a.shape
    n = b.shape[1]
    padded_k, padded_n = aligned_length(k), aligned_length(n)
    product = torch.mm(_aligned_operand(a, m, padded_k, copy_into), _aligned_operand(b, padded_k, padded_n, copy_into))
    if padded_n == n and out is None:
        return product
    return copy_into(product[:, :n], product.new_empty((m, n)) if out is None else out)


# cuBLAS's fast kernels read 16-byte aligned rows from 16-byte aligned data.
_ALIGNMENT_BYTES = 16


def _aligned_operand(matrix: torch.Tensor, rows: int, columns: int, copy_into: CopyInto) -> torch.Tensor:
    """matrix itself where it already has the padded shape, a unit stride, a 16-byte pitch and 16-byte aligned data
    (K aligned spares a its copy, N and K aligned spare b); else its zero-padded copy."""
    pitch_bytes = max(matrix.stride()) * matrix.element_size()
    if (tuple(matrix.shape) == (rows, columns) and min(matrix.stride()) == 1
            and pitch_bytes % _ALIGNMENT_BYTES == 0 and matrix.data_ptr() % _ALIGNMENT_BYTES == 0):
        return matrix
    return zero_padded(matrix, rows, columns, copy_into)


def matmul_aligned_copies(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`aligned_product` with torch's own copies."""
    return aligned_product(a, b, out, _torch_copy_into)


def matmul_aligned_copies_supports(problem: Problem) -> bool | str:
    """Where :func:`matmul_aligned_copies` can win: a 2-byte dtype, a pitch of a, b or the output that is not a
    multiple of 16 bytes (judged from the sizes: K for a and a column-major b, N for a row-major b and the output),
    and at least 2**27 multiply-adds."""
    dims = problem.dims
    m, n, k = dims["M"], dims["N"], dims["K"]
    if m * n * k < _ALIGNED_COPIES_MIN_MACS:
        return f"{m}x{n}x{k} is below {_ALIGNED_COPIES_MIN_MACS} multiply-adds: the copies cost more than they save"
    if k % _PITCH_MULTIPLE == 0 and n % _PITCH_MULTIPLE == 0:
        return "K and N are multiples of 8: every pitch is already 16-byte aligned"
    return True


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none", *,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """``activation(x @ w^T + bias)`` for x [..., K], w [N, K], bias [N] or None, on any device and dtype torch's
    ``F.linear`` takes; written into ``out`` ([..., N], x's dtype) and returned when it is given.

    The activation runs in place on the product, which this kernel owns; out of place where autograd records the
    product, so that the recorded graph is the reference's own (F.linear, then the activation).
    """
    apply = activation_named(activation)
    if out is None:
        product = F.linear(x, w, bias)
        return apply.function(product) if product.requires_grad else apply.in_place(product)
    # The bias rides in the product's accumulator (addmv, addmm) where torch has one: one pass over out, not two.
    if x.dim() == 1:
        # torch.matmul would want a vector's out as a [1, N] row; mv writes the [N] vector itself.
        if bias is None:
            torch.mv(w, x, out=out)
        else:
            torch.addmv(bias, w, x, out=out)
    elif x.dim() == 2 and bias is not None:
        torch.addmm(bias, x, w.mT, out=out)
    else:
        torch.matmul(x, w.mT, out=out)
        if bias is not None:
            out.add_(bias)
    return apply.in_place(out)


def _clamped_offsets(offs: torch.Tensor, rows: int) -> torch.Tensor:
    """The offsets as every grouped_mm kernel reads them: each end clamped into [previous end, rows], on the device,
    so that no values make torch read or write outside x and out (the op checks host offsets; device ones are not
    read back, see registry/ops/grouped_mm.toml)."""
    # Clamping commutes with the running maximum (both are monotone): two small kernels, no copy to the host.
    return torch.cummax(offs, 0).values.clamp_(0, rows)


def _fits_torch_grouped_mm(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether F.grouped_mm takes these operands: every stride but the unit one, and the data, 16-byte aligned."""
    element = x.element_size()
    tensors = (x, w)
    return all(tensor.data_ptr() % 16 == 0 and all(stride == 1 or (stride * element) % 16 == 0
                                                   for stride in tensor.stride()) for tensor in tensors)


def _torch_grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None,
                      out: torch.Tensor | None) -> torch.Tensor:
    """F.grouped_mm, with the rows past the last offset zeroed in the same pass that writes them to ``out``."""
    if offs is None:
        result = F.grouped_mm(x, w)
        return result if out is None else out.copy_(result)
    if x.shape[0] == 0 or w.shape[0] == 0:
        return x.new_zeros(x.shape[0], w.shape[-1]) if out is None else out.zero_()
    clamped = _clamped_offsets(offs, x.shape[0])
    result = F.grouped_mm(x, w, offs=clamped)
    past_last = (torch.arange(x.shape[0], device=x.device) >= clamped[-1])[:, None]
    if out is None:
        return result.masked_fill_(past_last, 0)
    return torch.where(past_last, result.new_zeros(()), result, out=out)


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None = None, *,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """``F.grouped_mm(x, w, offs=offs)``: torch's own grouped GEMM (2-D x 3-D with offsets, or 3-D x 3-D), with rows
    past the last offset zero. It needs no host copy of the offsets, so it runs inside CUDA graphs. Operands whose
    strides torch's kernel does not take (rows of other than a multiple of 16 bytes) go through the per-group loop.
    """
    if not _fits_torch_grouped_mm(x, w):
        return grouped_mm_loop(x, w, offs, out=out)
    return _torch_grouped_mm(x, w, offs, out)


def grouped_mm_loop(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None = None, *,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """One ``torch.mm`` per group, for every dtype and device torch multiplies in. It reads the offsets on the host:
    a GPU synchronizes once per call. A CUDA graph capture forbids that read, so a captured call runs torch's grouped
    GEMM instead (``RuntimeError`` where that does not take the operands' strides)."""
    if offs is None:
        return torch.bmm(x, w, out=out)
    if offs.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        if not _fits_torch_grouped_mm(x, w):
            raise RuntimeError("grouped_mm_loop: a CUDA graph capture cannot read the offsets on the host, and "
                               "F.grouped_mm does not take these operands' strides (rows of 16-byte multiples)")
        return _torch_grouped_mm(x, w, offs, out)
    result = x.new_empty(x.shape[0], w.shape[-1]) if out is None else out
    last = 0
    for group, (start, end) in enumerate(group_bounds(offs, x.shape[0])):
        if end > start:
            torch.mm(x[start:end], w[group], out=result[start:end])
        last = end
    result[last:].zero_()
    return result


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: str = "bfloat16", use_fast_accum: bool = False, *,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch._scaled_mm``: (scale_a * a) @ (scale_b * b) + bias in ``out_dtype``, with its fast accumulation where
    ``use_fast_accum`` allows it. torch takes the two scales of one
    kind, both per tensor or both row-wise; a mix (kabi's op allows one) has its per-tensor scale broadcast to the
    row-wise shape, a vector of M or N floats."""
    if scale_a.dim() != scale_b.dim():
        m, n = a.shape[0], b.shape[1]
        scale_a = scale_a.expand(m, 1).contiguous() if scale_a.dim() == 0 else scale_a
        scale_b = scale_b.expand(1, n).contiguous() if scale_b.dim() == 0 else scale_b
    result = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=getattr(torch, out_dtype),
                              use_fast_accum=use_fast_accum)
    if out is None:
        return result
    return out.copy_(result)


def scaled_mm_cuda_supports(problem: Problem) -> bool | str:
    """What torch._scaled_mm on CUDA refuses, as the supports predicate of ``torch.scaled_mm.cuda``: a not
    row-major, b not column-major, K and N not multiples of 16 (cuBLASLt's FP8 alignment), a float32 output with a
    bias, and row-wise scales (a mix is served as row-wise) with an output other than bfloat16."""
    a_layout, b_layout = problem.layouts[:2]
    if any(problem.input_shapes[2:4]) and problem.dtype != "bfloat16":
        return f"torch._scaled_mm on CUDA takes row-wise scales with a bfloat16 output only; out is {problem.dtype}"
    if a_layout not in ("contiguous", "row_strided"):
        return f"torch._scaled_mm on CUDA needs a row-major; a is {a_layout}"
    if b_layout != "col_strided":
        return f"torch._scaled_mm on CUDA needs b column-major (a transposed [N, K] weight); b is {b_layout}"
    dims = problem.dims
    if dims["K"] % 16 or dims["N"] % 16:
        return f"torch._scaled_mm on CUDA needs K and N multiples of 16; K={dims['K']}, N={dims['N']}"
    if problem.dtype == "float32" and problem.layouts[4] != "absent":
        return "torch._scaled_mm on CUDA takes no bias with a float32 output"
    return True


def register() -> tuple[KernelInfo, ...]:
    """Register every kernel declared under ``registry/kernels/torch``; the torch version is in the fingerprint,
    so upgrading torch invalidates its tuning records."""
    registered = []
    for spec in kernel_specs("torch"):
        if not spec.fingerprint:
            spec = type(spec)(**{**spec.__dict__, "fingerprint": f"{spec.implementation}@torch{torch.__version__}"})
        registered.append(register_declared(spec))
    return tuple(registered)
