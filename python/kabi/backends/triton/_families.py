"""Kernel families: what each Triton kernel accepts, how Python launches it, and how it compiles to a binary.

A family pairs one ``@triton.jit`` kernel with its constraints (archs, dtypes, layouts, shapes) and two ways to run
it: ``launch`` (the Triton JIT launcher, from Python) and ``binary_spec`` (the specialization, parameter list and
grid rule that ``compile_to_binary`` turns into a cubin and a manifest).

Importing this module imports no Triton: the constraints are all registration needs. A family's ``kernel`` (and so
Triton) is imported at its first launch or compile (``_kernel_modules``).

Example::

    family = FAMILIES["tiled"]
    config = family.configs[0]
    problem = MatmulProblem(m=512, n=512, k=512, element_size=2, arch=90)
    if not family.unsupported_reason(config, problem):
        c = family.launch(config, a, b)
"""

from __future__ import annotations

import abc
import functools
from dataclasses import dataclass

import torch

from ._configs import HOPPER_CONFIGS, SMALL_M_CONFIGS, TILED_CONFIGS, MatmulConfig, ceil_div, fits_problem
from ._decode_configs import DECODE_CONFIGS, DecodeConfig, decode_unsupported_reason
from ._kernel_modules import DECODE_KERNELS, MATMUL_KERNELS, KernelModule
from ._manifest import ManifestParam

_TRITON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
# float32 runs tl.dot in full IEEE float32 (no tf32), so it meets the op's float32 tolerance.
_INPUT_PRECISION = "ieee"
# Every kernel computes offsets in 32 bits.
_MAX_ELEMENTS = 2**31 - 1
# A row-major view over K: "contiguous,row_strided"; its transpose: "col_strided"; anything: "strided".
LAYOUT_VARIANTS = {
    "row_major": ("contiguous", "row_strided"),
    "column_major": ("col_strided",),
    "strided": ("contiguous", "row_strided", "col_strided", "general"),
}


@dataclass(frozen=True)
class MatmulProblem:
    """What a supports predicate knows of a call: sizes, element size, the device's arch (None on the CPU
    interpreter) and whether each input is a column-major view."""

    m: int
    n: int
    k: int
    element_size: int
    arch: int | None
    a_column_major: bool = False
    b_column_major: bool = False


@dataclass(frozen=True)
class BinarySpec:
    """How to specialize a family's kernel for a binary: the ASTSource inputs and the launch spec of the result,
    except the scratch parameters, which come from the compiled kernel's metadata."""

    signature: dict
    constexprs: dict
    attrs: dict
    params: tuple
    grid: tuple
    layouts: tuple


