"""The Triton FP8 GEMM from Python: its configs, what each config fits, the launchers, and its families of device
binaries.

``launch_scaled_mm(config, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out=...)`` has the Python kernel
convention of kabi's ``scaled_mm`` op (inputs, then attributes, then ``out``), so
``functools.partial(launch_scaled_mm, config)`` is a kernel. a and b are read through their strides; b's fast layout
is the transposed view of an [N, K] weight. Importing this module imports no Triton: the launchers import the kernels
(and Triton) at their first call.

``SCALED_MM_FAMILY`` (the pointer kernel) and ``SCALED_MM_TMA_FAMILY`` (Hopper's persistent TMA kernel) compile the
same kernels to device binaries (``compile_to_binary``), one per config, output dtype and arch, each serving both
kinds of scale (read through their strides, 0 for a per-tensor scale) and a bias or none (NULL when absent).

Example::

    out = launch_scaled_mm(SCALED_MM_CONFIGS[0], a, w.t(), scale_a, scale_b, None, "bfloat16")
    compile_to_binary(SCALED_MM_TMA_FAMILY, SCALED_MM_TMA_CONFIGS[0], "bfloat16", 90, "binaries/",
                      layout="row_column")
"""

from __future__ import annotations

import torch

from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._families import (_ANY_STRIDES, _COLUMN_MAJOR, _DECLARED_DIVISOR, _ROW_MAJOR, BinarySpec, KernelFamily,
                        _divisibility_reason, _pointer_attrs, _TorchScratchAllocator, device_facts)
from ._kernel_modules import SCALED_MM_KERNELS
from ._manifest_params import ManifestParam
from ._names import SCALED_MM_FAMILY_NAME, SCALED_MM_TMA_FAMILY_NAME

__all__ = ["SCALED_MM_CONFIGS", "SCALED_MM_FAMILY", "SCALED_MM_TMA_CONFIGS", "SCALED_MM_TMA_FAMILY",
           "launch_scaled_mm", "launch_scaled_mm_tma", "scaled_mm_tma_unsupported_reason",
           "scaled_mm_unsupported_reason"]

_TRITON_DTYPES = {torch.float8_e4m3fn: "fp8e4nv", torch.bfloat16: "bf16", torch.float16: "fp16",
                  torch.float32: "fp32"}
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


def _tma_shared_memory_bytes(config: MatmulConfig, out_element_size: int) -> int:
    """The persistent kernel's estimate: the FP8 operand stages and the output tile its TMA store stages."""
    return config.shared_memory_bytes(1) + config.block_m * config.block_n * out_element_size


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
    needed = _tma_shared_memory_bytes(config, out_element_size)
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


def _scale_strides(scale_a: torch.Tensor, scale_b: torch.Tensor) -> tuple[int, int]:
    """The strides the kernels read the scales through: a row-wise scale's along out's rows (scale_a [M, 1]) or
    columns (scale_b [1, N]), 0 for a per-tensor one ([]), as the core passes a device binary."""
    return (scale_a.stride(0) if scale_a.dim() else 0), (scale_b.stride(1) if scale_b.dim() else 0)


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
        *_scale_strides(scale_a, scale_b), BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GROUP_M=config.group_m, num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    return result


