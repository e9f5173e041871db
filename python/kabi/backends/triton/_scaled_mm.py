"""The Triton FP8 GEMM from Python: its configs, what each config fits, the launcher, and its compilation for a GPU
without one at hand.

``launch_scaled_mm(config, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out=...)`` has the Python kernel convention of
kabi's ``scaled_mm`` op (inputs, then attributes, then ``out``), so ``functools.partial(launch_scaled_mm, config)``
is a kernel. a and b are read through their strides; b's fast layout is the transposed view of an [N, K] weight.
Importing this module imports no Triton: the launchers import the kernels (and Triton) at their first call.

Example::

    out = launch_scaled_mm(SCALED_MM_CONFIGS[0], a, w.t(), scale_a, scale_b, None, "bfloat16")
"""

from __future__ import annotations

import torch

from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._families import _TorchScratchAllocator, device_facts
from ._kernel_modules import SCALED_MM_KERNELS

__all__ = ["SCALED_MM_CONFIGS", "SCALED_MM_TMA_CONFIGS", "compile_scaled_mm", "launch_scaled_mm",
           "launch_scaled_mm_tma", "scaled_mm_tma_unsupported_reason", "scaled_mm_unsupported_reason"]

_TRITON_DTYPES = {torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5", torch.bfloat16: "bf16",
                  torch.float16: "fp16", torch.float32: "fp32"}
_MAX_ELEMENTS = 2**31 - 1
# wgmma takes FP8 in K steps of 32, so BLOCK_K is a multiple of 32; one byte per element lets it be 128 at the
# shared memory of two bf16 tiles of 64. Prefill tiles first (the 8192^3 and llm-prefill shapes), then narrower ones
# for M or N of a few hundred.
SCALED_MM_CONFIGS = (
    MatmulConfig(128, 256, 128, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 128, num_warps=8, num_stages=4),
    MatmulConfig(64, 128, 128, num_warps=4, num_stages=4),
    MatmulConfig(64, 64, 128, num_warps=4, num_stages=4),
)


# The persistent TMA kernel's tiles (sm_90): wgmma-sized, 128-byte K steps, the widest first (8192^3 and prefill).
SCALED_MM_TMA_CONFIGS = (
    MatmulConfig(128, 256, 128, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 128, num_warps=8, num_stages=4),
    MatmulConfig(128, 128, 128, num_warps=4, num_stages=4),
    MatmulConfig(64, 128, 128, num_warps=4, num_stages=5),
)


def scaled_mm_tma_unsupported_reason(config: MatmulConfig, m: int, n: int, k: int, out_element_size: int,
                                     arch: int | None) -> str:
    """What the pointer kernel's fit requires, TMA's 16-byte row pitches (K a multiple of 16: a's and the weight's
    rows of FP8 bytes; out's rows of N elements a multiple of 16 bytes), and shared memory for the operand stages
    and the output tile its TMA store stages there (a float32 out of 128 x 256 alone takes 128 KiB: on the H200 that
    config asked for 278552 bytes of 232448)."""
    if k % 16:
        return f"a's and b's rows of K={k} FP8 bytes are not a multiple of 16, as TMA requires"
    if (n * out_element_size) % 16:
        return f"out's rows of N={n} elements are not a multiple of 16 bytes, as TMA requires"
    needed = config.shared_memory_bytes(1) + config.block_m * config.block_n * out_element_size
    limit = shared_memory_limit(arch)
    if needed > limit:
        return (f"needs ~{needed} bytes of shared memory (operand stages and a {out_element_size}-byte output "
                f"tile); sm_{arch} allows {limit}")
    return scaled_mm_unsupported_reason(config, m, n, k, arch)


def scaled_mm_unsupported_reason(config: MatmulConfig, m: int, n: int, k: int, arch: int | None) -> str:
    """Why ``config`` should not run an M x N x K scaled_mm, or "" if it should: BLOCK_M at most M rounded up to a
    power of two, operands within 32-bit offsets, and operand buffers that fit the arch's shared memory (``arch``
    None: the CPU interpreter)."""
    if max(m * k, n * k, m * n) > _MAX_ELEMENTS:
        return "an operand has more than 2**31 - 1 elements; the kernel uses 32-bit offsets"
    if config.block_m > max(64, next_power_of_two(m)):
        return f"BLOCK_M={config.block_m} is above M={m} rounded up to a power of two"
    needed = config.shared_memory_bytes(1)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""