def _matrix_orientation(matrix: torch.Tensor) -> tuple[bool, int]:
    """(column_major, leading stride) of a 2-D matrix, or (False, 0) when neither dimension has unit stride.
    A one-row or one-column matrix counts as row-major, with a 16-byte multiple as its (never used) stride."""
    rows, cols = matrix.shape
    row_stride, col_stride = matrix.stride()
    if col_stride == 1 or cols == 1:
        return False, row_stride if rows > 1 else -(-cols // 8) * 8
    if row_stride == 1 or rows == 1:
        return True, col_stride
    return False, 0


def _tma_operand(matrix: torch.Tensor) -> tuple[torch.Tensor, bool, int]:
    """(matrix, column_major, leading stride) ready for a TMA descriptor: a view without a unit stride or with a
    pitch that is not a multiple of 16 bytes is copied to a dense row-major matrix first."""
    column_major, leading_stride = _matrix_orientation(matrix)
    if leading_stride == 0 or (leading_stride * matrix.element_size()) % 16:
        matrix = matrix.contiguous()
        column_major, leading_stride = _matrix_orientation(matrix)
    return matrix, column_major, leading_stride


@functools.lru_cache(maxsize=None)
def device_facts(device: torch.device) -> tuple[int | None, int]:
    """(arch, streaming multiprocessors) of a CUDA device; (None, 4) for the CPU interpreter, where 4 programs
    still exercise the persistent loop."""
    if device.type != "cuda":
        return None, 4
    properties = torch.cuda.get_device_properties(device)
    return properties.major * 10 + properties.minor, properties.multi_processor_count


def _pointer_attrs(signature: dict) -> dict:
    # Pointers are 16-byte aligned (the kernels declare alignment 16): Triton vectorizes their loads.
    return {(position,): [["tt.divisibility", 16]]
            for position, kind in enumerate(signature.values()) if kind.startswith("*")}


class KernelFamily(abc.ABC):
    """One Triton kernel and everything kabi needs to register, launch and compile it."""

    name: str
    # Where the @triton.jit kernel is: its module and name (read through ``kernel``).
    kernel_source: tuple[KernelModule, str]
    configs: tuple
    arch_min: int = 80
    exact_archs: tuple = ()
    dtypes: tuple = (torch.float16, torch.bfloat16, torch.float32)
    layout_variants: tuple = ("row_major", "column_major", "strided")
    alignment: int = 0
    priority: int = 10
    # Why binary_spec cannot describe the kernel as a device binary (it is then a Python kernel only); "" if it can.
    binary_refusal: str = ""

    @functools.cached_property
    def kernel(self):
        """The ``@triton.jit`` kernel, imported (with Triton) at the first read."""
        module, kernel_name = self.kernel_source
        return getattr(module, kernel_name)

    def unsupported_reason(self, config: MatmulConfig, problem: MatmulProblem) -> str:
        """Why this (family, config) should not run the problem, or "" if it should. Dtype, arch, layout class
        and batch are checked by kabi's declared filters; this checks what the sizes tell."""
        if max(problem.m * problem.k, problem.k * problem.n, problem.m * problem.n) > _MAX_ELEMENTS:
            return "an operand has more than 2**31 - 1 elements; the kernels use 32-bit offsets"
        return fits_problem(self.name, config, problem.m, problem.n, problem.k, problem.element_size, problem.arch)

    def launch(self, config: MatmulConfig, a: torch.Tensor, b: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """c = a @ b through Triton's JIT launcher; writes into ``out`` when given (shape [M, N], a's dtype)."""
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty((m, n), dtype=a.dtype, device=a.device) if out is None else out
        if m == 0 or n == 0:
            return c
        if k == 0:
            return c.zero_()
        strides = (*a.stride(), *b.stride(), *c.stride())
        # Written out rather than looped: this runs on every call, where each microsecond counts.
        if ((m - 1) * abs(strides[0]) + (k - 1) * abs(strides[1]) >= _MAX_ELEMENTS
                or (k - 1) * abs(strides[2]) + (n - 1) * abs(strides[3]) >= _MAX_ELEMENTS
                or (m - 1) * abs(strides[4]) + (n - 1) * abs(strides[5]) >= _MAX_ELEMENTS):
            raise ValueError(f"{self.name}: an operand spans more than 2**31 - 1 elements (strides {strides}); "
                             "the kernels use 32-bit offsets")
        self._launch(config, a, b, c, m, n, k, strides)
        return c

    @abc.abstractmethod
    def _launch(self, config: MatmulConfig, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, m: int, n: int,
                k: int, strides: tuple) -> None:
        """Launch on validated operands: sizes and the six strides of a, b and c (row, column each)."""

    @abc.abstractmethod
    def binary_spec(self, config: MatmulConfig, dtype: torch.dtype, layout_variant: str) -> BinarySpec:
        """What compiling this family's kernel for (config, dtype, layout variant) needs: signature, grid, params."""


def _operand_signature(dtype: torch.dtype) -> dict:
    element = "*" + _TRITON_DTYPES[dtype]
    return {"a_ptr": element, "b_ptr": element, "c_ptr": element, "M": "i32", "N": "i32", "K": "i32"}


def _stride_params(layout_variant: str, strides: tuple) -> tuple[dict, dict, list]:
    """Signature entries, constexprs and manifest params for (tensor index, dim, argument name) strides: a unit
    stride of the variant's layout becomes the constant 1 (which Triton drops from the entry)."""
    signature, constexprs, params = {}, {}, []
    unit_dim = {"row_major": -1, "column_major": -2}.get(layout_variant)
    for tensor_index, dim, name in strides:
        # The output is always row-major; inputs follow the variant.
        is_unit = dim == -1 if tensor_index == 2 else dim == unit_dim
        if is_unit:
            signature[name] = "constexpr"
            constexprs[name] = 1
        else:
            signature[name] = "i32"
            params.append(ManifestParam.stride(tensor_index, dim))
    return signature, constexprs, params


_TENSOR_AND_DIM_PARAMS = (ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2),
                          ManifestParam.dim("M"), ManifestParam.dim("N"), ManifestParam.dim("K"))
_MATMUL_STRIDES = ((0, -2, "stride_am"), (0, -1, "stride_ak"), (1, -2, "stride_bk"), (1, -1, "stride_bn"),
                   (2, -2, "stride_cm"), (2, -1, "stride_cn"))


class TiledFamily(KernelFamily):
    name = "tiled"
    kernel_source = (MATMUL_KERNELS, "matmul_tiled_kernel")
    configs = TILED_CONFIGS

    def _launch(self, config, a, b, c, m, n, k, strides):
        grid = (ceil_div(m, config.block_m) * ceil_div(n, config.block_n),)
        self.kernel[grid](a, b, c, m, n, k, *strides,
                          BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m, INPUT_PRECISION=_INPUT_PRECISION, CHECK_ROW_PITCHES=False,
                          num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)

    def binary_spec(self, config, dtype, layout_variant):
        signature = _operand_signature(dtype)
        stride_signature, constexprs, stride_params = _stride_params(layout_variant, _MATMUL_STRIDES)
        signature.update(stride_signature)
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                         INPUT_PRECISION="constexpr", CHECK_ROW_PITCHES="constexpr")
        constexprs.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m, INPUT_PRECISION=_INPUT_PRECISION,
                          CHECK_ROW_PITCHES=layout_variant == "row_major")
        grid = (f"cdiv(M, {config.block_m}) * cdiv(N, {config.block_n})", "1", "1")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature),
                          _TENSOR_AND_DIM_PARAMS + tuple(stride_params), grid, LAYOUT_VARIANTS[layout_variant])


