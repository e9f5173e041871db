"""The fused linear kernel from Python: its configs, what each config fits, the launcher, and its compilation for
a GPU without one at hand.

``launch_linear(config, x, w, bias, activation, out=...)`` has the Python kernel convention of kabi's ``linear``
op (inputs, then attributes, then ``out``), so ``functools.partial(launch_linear, config)`` is a kernel. x may be
any [..., K]: its leading dimensions are read as one row stride when they nest (a copy is made only when they do
not); w is read through its own strides, an nn.Linear weight [N, K] or any view of one. Importing this module imports
no Triton: the launcher imports the kernel (and Triton) at its first call.

Example::

    out = launch_linear(LINEAR_CONFIGS[0], x, w, bias, "silu")   # F.silu(F.linear(x, w, bias))
"""

from __future__ import annotations

import math

import torch

from ...ops._references import activation_named
from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._kernel_modules import LINEAR_KERNELS

__all__ = ["LINEAR_CONFIGS", "compile_linear", "launch_linear", "linear_unsupported_reason"]

_TRITON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# float32 runs tl.dot in full IEEE float32 (no tf32), so it meets the op's float32 tolerance.
_INPUT_PRECISION = "ieee"
_MAX_ELEMENTS = 2**31 - 1

# Prefill tiles first (two wgmma-sized ones for sm_90, one narrower for mid-sized M or N), then decode tiles whose
# BLOCK_M of 16 wastes the least of the tensor-core tile on M <= 16, with wide K steps to stream w.
LINEAR_CONFIGS = (
    MatmulConfig(128, 128, 64, num_warps=8, num_stages=3),
    MatmulConfig(64, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(128, 64, 32, num_warps=4, num_stages=4),
    MatmulConfig(16, 64, 128, num_warps=4, num_stages=4),
    MatmulConfig(32, 64, 128, num_warps=4, num_stages=4),
)


def linear_unsupported_reason(config: MatmulConfig, m: int, n: int, k: int, element_size: int,
                              arch: int | None) -> str:
    """Why ``config`` should not run an M x N x K linear, or "" if it should: BLOCK_M at most M rounded up to a
    power of two (a taller tile computes only padding), operands within 32-bit offsets, and operand buffers that
    fit the arch's shared memory (``arch`` None: the CPU interpreter)."""
    if max(m * k, n * k, m * n) > _MAX_ELEMENTS:
        return "an operand has more than 2**31 - 1 elements; the kernel uses 32-bit offsets"
    if config.block_m > max(16, next_power_of_two(m)):
        return f"BLOCK_M={config.block_m} is above M={m} rounded up to a power of two"
    needed = config.shared_memory_bytes(element_size)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""


def _span(tensor: torch.Tensor) -> int:
    return sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride()))


def _rows_of(result: torch.Tensor, m: int, n: int) -> tuple[torch.Tensor, bool]:
    """(result as an [M, N] matrix, whether that matrix is result's own memory): the kernel writes in place when
    result's leading dimensions nest, else into a new matrix that is copied back."""
    rows = result.reshape(m, n)
    return rows, rows.untyped_storage().data_ptr() == result.untyped_storage().data_ptr()


def launch_linear(config: MatmulConfig, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                  activation: str = "none", *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``activation(x @ w^T + bias)`` through the fused kernel, x [..., K], w [N, K], bias [N] or None, all of one
    dtype (float16, bfloat16 or float32); written into ``out`` ([..., N], x's dtype) and returned when it is given.
    ``ValueError`` for an unknown activation or operands beyond 32-bit offsets."""
    activation_named(activation)
    k = x.shape[-1]
    n = w.shape[0]
    result = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device) if out is None else out
    if result.numel() == 0:
        return result
    m = math.prod(x.shape[:-1])
    x_rows = x.reshape(m, k)
    out_rows, in_place = _rows_of(result, m, n)
    for name, operand in (("x", x_rows), ("w", w), ("out", out_rows)):
        if _span(operand) >= _MAX_ELEMENTS:
            raise ValueError(f"triton linear: {name} spans more than 2**31 - 1 elements (shape "
                             f"{list(operand.shape)}, strides {list(operand.stride())}); the kernel uses 32-bit "
                             "offsets")
    grid = (ceil_div(m, config.block_m) * ceil_div(n, config.block_n),)
    LINEAR_KERNELS.linear_kernel[grid](
        x_rows, w, bias, out_rows, m, n, k, *x_rows.stride(), *w.stride(), 0 if bias is None else bias.stride(0),
        *out_rows.stride(), HAS_BIAS=bias is not None, ACTIVATION=activation, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m, INPUT_PRECISION=_INPUT_PRECISION,
        DOT_IN_FLOAT32=x.dtype == torch.bfloat16 and x.device.type == "cpu",
        num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    if not in_place:
        result.copy_(out_rows.view(result.shape))
    return result


def compile_linear(config: MatmulConfig, dtype: torch.dtype, arch: int, *, activation: str, has_bias: bool):
    """Compile the kernel for ``arch`` (80, 90: sm_90a) with no GPU: the Triton ``CompiledKernel``, whose
    ``asm`` holds the PTX and the cubin. Specialized as a device binary will be: row-major x and out, w an
    nn.Linear weight [N, K] (their unit strides folded into the code), 16-byte aligned pointers."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    activation_named(activation)
    if dtype not in _TRITON_DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(map(str, _TRITON_DTYPES))}; got {dtype}")
    pointer = "*" + _TRITON_DTYPES[dtype]
    signature = {"x_ptr": pointer, "w_ptr": pointer, "bias_ptr": pointer if has_bias else "constexpr",
                 "out_ptr": pointer, "M": "i32", "N": "i32", "K": "i32",
                 "stride_xm": "i32", "stride_xk": "constexpr", "stride_wn": "i32", "stride_wk": "constexpr",
                 "stride_bias": "i32", "stride_om": "i32", "stride_on": "constexpr",
                 "HAS_BIAS": "constexpr", "ACTIVATION": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                 "BLOCK_K": "constexpr", "GROUP_M": "constexpr", "INPUT_PRECISION": "constexpr",
                 "DOT_IN_FLOAT32": "constexpr"}
    constexprs = {"stride_xk": 1, "stride_wk": 1, "stride_on": 1, "HAS_BIAS": has_bias, "ACTIVATION": activation,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                  "GROUP_M": config.group_m, "INPUT_PRECISION": _INPUT_PRECISION, "DOT_IN_FLOAT32": False}
    if not has_bias:
        constexprs["bias_ptr"] = None
    attrs = {(position,): [["tt.divisibility", 16]]
             for position, kind in enumerate(signature.values()) if kind.startswith("*")}
    source = ASTSource(LINEAR_KERNELS.linear_kernel, signature, constexprs, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                   "enable_fp_fusion": True})