def launch_scaled_mm(config: MatmulConfig, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                     scale_b: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: str = "bfloat16",
                     use_fast_accum: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """(scale_a * a) @ (scale_b * b) + bias through the FP8 kernel: a [M, K] and b [K, N] float8, scale_a [] or
    [M, 1] and scale_b [] or [1, N] float32, bias [N] or None in out_dtype; written into ``out`` ([M, N],
    out_dtype) and returned when it is given. The kernel always accumulates accurately (each K block's products
    added into float32), which ``use_fast_accum`` permits to be skipped but does not require."""
    m, k = a.shape
    n = b.shape[1]
    result = torch.empty((m, n), dtype=getattr(torch, out_dtype), device=a.device) if out is None else out
    if result.numel() == 0:
        return result
    if k == 0:
        return result.copy_(bias.expand(m, n) if bias is not None else torch.zeros((), dtype=result.dtype))
    grid = (ceil_div(m, config.block_m) * ceil_div(n, config.block_n),)
    SCALED_MM_KERNELS.scaled_mm_kernel[grid](
        a, b, scale_a, scale_b, bias, result, m, n, k, *a.stride(), *b.stride(), *result.stride(),
        ROW_SCALE_A=scale_a.dim() == 2, ROW_SCALE_B=scale_b.dim() == 2, HAS_BIAS=bias is not None,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    return result


def launch_scaled_mm_tma(config: MatmulConfig, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                         scale_b: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: str = "bfloat16",
                         use_fast_accum: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """As :func:`launch_scaled_mm`, through the persistent TMA kernel (sm_90): a with unit stride along K, b the
    transposed view of an [N, K] weight (unit stride along K), both with 16-byte row pitches (the supports
    predicate's declaration); an ``out`` with other strides is written through a dense result."""
    m, k = a.shape
    n = b.shape[1]
    dense_out = out is not None and out.stride(1) == 1 and (out.stride(0) * out.element_size()) % 16 == 0
    result = out if dense_out else torch.empty((m, n), dtype=getattr(torch, out_dtype), device=a.device)
    if result.numel() == 0 or k == 0:
        return launch_scaled_mm(config, a, b, scale_a, scale_b, bias, out_dtype, out=out)
    _, multiprocessors = device_facts(a.device)
    num_programs = min(multiprocessors, ceil_div(m, config.block_m) * ceil_div(n, config.block_n))
    with _TorchScratchAllocator(a.device):
        SCALED_MM_KERNELS.scaled_mm_persistent_tma_kernel[(num_programs,)](
            a, b, scale_a, scale_b, bias, result, m, n, k, a.stride(0), b.stride(1), result.stride(0), num_programs,
            ROW_SCALE_A=scale_a.dim() == 2, ROW_SCALE_B=scale_b.dim() == 2, HAS_BIAS=bias is not None,
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
            num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    if out is not None and not dense_out:
        return out.copy_(result)
    return result


def compile_scaled_mm(config: MatmulConfig, dtype: torch.dtype, out_dtype: torch.dtype, arch: int, *,
                      row_scales: bool, has_bias: bool, tma: bool = False):
    """Compile the pointer kernel (or, with ``tma``, the persistent TMA kernel) for ``arch`` (89, 90: sm_90a) with
    no GPU: the Triton ``CompiledKernel``, whose ``asm`` holds the PTX and the cubin. Specialized as the common call
    is: row-major a and out, b the transposed view of an [N, K] weight (their unit strides folded into the code),
    16-byte aligned pointers, both scales per tensor or both row-wise."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, value, allowed in (("dtype", dtype, (torch.float8_e4m3fn, torch.float8_e5m2)),
                                 ("out_dtype", out_dtype, (torch.bfloat16, torch.float16, torch.float32))):
        if value not in allowed:
            raise TypeError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value}")
    operand, output = "*" + _TRITON_DTYPES[dtype], "*" + _TRITON_DTYPES[out_dtype]
    signature = {"a_ptr": operand, "b_ptr": operand, "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32",
                 "bias_ptr": output if has_bias else "constexpr", "out_ptr": output, "M": "i32", "N": "i32",
                 "K": "i32"}
    if tma:
        signature.update(stride_am="i32", stride_bn="i32", stride_om="i32", num_programs="i32")
        constexprs = {}
    else:
        signature.update(stride_am="i32", stride_ak="constexpr", stride_bk="constexpr", stride_bn="i32",
                         stride_om="i32", stride_on="constexpr")
        constexprs = {"stride_ak": 1, "stride_bk": 1, "stride_on": 1}
    signature.update(ROW_SCALE_A="constexpr", ROW_SCALE_B="constexpr", HAS_BIAS="constexpr", BLOCK_M="constexpr",
                     BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
    constexprs.update(ROW_SCALE_A=row_scales, ROW_SCALE_B=row_scales, HAS_BIAS=has_bias, BLOCK_M=config.block_m,
                      BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m)
    if not has_bias:
        constexprs["bias_ptr"] = None
    attrs = {(position,): [["tt.divisibility", 16]]
             for position, kind in enumerate(signature.values()) if kind.startswith("*")}
    kernel = SCALED_MM_KERNELS.scaled_mm_persistent_tma_kernel if tma else SCALED_MM_KERNELS.scaled_mm_kernel
    source = ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                   "enable_fp_fusion": True})