class SmallMFamily(KernelFamily):
    name = "small_m"
    kernel_source = (MATMUL_KERNELS, "matmul_small_m_kernel")
    configs = SMALL_M_CONFIGS
    _REDUCE_BLOCK = 1024

    def _launch(self, config, a, b, c, m, n, k, strides):
        grid = (ceil_div(n, config.block_n), config.split_k, ceil_div(m, config.block_m))
        if config.split_k == 1:
            out, out_strides = c, (strides[4], strides[5], 0)
        else:
            out = torch.empty((config.split_k, m, n), dtype=torch.float32, device=a.device)
            out_strides = (n, 1, m * n)
        self.kernel[grid](a, b, out, m, n, k, *strides[:4], *out_strides,
                          BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          SPLIT_K=config.split_k, INPUT_PRECISION=_INPUT_PRECISION, CHECK_ROW_PITCHES=False,
                          num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
        if config.split_k > 1:
            MATMUL_KERNELS.split_k_reduce_kernel[(ceil_div(m * n, self._REDUCE_BLOCK),)](
                out, c, m, n, strides[4], strides[5], SPLIT_K=config.split_k, BLOCK=self._REDUCE_BLOCK, num_warps=4,
                enable_fp_fusion=True)

    def binary_spec(self, config, dtype, layout_variant):
        if config.split_k != 1:
            raise ValueError(f"config: split_k={config.split_k} needs a second (reduction) launch, and a manifest "
                             "describes one entry; compile a split_k=1 config of the small_m family")
        signature = _operand_signature(dtype)
        signature["out_ptr"] = signature.pop("c_ptr")
        signature = {name: signature[name] for name in ("a_ptr", "b_ptr", "out_ptr", "M", "N", "K")}
        strides = _MATMUL_STRIDES[:4] + ((2, -2, "stride_om"), (2, -1, "stride_on"))
        stride_signature, constexprs, stride_params = _stride_params(layout_variant, strides)
        signature.update(stride_signature)
        signature["stride_split"] = "i32"
        stride_params.append(ManifestParam.constant(0))
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", SPLIT_K="constexpr",
                         INPUT_PRECISION="constexpr", CHECK_ROW_PITCHES="constexpr")
        constexprs.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=1,
                          INPUT_PRECISION=_INPUT_PRECISION, CHECK_ROW_PITCHES=layout_variant == "row_major")
        grid = (f"cdiv(N, {config.block_n})", "1", f"cdiv(M, {config.block_m})")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature),
                          _TENSOR_AND_DIM_PARAMS + tuple(stride_params), grid, LAYOUT_VARIANTS[layout_variant])