def launch_scaled_mm_tma(config: MatmulConfig, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                         scale_b: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: str = "bfloat16",
                         use_fast_accum: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """As :func:`launch_scaled_mm`, through the persistent TMA kernel (sm_90): a with unit stride along K, b the
    transposed view of an [N, K] weight (unit stride along K), both with 16-byte row pitches; an ``out`` with other
    strides is written through a dense result. Operands TMA cannot read (views with other strides or pitches, which
    the supports predicate cannot see, judging by sizes and layout classes) go through the pointer kernel of the same
    tile."""
    m, k = a.shape
    n = b.shape[1]
    dense_out = out is not None and out.stride(1) == 1 and (out.stride(0) * out.element_size()) % 16 == 0
    result = out if dense_out else torch.empty((m, n), dtype=getattr(torch, out_dtype), device=a.device)
    # FP8 elements are bytes, so a 16-byte pitch is a stride that is a multiple of 16.
    tma_readable = a.stride(1) == 1 and b.stride(0) == 1 and a.stride(0) % 16 == 0 and b.stride(1) % 16 == 0
    if result.numel() == 0 or k == 0 or not tma_readable:
        return launch_scaled_mm(config, a, b, scale_a, scale_b, bias, out_dtype, out=out)
    _, multiprocessors = device_facts(a.device)
    num_programs = min(multiprocessors, ceil_div(m, config.block_m) * ceil_div(n, config.block_n))
    with _TorchScratchAllocator(a.device):
        SCALED_MM_KERNELS.scaled_mm_persistent_tma_kernel[(num_programs,)](
            a, b, scale_a, scale_b, bias, result, m, n, k, a.stride(0), b.stride(1), result.stride(0),
            *_scale_strides(scale_a, scale_b), num_programs, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
            BLOCK_K=config.block_k, GROUP_M=config.group_m, num_warps=config.num_warps,
            num_stages=config.num_stages, enable_fp_fusion=True)
    if out is not None and not dense_out:
        return out.copy_(result)
    return result


# What a binary takes of (a, b, scale_a, scale_b, bias): a row-major and b column-major (the transposed view of an
# [N, K] weight), the layout FP8 wgmma reads, each with its unit stride along K folded into the code; a scale of any
# layout, read through its stride along out's rows or columns; a bias dense (or absent: an absent input is not
# filtered, and passes NULL).
_BINARY_INPUT_LAYOUTS = (_ROW_MAJOR, _COLUMN_MAJOR, _ANY_STRIDES, _ANY_STRIDES, ("contiguous",))
# The FP8 format of a and b that binaries are compiled for: e4m3, FP8 inference's format for weights and activations
# (and every shape suite's). e5m2 operands, FP8 training's gradients, stay with the Python kernels: each further pair
# of formats would add a binary per config and output dtype.
_BINARY_OPERAND_DTYPE = torch.float8_e4m3fn
_BINARY_OPERAND_NAME = str(_BINARY_OPERAND_DTYPE).removeprefix("torch.")


class ScaledMmFamily(KernelFamily):
    """The FP8 pointer kernel as device binaries: one per (config, output dtype, arch), each serving per-tensor and
    row-wise scales, mixed too (the scales' strides, 0 for a per-tensor one, read at run time), and a bias or none (a
    NULL pointer, tested in the kernel). The family's dtypes are the output's (the op's first type variable, O, which
    the bias shares); a and b are float8_e4m3fn, a row-major and b the transposed view of an [N, K] weight, their
    unit strides along K folded in; out is dense.

    What the image assumes, the manifest declares, so the core declines (with a reason) what it would compute wrong:
    those dtypes (``type_constraints`` for a's and b's), those layouts per input, 16-byte aligned data, and K, N and
    the pitches of a, b and out multiples of 16 elements (Triton's ``tt.divisibility``: 16-byte loads). The output
    dtype is compiled in (the store's element type, and the persistent kernel's output tile in shared memory, differ
    by it), so no binary reads the ``out_dtype`` attribute; ``use_fast_accum`` only permits, and the kernels always
    accumulate each K block in float32. Its Python twin serves the rest."""

    name = SCALED_MM_FAMILY_NAME
    op = "scaled_mm"
    kernel_source = (SCALED_MM_KERNELS, "scaled_mm_kernel")
    configs = SCALED_MM_CONFIGS
    # FP8 tensor cores: Ada's mma (sm_89) and Hopper's wgmma (sm_90).
    arch_min = 89
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    # All three: an FP8 kernel's float32 output still runs on the tensor cores.
    native_dtypes = dtypes
    layout_variants = ("row_column",)
    alignment = 16

    def shared_memory_bytes(self, config: MatmulConfig, out_element_size: int) -> int:
        """The estimate of shared memory a config needs, as its Python kernel's supports predicate judges it."""
        return config.shared_memory_bytes(1)

    def binary_rows(self, config: MatmulConfig, dtype: torch.dtype, arch: int) -> tuple:
        # Only configs whose buffers fit the arch's shared memory: a binary of another would decline every problem.
        fits = self.shared_memory_bytes(config, dtype.itemsize) <= shared_memory_limit(arch)
        return (0,) if fits else ()

    def covering_layout(self, layouts: tuple) -> str | None:
        """The layout variant whose binaries take inputs of these layout classes (a, b, scale_a, scale_b, bias)."""
        if all(layout in classes or (index == 4 and layout == "absent")
               for index, (layout, classes) in enumerate(zip(layouts, _BINARY_INPUT_LAYOUTS))):
            return self.layout_variants[0]
        return None

    def binary_unsupported_reason(self, n: int, k: int, operand_dtypes: tuple) -> str:
        """Why a binary declines a problem its Python kernel takes, judged from a's and b's dtypes and the sizes
        (dense pitches assumed)."""
        for operand, dtype in zip("ab", operand_dtypes):
            if dtype != _BINARY_OPERAND_NAME:
                return f"its binaries take {_BINARY_OPERAND_NAME} operands; {operand} is {dtype}"
        return _divisibility_reason(k, n)

    def _check_layout(self, layout_variant: str) -> None:
        if layout_variant not in self.layout_variants:
            raise ValueError(f"layout: the {self.name} family compiles for {self.layout_variants} (a row-major, b "
                             f"the transposed view of an [N, K] weight); got {layout_variant!r}")

    def _pointers(self, dtype: torch.dtype) -> dict:
        operand, output = "*" + _TRITON_DTYPES[_BINARY_OPERAND_DTYPE], "*" + _TRITON_DTYPES[dtype]
        return {"a_ptr": operand, "b_ptr": operand, "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32",
                "bias_ptr": output, "out_ptr": output, "M": "i32", "N": "i32", "K": "i32"}

    def _spec(self, config: MatmulConfig, signature: dict, constexprs: dict, params: tuple, grid: tuple) -> BinarySpec:
        """The spec of an entry whose pointers and M, N, K lead and whose tile sizes end it (both kernels')."""
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
        constexprs.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m)
        divisible = ("N", "K", "stride_am", "stride_bn", "stride_om")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible), params, grid,
                          _BINARY_INPUT_LAYOUTS,
                          type_constraints=f"F8A: {_BINARY_OPERAND_NAME}; F8B: {_BINARY_OPERAND_NAME}")

    @staticmethod
    def _common_params() -> tuple:
        """The params both entries start with: the six tensors (an absent bias: NULL), M, N, K, the pitches of a, b
        (the [N, K] weight's rows) and out (K, N and the pitches declared multiples of 16), then scale_a's stride
        along out's rows and scale_b's along its columns (0 for a [] scale: the core reads a dimension a tensor lacks
        as 0)."""
        return (*(ManifestParam.tensor(index) for index in range(6)), ManifestParam.dim("M"),
                ManifestParam.dim("N", divisible_by=_DECLARED_DIVISOR),
                ManifestParam.dim("K", divisible_by=_DECLARED_DIVISOR),
                ManifestParam.stride(0, -2, divisible_by=_DECLARED_DIVISOR),
                ManifestParam.stride(1, -1, divisible_by=_DECLARED_DIVISOR),
                ManifestParam.stride(5, -2, divisible_by=_DECLARED_DIVISOR),
                ManifestParam.stride(2, -2), ManifestParam.stride(3, -1))

    def binary_spec(self, config: MatmulConfig, dtype: torch.dtype, layout_variant: str) -> BinarySpec:
        self._check_layout(layout_variant)
        signature = self._pointers(dtype)
        signature.update(stride_am="i32", stride_ak="constexpr", stride_bk="constexpr", stride_bn="i32",
                         stride_om="i32", stride_on="constexpr", stride_scale_a="i32", stride_scale_b="i32")
        constexprs = {"stride_ak": 1, "stride_bk": 1, "stride_on": 1}
        grid = (f"cdiv(M, {config.block_m}) * cdiv(N, {config.block_n})", "1", "1")
        return self._spec(config, signature, constexprs, self._common_params(), grid)


