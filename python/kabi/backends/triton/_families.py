"""Kernel families: what each Triton kernel accepts, how Python launches it, and how it compiles to a binary.

A family pairs one ``@triton.jit`` kernel with its constraints (archs, dtypes, layouts, shapes) and two ways to run
it: ``launch`` (the Triton JIT launcher, from Python) and ``binary_spec`` (the specialization, parameter list and
grid rule that ``compile_to_binary`` turns into a cubin and a manifest). ``KernelFamily`` is what compiling and
registering binaries needs, for any op; ``MatmulFamily`` adds matmul's problem rules and launcher, and ``FAMILIES``
holds matmul's families (the grouped GEMM's family is in ``_grouped``).

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
from typing import NamedTuple

import torch

from ._configs import (HOPPER_CONFIGS, SMALL_M_CONFIGS, TILED_CONFIGS, MatmulConfig, ceil_div, fits_problem,
                       shared_memory_limit)
from ._decode_configs import DECODE_CONFIGS, DecodeConfig, decode_unsupported_reason
from ._kernel_modules import DECODE_KERNELS, MATMUL_KERNELS, KernelModule
from ._manifest_params import ManifestParam

_TRITON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
# float32 runs tl.dot in full IEEE float32 (no tf32), so it meets the op's float32 tolerance.
_INPUT_PRECISION = "ieee"
# Every kernel computes offsets in 32 bits.
_MAX_ELEMENTS = 2**31 - 1
_ROW_MAJOR = ("contiguous", "row_strided")
_COLUMN_MAJOR = ("col_strided",)
_ANY_STRIDES = ("contiguous", "row_strided", "col_strided", "general")
# The layout classes of (a, b) each binary layout variant serves: both row-major (a unit stride along the last
# dimension), both column-major (transposed views), a row-major with b column-major (``x @ w.T`` of an nn.Linear
# weight ``w[N, K]``), or any strides.
LAYOUT_VARIANTS = {
    "row_major": (_ROW_MAJOR, _ROW_MAJOR),
    "column_major": (_COLUMN_MAJOR, _COLUMN_MAJOR),
    "row_column": (_ROW_MAJOR, _COLUMN_MAJOR),
    "strided": (_ANY_STRIDES, _ANY_STRIDES),
}
# Per layout variant, the dimension of (a, b) whose stride is 1, folded into the code; None: a stride parameter.
_UNIT_STRIDE_DIMS = {"row_major": (-1, -1), "column_major": (-2, -2), "row_column": (-1, -2), "strided": (None, None)}
# What a binary may declare of K, N and the input pitches, as Triton's JIT specializes on it (``tt.divisibility``):
# multiples of this many elements.
_DECLARED_DIVISOR = 16


class MatmulProblem(NamedTuple):
    """What a supports predicate knows of a call: sizes, element size, the device's arch (None on the CPU
    interpreter) and whether each input is a column-major view."""

    m: int
    n: int
    k: int
    element_size: int
    arch: int | None
    a_column_major: bool = False
    b_column_major: bool = False


class BinarySpec(NamedTuple):
    """How to specialize a family's kernel for a binary: the ASTSource inputs and the launch spec of the result,
    except the scratch parameters, which come from the compiled kernel's metadata. ``input_layouts`` holds the
    layout classes of each input of the op (the manifest's per-input layouts); ``batch_mode`` the leading dimensions
    the image reads correctly (the manifest's ``batch_mode``)."""

    signature: dict
    constexprs: dict
    attrs: dict
    params: tuple
    grid: tuple
    input_layouts: tuple
    batch_mode: str = "none"
    # The dtypes of the type variables the binary's dtype does not bind, in kabi.h's syntax (the manifest's
    # ``type_constraints``): scaled_mm's FP8 operand formats, its dtype being the output's.
    type_constraints: str = ""

    @property
    def layouts(self) -> tuple:
        """Every layout class some input takes, in kabi's order (the manifest's ``layouts``)."""
        return tuple(name for name in _ANY_STRIDES if any(name in classes for classes in self.input_layouts))


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


def _pointer_attrs(signature: dict, divisible: tuple = ()) -> dict:
    # Pointers are 16-byte aligned (the kernels declare alignment 16): Triton vectorizes their loads. The integers
    # named in ``divisible`` are multiples of 16 (the manifest declares it, and the core checks it before a launch).
    return {(position,): [["tt.divisibility", 16]]
            for position, (name, kind) in enumerate(signature.items()) if kind.startswith("*") or name in divisible}


class KernelFamily(abc.ABC):
    """One Triton kernel of an op and what kabi needs to compile it to device binaries and register them: its
    configs, archs, dtypes and layout variants, and ``binary_spec``, which a binary of one (config, dtype, layout
    variant) is compiled from."""

    name: str
    # The op its kernels implement.
    op: str = "matmul"
    # Where the @triton.jit kernel is: its module and name (read through ``kernel``).
    kernel_source: tuple[KernelModule, str]
    configs: tuple
    arch_min: int = 80
    exact_archs: tuple = ()
    dtypes: tuple = (torch.float16, torch.bfloat16, torch.float32)
    layout_variants: tuple = ("row_major", "column_major", "row_column", "strided")
    # The dtypes whose binaries registration compiles at a first dispatch: float32 kernels run without tensor cores
    # (IEEE float32, docs/triton.md) and lose to cuBLAS, so they stay Python kernels.
    native_dtypes: tuple = (torch.float16, torch.bfloat16)
    alignment: int = 0
    priority: int = 10

    def binary_layouts(self, config) -> tuple:
        """The layout variants a binary of ``config`` can be compiled for."""
        return self.layout_variants

    def binary_rows(self, config, dtype: torch.dtype, arch: int) -> tuple:
        """The row counts (BLOCK_M) a binary of ``config`` in ``dtype`` is compiled for on ``arch``, one binary each;
        (0,): one binary serves every M; (): none is."""
        return (0,)

    def binary_options(self, arch: int, multiprocessors: int, rows: int) -> dict:
        """The keyword arguments of ``binary_spec`` for a binary of ``arch`` (and of ``rows`` rows per program, for
        a GPU of ``multiprocessors`` SMs): none, unless the family's code depends on them."""
        return {}

    @functools.cached_property
    def kernel(self):
        """The ``@triton.jit`` kernel, imported (with Triton) at the first read."""
        module, kernel_name = self.kernel_source
        return getattr(module, kernel_name)

    @abc.abstractmethod
    def binary_spec(self, config, dtype: torch.dtype, layout_variant: str) -> BinarySpec:
        """What compiling this family's kernel for (config, dtype, layout variant) needs: signature, grid, params."""


class MatmulFamily(KernelFamily):
    """A family of matmul kernels: what each config accepts of a problem and how Python launches it."""

    def rows_for(self, config, m: int) -> int:
        """The row count of the binary of ``config`` that serves M rows (0: the one binary)."""
        return 0

    def binary_unsupported_reason(self, config, problem: MatmulProblem) -> str:
        """Why a binary of ``config`` declines a problem its Python kernel takes, judged from the sizes (dense
        pitches assumed): what the image assumes of the sizes; "" if nothing. A pointer kernel's row_column binary
        declares K and N multiples of 16 (``_ROW_COLUMN_DIVISIBLE``)."""
        if not problem.a_column_major and problem.b_column_major:
            return _divisibility_reason(problem.k, problem.n)
        return ""

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


def _operand_signature(dtype: torch.dtype) -> dict:
    element = "*" + _TRITON_DTYPES[dtype]
    return {"a_ptr": element, "b_ptr": element, "c_ptr": element, "M": "i32", "N": "i32", "K": "i32"}


def _stride_params(layout_variant: str, strides: tuple, divisible: tuple = ()) -> tuple[dict, dict, list]:
    """Signature entries, constexprs and manifest params for (tensor index, dim, argument name) strides: a unit
    stride of the variant's layout becomes the constant 1 (which Triton drops from the entry); the strides named in
    ``divisible`` are declared multiples of 16."""
    signature, constexprs, params = {}, {}, []
    unit_dims = _UNIT_STRIDE_DIMS[layout_variant]
    for tensor_index, dim, name in strides:
        # The output is always row-major; inputs follow the variant.
        is_unit = dim == -1 if tensor_index == 2 else dim == unit_dims[tensor_index]
        if is_unit:
            signature[name] = "constexpr"
            constexprs[name] = 1
        else:
            signature[name] = "i32"
            params.append(ManifestParam.stride(tensor_index, dim,
                                               divisible_by=_DECLARED_DIVISOR if name in divisible else 0))
    return signature, constexprs, params


_TENSOR_AND_DIM_PARAMS = (ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2),
                          ManifestParam.dim("M"), ManifestParam.dim("N"), ManifestParam.dim("K"))
_TENSOR_PARAMS = _TENSOR_AND_DIM_PARAMS[:3]
# What a row-major a with a column-major b (``x @ w.T``) declares: the pitch of each runs along K, and neither has a
# unit stride that ``CHECK_ROW_PITCHES`` could test, so K, N and both pitches are declared multiples of 16.
_ROW_COLUMN_DIVISIBLE = ("N", "K", "stride_am", "stride_bn")


def _dim_params(divisible: tuple) -> tuple:
    """The dim params of a matmul entry (M, N, K), those named in ``divisible`` declared multiples of 16."""
    return tuple(ManifestParam.dim(name, divisible_by=_DECLARED_DIVISOR if name in divisible else 0)
                 for name in "MNK")


def _divisibility_reason(k: int, n: int) -> str:
    """Why a binary declaring K and N multiples of 16 declines the problem; "" if they are."""
    for name, size in (("K", k), ("N", n)):
        if size % _DECLARED_DIVISOR:
            return f"its binary assumes {name} is a multiple of {_DECLARED_DIVISOR} (wide loads); {name}={size}"
    return ""
_MATMUL_STRIDES = ((0, -2, "stride_am"), (0, -1, "stride_ak"), (1, -2, "stride_bk"), (1, -1, "stride_bn"),
                   (2, -2, "stride_cm"), (2, -1, "stride_cn"))
# The bytes of a partial sum (float32) and of a tile counter (int32) of serial split-K (store_split_k_tile).
_PARTIAL_BYTES = 4
_COUNTER_BYTES = 4


def _split_entry(dtype: torch.dtype, layout_variant: str, divisible: tuple, split_k: int,
                 tile_size: int) -> tuple[dict, dict, tuple]:
    """Signature, constexprs and params of the entry of a kernel that splits K (small_m, decode): a, b, c, then
    partial_ptr and counter_ptr, then M, N, K and the strides (unit ones folded in, ``divisible`` ones declared
    multiples of 16). With ``split_k`` > 1 partial_ptr is scratch for one float32 tile of ``tile_size`` elements per
    program and counter_ptr zeroed scratch holding the tiles' counters (one per tile, so a program's share of 4
    bytes covers them); with 1 both are None, folded out of the entry."""
    signature = _operand_signature(dtype)
    signature = {name: signature[name] for name in ("a_ptr", "b_ptr", "c_ptr")}
    constexprs = {}
    params = _TENSOR_PARAMS
    if split_k > 1:
        signature.update(partial_ptr="*fp32", counter_ptr="*i32")
        params += (ManifestParam.scratch(tile_size * _PARTIAL_BYTES), ManifestParam.zeroed_scratch(_COUNTER_BYTES))
    else:
        signature.update(partial_ptr="constexpr", counter_ptr="constexpr")
        constexprs.update(partial_ptr=None, counter_ptr=None)
    signature.update(M="i32", N="i32", K="i32")
    stride_signature, stride_constexprs, stride_params = _stride_params(layout_variant, _MATMUL_STRIDES, divisible)
    signature.update(stride_signature)
    constexprs.update(stride_constexprs)
    return signature, constexprs, params + _dim_params(divisible) + tuple(stride_params)


class _SplitKCounters:
    """The tile counters of serial split-K launched from Python (``store_split_k_tile``): int32 memory that is zero
    when a launch starts and that the launch leaves zero. One buffer per (device, stream), zeroed once when it is
    allocated (or grown): launches on one stream run in order and can share it, launches on two streams may run at
    once and must not. A launch being captured into a CUDA graph gets its own, zeroed by a memset captured with it
    (a replay may run on any stream, beside eager launches using the cached one); on the CPU (the interpreter) every
    launch gets its own."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}

    def get(self, device: torch.device, count: int) -> torch.Tensor:
        if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return torch.zeros(count, dtype=torch.int32, device=device)
        key = (device.index, torch.cuda.current_stream(device).cuda_stream)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < count:
            buffer = self._buffers[key] = torch.zeros(count, dtype=torch.int32, device=device)
        return buffer


_SPLIT_K_COUNTERS = _SplitKCounters()


def _split_k_buffers(device: torch.device, grid: tuple, tile_size: int) -> tuple:
    """(partial_ptr, counter_ptr) of a launch over ``grid`` (tiles of N, K slices, tiles of M) whose programs each
    hold a float32 tile of ``tile_size`` elements: scratch with a slot per program, and the tiles' counters; (None,
    None) without a split."""
    tiles_n, split_k, tiles_m = grid
    if split_k == 1:
        return None, None
    partial = torch.empty(tiles_n * split_k * tiles_m * tile_size, dtype=torch.float32, device=device)
    return partial, _SPLIT_K_COUNTERS.get(device, tiles_n * tiles_m)


class TiledFamily(MatmulFamily):
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
        divisible = _ROW_COLUMN_DIVISIBLE if layout_variant == "row_column" else ()
        signature = _operand_signature(dtype)
        stride_signature, constexprs, stride_params = _stride_params(layout_variant, _MATMUL_STRIDES, divisible)
        signature.update(stride_signature)
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                         INPUT_PRECISION="constexpr", CHECK_ROW_PITCHES="constexpr")
        constexprs.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m, INPUT_PRECISION=_INPUT_PRECISION,
                          CHECK_ROW_PITCHES=layout_variant == "row_major")
        grid = (f"cdiv(M, {config.block_m}) * cdiv(N, {config.block_n})", "1", "1")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible),
                          _TENSOR_PARAMS + _dim_params(divisible) + tuple(stride_params), grid,
                          LAYOUT_VARIANTS[layout_variant])


class SmallMFamily(MatmulFamily):
    name = "small_m"
    kernel_source = (MATMUL_KERNELS, "matmul_small_m_kernel")
    configs = SMALL_M_CONFIGS

    def _launch(self, config, a, b, c, m, n, k, strides):
        grid = (ceil_div(n, config.block_n), config.split_k, ceil_div(m, config.block_m))
        partial, counters = _split_k_buffers(a.device, grid, config.block_m * config.block_n)
        self.kernel[grid](a, b, c, partial, counters, m, n, k, *strides,
                          BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          SPLIT_K=config.split_k, INPUT_PRECISION=_INPUT_PRECISION, CHECK_ROW_PITCHES=False,
                          num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)

    def binary_spec(self, config, dtype, layout_variant):
        divisible = _ROW_COLUMN_DIVISIBLE if layout_variant == "row_column" else ()
        signature, constexprs, params = _split_entry(dtype, layout_variant, divisible, config.split_k,
                                                     config.block_m * config.block_n)
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", SPLIT_K="constexpr",
                         INPUT_PRECISION="constexpr", CHECK_ROW_PITCHES="constexpr")
        constexprs.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          SPLIT_K=config.split_k, INPUT_PRECISION=_INPUT_PRECISION,
                          CHECK_ROW_PITCHES=layout_variant == "row_major")
        grid = (f"cdiv(N, {config.block_n})", str(config.split_k), f"cdiv(M, {config.block_m})")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible), params, grid,
                          LAYOUT_VARIANTS[layout_variant])


class PersistentTmaFamily(MatmulFamily):
    name = "persistent_tma"
    kernel_source = (MATMUL_KERNELS, "matmul_persistent_tma_kernel")
    configs = HOPPER_CONFIGS
    exact_archs = (90,)
    dtypes = (torch.float16, torch.bfloat16)
    layout_variants = ("row_major", "column_major", "row_column")
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

    def binary_unsupported_reason(self, config, problem):
        # Its binaries declare nothing of the sizes: the kernel checks the pitches TMA needs at run time.
        return ""

    def binary_options(self, arch, multiprocessors, rows):
        return {"multiprocessors": multiprocessors}

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
        a_unit_dim, b_unit_dim = _UNIT_STRIDE_DIMS[layout_variant]
        signature = _operand_signature(dtype)
        signature.update(stride_a="i32", stride_b="i32", stride_c="i32", num_programs="i32",
                         BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                         A_COLUMN_MAJOR="constexpr", B_COLUMN_MAJOR="constexpr", CHECK_PITCHES="constexpr")
        constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                          GROUP_M=config.group_m, A_COLUMN_MAJOR=a_unit_dim == -2, B_COLUMN_MAJOR=b_unit_dim == -2,
                          CHECK_PITCHES=True)
        # Each operand's pitch is the stride of its other dimension.
        params = _TENSOR_AND_DIM_PARAMS + (
            ManifestParam.stride(0, -3 - a_unit_dim), ManifestParam.stride(1, -3 - b_unit_dim),
            ManifestParam.stride(2, -2), ManifestParam.constant(multiprocessors))
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


class DecodeFamily(MatmulFamily):
    """Decode shapes (M <= 64) at the memory roof: ``matmul_decode_kernel`` streams the weight b once, as a
    [K, N] matrix or as the transposed view of an nn.Linear weight [N, K], read in place (never copied).

    Its binaries fix what the JIT launcher specializes at run time: the row count of a program (BLOCK_M: 1 for
    GEMV, 16, 32 or 64 for tl.dot, one binary each), the layouts (a row-major; b as the config reads it, with its
    unit stride folded in), and K, N and the input pitches as multiples of 16 elements, which the wide loads need.
    A split-K config's binary adds its slices in the same launch (serial split-K), as its Python twin does."""

    name = "decode"
    kernel_source = (DECODE_KERNELS, "matmul_decode_kernel")
    configs = DECODE_CONFIGS
    # Above the general small-M kernel (10, less its config rank) for every one of its configs (40 less theirs), so
    # that an untuned decode call starts from a kernel built for it.
    priority = 40
    layout_variants = ("row_major", "row_column")
    _DOT_ROWS = (16, 32, 64)

    def unsupported_reason(self, config: DecodeConfig, problem: MatmulProblem) -> str:
        if max(problem.m * problem.k, problem.k * problem.n, problem.m * problem.n) > _MAX_ELEMENTS:
            return "an operand has more than 2**31 - 1 elements; the kernels use 32-bit offsets"
        return decode_unsupported_reason(config, problem.m, problem.n, problem.k, problem.element_size,
                                         problem.arch, problem.b_column_major)

    def binary_layouts(self, config: DecodeConfig) -> tuple:
        return ("row_column",) if config.weight_layout == "n_by_k" else ("row_major",)

    def binary_rows(self, config: DecodeConfig, dtype: torch.dtype, arch: int) -> tuple:
        # Only the counts whose pipelined tiles fit the arch's shared memory: a binary of another would decline
        # every problem it is compiled for.
        rows = (1,) if config.style == "gemv" else self._DOT_ROWS
        return tuple(count for count in rows
                     if config.shared_memory_bytes(count, dtype.itemsize, arch) <= shared_memory_limit(arch))

    def rows_for(self, config: DecodeConfig, m: int) -> int:
        return config.rows_per_program(m)

    def binary_options(self, arch, multiprocessors, rows):
        return {"rows": rows}

    def binary_unsupported_reason(self, config: DecodeConfig, problem: MatmulProblem) -> str:
        return _divisibility_reason(problem.k, problem.n)

    def _launch(self, config, a, b, c, m, n, k, strides):
        block_m = config.rows_per_program(m)
        grid = (ceil_div(n, config.block_n), config.split_k, ceil_div(m, block_m))
        partial, counters = _split_k_buffers(a.device, grid, block_m * config.block_n)
        self.kernel[grid](a, b, c, partial, counters, m, n, k, *strides,
                          BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=config.split_k,
                          USE_DOT=config.style == "dot", WEIGHT_N_BY_K=config.weight_layout == "n_by_k",
                          INPUT_PRECISION=_INPUT_PRECISION, NUM_STAGES=config.num_stages,
                          num_warps=config.num_warps, enable_fp_fusion=True)

    def binary_spec(self, config, dtype, layout_variant, rows=0):
        if layout_variant not in self.binary_layouts(config):
            raise ValueError(f"layout: {config.tag} reads {' or '.join(self.binary_layouts(config))}; "
                             f"got {layout_variant!r}")
        if rows not in self._DOT_ROWS + (1,):
            raise ValueError(f"rows: {config.tag} compiles for BLOCK_M 1 (GEMV), 16, 32 or 64; got {rows}")
        # Its loads are wide only where Triton knows K, N and the pitches are multiples of 16, as the JIT learns
        # from the values it specializes on.
        divisible = ("N", "K", "stride_am", "stride_bk", "stride_bn")
        signature, constexprs, params = _split_entry(dtype, layout_variant, divisible, config.split_k,
                                                     rows * config.block_n)
        signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", SPLIT_K="constexpr",
                         USE_DOT="constexpr", WEIGHT_N_BY_K="constexpr", INPUT_PRECISION="constexpr",
                         NUM_STAGES="constexpr")
        constexprs.update(BLOCK_M=rows, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=config.split_k,
                          USE_DOT=config.style == "dot", WEIGHT_N_BY_K=config.weight_layout == "n_by_k",
                          INPUT_PRECISION=_INPUT_PRECISION, NUM_STAGES=config.num_stages)
        grid = (f"cdiv(N, {config.block_n})", str(config.split_k), f"cdiv(M, {rows})")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible), params, grid,
                          LAYOUT_VARIANTS[layout_variant])


FAMILIES = {family.name: family
            for family in (TiledFamily(), PersistentTmaFamily(), SmallMFamily(), DecodeFamily())}