class PersistentTmaFamily(KernelFamily):
    name = "persistent_tma"
    kernel_source = (MATMUL_KERNELS, "matmul_persistent_tma_kernel")
    configs = HOPPER_CONFIGS
    exact_archs = (90,)
    dtypes = (torch.float16, torch.bfloat16)
    layout_variants = ("row_major", "column_major")
    alignment = 16
    priority = 20

    def unsupported_reason(self, config, problem):
        reason = super().unsupported_reason(config, problem)
        if reason:
            return reason
        # TMA needs 16-byte row pitches; dense operands have the pitch of their inner dimension. A strided view
        # with another pitch still runs: launch copies it (see _tma_operand).
        a_pitch = problem.m if problem.a_column_major else problem.k
        b_pitch = problem.k if problem.b_column_major else problem.n
        for name, pitch in (("a", a_pitch), ("b", b_pitch), ("c", problem.n)):
            if (pitch * problem.element_size) % 16:
                return f"{name}'s rows of {pitch} elements are not a multiple of 16 bytes, as TMA requires"
        return ""

    def launch(self, config, a, b, out=None):
        if out is not None and (out.stride(1) != 1 or (out.stride(0) * out.element_size()) % 16):
            return out.copy_(super().launch(config, a, b))
        return super().launch(config, a, b, out)

    def _launch(self, config, a, b, c, m, n, k, strides):
        a, a_column_major, stride_a = _tma_operand(a)
        b, b_column_major, stride_b = _tma_operand(b)
        _, multiprocessors = device_facts(a.device)
        num_programs = min(multiprocessors, ceil_div(m, config.block_m) * ceil_div(n, config.block_n))
        with _TorchScratchAllocator(a.device):
            self.kernel[(num_programs,)](
                a, b, c, m, n, k, stride_a, stride_b, strides[4], num_programs,
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                A_COLUMN_MAJOR=a_column_major, B_COLUMN_MAJOR=b_column_major, CHECK_PITCHES=False,
                num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)

    def binary_spec(self, config, dtype, layout_variant, multiprocessors=132):
        if layout_variant not in self.layout_variants:
            raise ValueError(f"layout: the persistent_tma family compiles for {self.layout_variants} "
                             f"(TMA needs a unit stride); got {layout_variant!r}")
        column_major = layout_variant == "column_major"
        signature = _operand_signature(dtype)
        signature.update(stride_a="i32", stride_b="i32", stride_c="i32", num_programs="i32",
                         BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                         A_COLUMN_MAJOR="constexpr", B_COLUMN_MAJOR="constexpr", CHECK_PITCHES="constexpr")
        constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m, A_COLUMN_MAJOR=column_major, B_COLUMN_MAJOR=column_major,
                          CHECK_PITCHES=True)
        leading_dim = -1 if column_major else -2
        params = _TENSOR_AND_DIM_PARAMS + (
            ManifestParam.stride(0, leading_dim), ManifestParam.stride(1, leading_dim), ManifestParam.stride(2, -2),
            ManifestParam.constant(multiprocessors))
        # The loop strides by num_programs, so the grid must not exceed it; fewer programs than tiles is the point.
        grid = (f"min({multiprocessors}, cdiv(M, {config.block_m}) * cdiv(N, {config.block_n}))", "1", "1")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature), params, grid,
                          LAYOUT_VARIANTS[layout_variant])


