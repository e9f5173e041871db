"""The persistent grouped GEMM from Python: its configs, what each fits, the launcher, and its compilation for a GPU
without one at hand.

``launch_grouped_mm(config, x, w, offs, out=...)`` has the Python kernel convention of kabi's ``grouped_mm`` op, so
``functools.partial(launch_grouped_mm, config)`` is a kernel. w is read in place through its strides: [E, K, N], or
the transposed view of an nn.Linear [E, N, K] weight. On sm_90 with TMA-compatible operands (unit inner stride,
16-byte pitches and base addresses) the kernel reads through tensor descriptors; otherwise through pointers.
Importing this module imports no Triton: the launcher imports the kernel (and Triton) at its first call.

Example::

    out = launch_grouped_mm(GROUPED_CONFIGS[0], x, w_linear.mT, offs)   # x [T, K], w_linear [E, N, K]
"""

from __future__ import annotations

import torch

from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._families import _TorchScratchAllocator, device_facts
from ._kernel_modules import GROUPED_KERNELS

__all__ = ["GROUPED_CONFIGS", "compile_grouped_mm", "grouped_unsupported_reason", "launch_grouped_mm"]

_TRITON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# float32 runs tl.dot in full IEEE float32 (no tf32), so it meets the op's float32 tolerance.
_INPUT_PRECISION = "ieee"
_MAX_ELEMENTS = 2**31 - 1
# Programs of the persistent loop on the CPU interpreter, which runs them one after another.
_INTERPRETER_PROGRAMS = 4