class ScaledMmTmaFamily(ScaledMmFamily):
    """Hopper's persistent FP8 kernel as device binaries: as the pointer kernel's (``ScaledMmFamily``), with a, b and
    out moving through device-side tensor descriptors (Triton's global scratch holds them) and a persistent grid of
    at most the SM count, baked in. A config whose operand stages and output tile overflow shared memory in an output
    dtype (128 x 256 in float32) gets no binary in that dtype."""

    name = SCALED_MM_TMA_FAMILY_NAME
    kernel_source = (SCALED_MM_KERNELS, "scaled_mm_persistent_tma_kernel")
    configs = SCALED_MM_TMA_CONFIGS
    exact_archs = (90,)
    # Above the pointer kernel where both fit, as their Python kernels rank.
    priority = 20

    def shared_memory_bytes(self, config: MatmulConfig, out_element_size: int) -> int:
        return _tma_shared_memory_bytes(config, out_element_size)

    def binary_options(self, arch: int, multiprocessors: int, rows: int) -> dict:
        return {"multiprocessors": multiprocessors}

    def binary_spec(self, config: MatmulConfig, dtype: torch.dtype, layout_variant: str,
                    multiprocessors: int = 132) -> BinarySpec:
        self._check_layout(layout_variant)
        signature = self._pointers(dtype)
        signature.update(stride_am="i32", stride_bn="i32", stride_om="i32", stride_scale_a="i32",
                         stride_scale_b="i32", num_programs="i32")
        params = self._common_params() + (ManifestParam.constant(multiprocessors),)
        # The loop strides by num_programs, so the grid must not exceed it.
        grid = (f"min({multiprocessors}, cdiv(M, {config.block_m}) * cdiv(N, {config.block_n}))", "1", "1")
        return self._spec(config, signature, {}, params, grid)


SCALED_MM_FAMILY = ScaledMmFamily()
SCALED_MM_TMA_FAMILY = ScaledMmTmaFamily()