class _TorchScratchAllocator:
    """Within the block, Triton allocates the global scratch of device-side tensor descriptors (a few hundred
    bytes per program) with torch's caching allocator on ``device``; the caller's own allocator comes back after.
    Triton keeps its allocator in a ContextVar: setting and resetting it is thread-safe and costs ~0.1 us."""

    def __init__(self, device: torch.device) -> None:
        self._device = device

    def _allocate(self, size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device=self._device)

    def __enter__(self) -> None:
        self._token = _triton_allocator().set(self._allocate)

    def __exit__(self, *exc_info) -> None:
        _triton_allocator().reset(self._token)


@functools.cache
def _triton_allocator():
    """Triton's ContextVar of the scratch allocator; imported with the first kernel that needs it."""
    from triton.runtime import _allocation

    return _allocation._allocator


class DecodeFamily(KernelFamily):
    """Decode shapes (M <= 64) at the memory roof: ``matmul_decode_kernel`` streams the weight b once, as a
    [K, N] matrix or as the transposed view of an nn.Linear weight [N, K], read in place (never copied)."""

    name = "decode"
    kernel_source = (DECODE_KERNELS, "matmul_decode_kernel")
    configs = DECODE_CONFIGS
    # Above the general small-M kernel (10, less its config rank), so that an untuned decode call starts from a
    # kernel built for it.
    priority = 30
    # Its loads are wide only where Triton knows, at launch, which of b's strides is 1 and that K and the row pitches
    # are multiples of 16 bytes; a manifest declares neither (docs/triton.md, "Limits of device binaries").
    binary_refusal = ("the decode family runs as a Python kernel only: a manifest cannot declare the per-input "
                      "layouts (a row-major, b column-major) and the pitches its wide loads depend on; compile the "
                      "small_m family for a decode binary")
    _REDUCE_BLOCK = 1024

    def unsupported_reason(self, config: DecodeConfig, problem: MatmulProblem) -> str:
        if max(problem.m * problem.k, problem.k * problem.n, problem.m * problem.n) > _MAX_ELEMENTS:
            return "an operand has more than 2**31 - 1 elements; the kernels use 32-bit offsets"
        return decode_unsupported_reason(config, problem.m, problem.n, problem.k, problem.element_size,
                                         problem.arch, problem.b_column_major)

    def _launch(self, config, a, b, c, m, n, k, strides):
        block_m = config.rows_per_program(m)
        grid = (ceil_div(n, config.block_n), config.split_k, ceil_div(m, block_m))
        if config.split_k == 1:
            out, out_strides = c, (strides[4], strides[5], 0)
        else:
            out = torch.empty((config.split_k, m, n), dtype=torch.float32, device=a.device)
            out_strides = (n, 1, m * n)
        # Programmatic dependent launch of the split-K sum: a CUDA feature (the interpreter runs neither intrinsic).
        pdl = a.device.type == "cuda"
        self.kernel[grid](a, b, out, m, n, k, *strides[:4], *out_strides,
                          BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=config.split_k,
                          USE_DOT=config.style == "dot", WEIGHT_N_BY_K=config.weight_layout == "n_by_k",
                          INPUT_PRECISION=_INPUT_PRECISION, NUM_STAGES=config.num_stages, PDL=pdl,
                          num_warps=config.num_warps, enable_fp_fusion=True)
        if config.split_k > 1:
            DECODE_KERNELS.split_k_sum_kernel[(ceil_div(m * n, self._REDUCE_BLOCK),)](
                out, c, m, n, strides[4], strides[5], SPLIT_K=config.split_k, BLOCK=self._REDUCE_BLOCK, PDL=pdl,
                num_warps=4, enable_fp_fusion=True, launch_pdl=pdl)

    def binary_spec(self, config, dtype, layout_variant):
        raise ValueError(self.binary_refusal)


FAMILIES = {family.name: family
            for family in (TiledFamily(), PersistentTmaFamily(), SmallMFamily(), DecodeFamily())}