# Prefill tiles (wgmma-sized: the dense kernels' Hopper tiles, since prefill routes hundreds of rows to each expert
# and the 128x128 tile alone reached only 0.5 of the roof there on the H200), a narrower one for groups of a few
# dozen rows, and a 16-row tile for decode routing (a handful of rows per expert), whose wide K step streams the
# weights.
GROUPED_CONFIGS = (
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=3),
    MatmulConfig(128, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(128, 128, 64, num_warps=8, num_stages=3),
    MatmulConfig(64, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(16, 128, 128, num_warps=4, num_stages=4),
)


def grouped_unsupported_reason(config: MatmulConfig, rows: int, n: int, k: int, element_size: int,
                               arch: int | None) -> str:
    """Why ``config`` should not run a grouped product of ``rows`` rows in all, or "" if it should: BLOCK_M at most
    the rows rounded up to a power of two, per-group operands within 32-bit offsets, and operand buffers that fit
    the arch's shared memory (``arch`` None: the CPU interpreter)."""
    if max(rows * k, n * k, rows * n) > _MAX_ELEMENTS:
        return "an operand has more than 2**31 - 1 elements in one group; the kernel uses 32-bit row offsets"
    if config.block_m > max(16, next_power_of_two(rows)):
        return f"BLOCK_M={config.block_m} is above the rows ({rows}) rounded up to a power of two"
    needed = config.shared_memory_bytes(element_size)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""


def _tma_ready(x: torch.Tensor, w: torch.Tensor, w_n_by_k: bool) -> bool:
    """Whether TMA can read x and w as they are: sm_90, a unit inner stride, 16-byte pitches and base addresses."""
    if x.device.type != "cuda" or device_facts(x.device)[0] != 90:
        return False
    element = x.element_size()
    inner_w = w.stride(-2) if w_n_by_k else w.stride(-1)
    if x.stride(-1) != 1 or inner_w != 1:
        return False
    pitches = [x.stride(-2), w.stride(0), w.stride(-1) if w_n_by_k else w.stride(-2)]
    if x.dim() == 3:
        pitches.append(x.stride(0))
    return all((pitch * element) % 16 == 0 for pitch in pitches) and x.data_ptr() % 16 == 0 \
        and w.data_ptr() % 16 == 0


def launch_grouped_mm(config: MatmulConfig, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None = None,
                      *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``grouped_mm(x, w, offs)`` through the persistent kernel (float16, bfloat16 or float32); written into ``out``
    and returned when it is given."""
    groups, k, n = w.shape
    rows = x.shape[-2]
    shape = (rows, n) if offs is not None else (groups, rows, n)
    result = torch.empty(shape, dtype=x.dtype, device=x.device) if out is None else out
    if result.numel() == 0:
        return result
    if offs is not None and groups == 0:
        return result.zero_()
    # The kernel's loads read w as [E, K, N] through (stride_wk, stride_wn); an nn.Linear weight seen as its
    # transpose has stride_wk == 1, which the TMA path reads as the [E, N, K] tensor it is.
    w_n_by_k = w.stride(1) == 1 and w.stride(2) != 1
    use_tma = _tma_ready(x, w, w_n_by_k)
    x_strides = (x.stride(0) * rows, *x.stride()) if offs is not None else x.stride()
    out_strides = (0, *result.stride()) if offs is not None else result.stride()
    tiles_n = ceil_div(n, config.block_n)
    work_items = (ceil_div(rows, config.block_m) + groups) * tiles_n
    if x.device.type == "cuda":
        num_programs = min(device_facts(x.device)[1], work_items)
    else:
        num_programs = min(_INTERPRETER_PROGRAMS, work_items)
    offsets = offs if offs is not None else x.new_empty(0, dtype=torch.int32)
    with _TorchScratchAllocator(x.device):
        GROUPED_KERNELS.grouped_mm_kernel[(num_programs,)](
            x, w, offsets, result, groups, rows, n, k, *x_strides, *w.stride(), *out_strides, num_programs,
            HAS_OFFSETS=offs is not None, USE_TMA=use_tma, W_N_BY_K=w_n_by_k, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n, BLOCK_K=config.block_k,
            DOT_IN_FLOAT32=x.dtype == torch.bfloat16 and x.device.type == "cpu", INPUT_PRECISION=_INPUT_PRECISION,
            num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    return result


def compile_grouped_mm(config: MatmulConfig, dtype: torch.dtype, arch: int, *, has_offsets: bool = True,
                       w_n_by_k: bool = True):
    """Compile the kernel for ``arch`` (80: the pointer path; 90: sm_90a with TMA) with no GPU: the Triton
    ``CompiledKernel``, whose ``asm`` holds the PTX and the cubin. Row-major x and out, w an nn.Linear weight seen
    as [E, K, N] (``w_n_by_k``) or a row-major [E, K, N]; unit strides folded into the code, 16-byte aligned
    pointers."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if dtype not in _TRITON_DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(map(str, _TRITON_DTYPES))}; got {dtype}")
    pointer = "*" + _TRITON_DTYPES[dtype]
    use_tma = arch == 90
    signature = {"x_ptr": pointer, "w_ptr": pointer, "offs_ptr": "*i32", "out_ptr": pointer,
                 "E": "i32", "R": "i32", "N": "i32", "K": "i32",
                 "stride_xe": "i32", "stride_xm": "i32", "stride_xk": "constexpr",
                 "stride_we": "i32", "stride_wk": "i32" if not w_n_by_k else "constexpr",
                 "stride_wn": "constexpr" if not w_n_by_k else "i32",
                 "stride_oe": "i32", "stride_om": "i32", "stride_on": "constexpr", "num_programs": "i32",
                 "HAS_OFFSETS": "constexpr", "USE_TMA": "constexpr", "W_N_BY_K": "constexpr",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
                 "DOT_IN_FLOAT32": "constexpr", "INPUT_PRECISION": "constexpr"}
    constexprs = {"stride_xk": 1, "stride_on": 1, ("stride_wk" if w_n_by_k else "stride_wn"): 1,
                  "HAS_OFFSETS": has_offsets, "USE_TMA": use_tma, "W_N_BY_K": w_n_by_k,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                  "DOT_IN_FLOAT32": False, "INPUT_PRECISION": _INPUT_PRECISION}
    attrs = {(position,): [["tt.divisibility", 16]]
             for position, kind in enumerate(signature.values()) if kind.startswith("*")}
    source = ASTSource(GROUPED_KERNELS.grouped_mm_kernel, signature, constexprs, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                   "enable_fp_fusion": True})
