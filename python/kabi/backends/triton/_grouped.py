"""The persistent grouped GEMM from Python: its configs, what each fits, the launcher, and its family of device
binaries.

``launch_grouped_mm(config, x, w, offs, out=...)`` has the Python kernel convention of kabi's ``grouped_mm`` op, so
``functools.partial(launch_grouped_mm, config)`` is a kernel. w is read in place through its strides: [E, K, N], or
the transposed view of an nn.Linear [E, N, K] weight. On sm_90 with TMA-compatible operands (unit inner stride,
16-byte pitches and base addresses) the kernel reads through tensor descriptors; otherwise through pointers.
Importing this module imports no Triton: the launcher imports the kernel (and Triton) at its first call.

``GROUPED_FAMILY`` compiles the same kernel to device binaries (``compile_to_binary``), one per config, dtype, weight
layout and arch (where the config's buffers fit the arch's shared memory), each serving both forms: the core passes
NULL for an absent offs, and the kernel reads the 3-D form from that.

Example::

    out = launch_grouped_mm(GROUPED_CONFIGS[0], x, w_linear.mT, offs)   # x [T, K], w_linear [E, N, K]
    compile_to_binary(GROUPED_FAMILY, GROUPED_CONFIGS[0], "bfloat16", 90, "binaries/", layout="row_column")
"""

from __future__ import annotations

import torch

from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._families import (_COLUMN_MAJOR, _DECLARED_DIVISOR, _ROW_MAJOR, _TRITON_DTYPES, BinarySpec, KernelFamily,
                        _divisibility_reason, _pointer_attrs, _TorchScratchAllocator, device_facts)
from ._kernel_modules import GROUPED_KERNELS
from ._manifest_params import ManifestParam
from ._names import GROUPED_FAMILY_NAME

__all__ = ["GROUPED_CONFIGS", "GROUPED_FAMILY", "grouped_unsupported_reason", "launch_grouped_mm"]

# float32 runs tl.dot in full IEEE float32 (no tf32), so it meets the op's float32 tolerance.
_INPUT_PRECISION = "ieee"
# Programs of the persistent loop on the CPU interpreter, which runs them one after another.
_INTERPRETER_PROGRAMS = 4
# The offsets are read one element after another: a binary takes them dense (or absent, in the 3-D form).
_OFFSETS_LAYOUTS = ("contiguous",)

# Prefill tiles (wgmma-sized: the dense kernels' Hopper tiles, since prefill routes hundreds of rows to each expert
# and the 128x128 tile alone reached only 0.5 of the roof there on the H200), a narrower one for groups of a few
# dozen rows, and a 16-row tile for decode routing (a handful of rows per expert), whose wide K step streams the
# weights. The 128x256 tiles' variants are there for what scripts/debug/grouped_prefill_probe.py measured on the H200
# (fraction of the roof, gate_up / down, T = 32768): on DeepSeek-V3 (~128 rows per expert, 92-180) 128-row tiles
# compute 1.48x the rows routed and 128x256 in 3 stages reached 0.729 / 0.706; a last row tile absorbing the remainder
# (``tail_m``) computes 1.11-1.13x: 0.810 / 0.773 with a 32-row tail, 0.792 / 0.775 with 16 rows and 4 stages. On Qwen3
# (256 rows per expert, compute-bound) tails lose (0.48-0.50) and 4 stages without one is best: 0.578 / 0.528 (3
# stages: 0.547 / 0.500). A tail's second accumulator costs every tile registers (255 and a spill at 128x256 in 3
# stages), so it also loses on Zipf routing (mostly full tiles): 0.51 against 0.62. The short last tile (``short_m``)
# is the other way to pay less for a remainder, while full tiles run the code without it. On DeepSeek-V3 its tiles
# compute 1.25x the rows routed (128-row tiles 1.50-1.63x) but gain nothing there: a remainder's tile, short or not,
# reads its weights once more, and that read is what a tail saves (64 rows, balanced / Zipf: 0.653 / 0.646 on
# gate_up against 0.676 / 0.653). On Qwen3 a 32-row short tile in 4 stages is the best prefill config measured:
# 0.591 / 0.564 on gate_up and 0.552 / 0.544 on down, against 0.565 / 0.558 and 0.515 / 0.519
# (debug-grouped-prefill-probe-nvidia-h200.txt, 2026-12-04). For decode routing (T = 512),
# scripts/debug/grouped_decode_sweep.py found a 16x256 tile with a 128-wide K step in 3 stages at least as fast as
# 16x128x128 on all eight MoE decode cases and up to 12% faster (Qwen3 down, Zipf: 0.808 of the roof, from 0.719;
# debug-grouped-decode-sweep-nvidia-h200.txt).
GROUPED_CONFIGS = (
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=3),
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=3, tail_m=32),
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=4, tail_m=16),
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=4),
    MatmulConfig(128, 256, 64, num_warps=8, num_stages=4, short_m=32),
    MatmulConfig(128, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(128, 128, 64, num_warps=8, num_stages=3),
    MatmulConfig(64, 128, 64, num_warps=4, num_stages=4),
    MatmulConfig(16, 128, 128, num_warps=4, num_stages=4),
    MatmulConfig(16, 256, 128, num_warps=4, num_stages=3),
)


def grouped_unsupported_reason(config: MatmulConfig, rows: int, n: int, k: int, element_size: int,
                               arch: int | None) -> str:
    """Why ``config`` should not run a grouped product of ``rows`` rows in all, or "" if it should: BLOCK_M at most
    the rows rounded up to a power of two, and operand buffers that fit the arch's shared memory (``arch`` None: the
    CPU interpreter)."""
    if config.block_m > max(16, next_power_of_two(rows)):
        return f"BLOCK_M={config.block_m} is above the rows ({rows}) rounded up to a power of two"
    return _shared_memory_reason(config, element_size, arch)


def _shared_memory_reason(config: MatmulConfig, element_size: int, arch: int | None) -> str:
    """Why ``config``'s operand buffers (a tail's rows included) do not fit the arch's shared memory, or ""."""
    needed = config.shared_memory_bytes(element_size)
    limit = shared_memory_limit(arch)
    if needed > limit:
        return f"needs ~{needed} bytes of shared memory; sm_{arch} allows {limit}"
    return ""


def grouped_work_items(config: MatmulConfig, groups: int, rows: int, n: int, has_offsets: bool) -> int:
    """The most (group, tile) items a launch has: in the 2-D form cdiv(rows, BLOCK_M) + groups row tiles (each group
    and the tail past the last offset end at most one partial tile), in the 3-D form groups * cdiv(rows, BLOCK_M);
    times the column tiles. A config's ``tail_m`` only merges a group's last two row tiles, so this bounds its items
    too; its ``short_m`` changes no count. The persistent grid is the smaller of this and the SM count."""
    row_tiles = ceil_div(rows, config.block_m) + groups if has_offsets else groups * ceil_div(rows, config.block_m)
    return row_tiles * ceil_div(n, config.block_n)


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
    and returned when it is given. A config with a ``tail_m`` lets a group's last row tile absorb up to that many
    rows past BLOCK_M; one with a ``short_m`` runs a last row tile of at most that many rows as a tile that tall."""
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
    # The 2-D form's x and out have no group stride (0, as the core passes a device binary for a missing dim).
    x_strides = (0, *x.stride()) if offs is not None else x.stride()
    out_strides = (0, *result.stride()) if offs is not None else result.stride()
    work_items = grouped_work_items(config, groups, rows, n, offs is not None)
    if x.device.type == "cuda":
        num_programs = min(device_facts(x.device)[1], work_items)
    else:
        num_programs = min(_INTERPRETER_PROGRAMS, work_items)
    with _TorchScratchAllocator(x.device):
        GROUPED_KERNELS.grouped_mm_kernel[(num_programs,)](
            x, w, offs, result, groups, rows, n, k, *x_strides, *w.stride(), *out_strides, num_programs,
            USE_TMA=use_tma, W_N_BY_K=w_n_by_k, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
            BLOCK_K=config.block_k, DOT_IN_FLOAT32=x.dtype == torch.bfloat16 and x.device.type == "cpu",
            INPUT_PRECISION=_INPUT_PRECISION, TAIL_M=config.tail_m, SHORT_M=config.short_m,
            num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    return result


class GroupedFamily(KernelFamily):
    """The persistent grouped GEMM as device binaries: one per (config, dtype, weight layout, arch) whose buffers fit
    the arch's shared memory, serving both forms of grouped_mm (an absent offs reaches the kernel as NULL).
    ``row_column`` reads w as the transposed view of an nn.Linear [E, N, K] weight, ``row_major`` as a row-major
    [E, K, N]; x is row-major either way. sm_90 reads through TMA (device-side tensor descriptors: Triton's global
    scratch), sm_80 through pointers.

    What the image assumes, the manifest declares, so the core declines (with a reason) what it would compute wrong:
    the unit strides folded in (per-input layouts, offs dense), 16-byte aligned data, and K, N and every pitch and
    group stride of x, w and out a multiple of 16 elements (TMA's 16-byte pitches, and the pointer path's 16-byte
    loads); its Python twin serves the rest."""

    name = GROUPED_FAMILY_NAME
    op = "grouped_mm"
    kernel_source = (GROUPED_KERNELS, "grouped_mm_kernel")
    configs = GROUPED_CONFIGS
    # float32 stays with the Python kernel: without tensor cores (IEEE float32 tl.dot) it runs at a small fraction
    # of the 16-bit rate, and the float32 tiles of eight of the ten configs overflow sm_90's shared memory (of every
    # config, sm_80's).
    dtypes = (torch.float16, torch.bfloat16)
    layout_variants = ("row_major", "row_column")

    def covering_layout(self, layouts: tuple) -> str | None:
        """The layout variant whose binaries take inputs of these layout classes (x, w, offs), if one does."""
        x_layout, w_layout, offsets_layout = layouts
        if x_layout not in _ROW_MAJOR or offsets_layout not in _OFFSETS_LAYOUTS + ("absent",):
            return None
        if w_layout in _COLUMN_MAJOR:
            return "row_column"
        return "row_major" if w_layout in _ROW_MAJOR else None

    def binary_rows(self, config: MatmulConfig, dtype: torch.dtype, arch: int) -> tuple:
        # Only configs whose buffers fit the arch's shared memory (grouped_unsupported_reason's rule): a binary of
        # another would decline every problem.
        return () if _shared_memory_reason(config, dtype.itemsize, arch) else (0,)

    def binary_unsupported_reason(self, n: int, k: int) -> str:
        """Why a binary declines a problem its Python kernel takes, judged from the sizes (dense pitches assumed)."""
        return _divisibility_reason(k, n)

    def binary_options(self, arch, multiprocessors, rows):
        # Its grid is persistent; sm_90 reads through TMA, sm_80 through pointers.
        return {"multiprocessors": multiprocessors, "use_tma": arch == 90}

    def binary_spec(self, config: MatmulConfig, dtype: torch.dtype, layout_variant: str, *, multiprocessors: int,
                    use_tma: bool) -> BinarySpec:
        if layout_variant not in self.layout_variants:
            raise ValueError(f"layout: the {self.name} family compiles for {self.layout_variants} (x row-major, w "
                             f"[E, K, N] row-major or an nn.Linear weight's view); got {layout_variant!r}")
        w_n_by_k = layout_variant == "row_column"
        pointer = "*" + _TRITON_DTYPES[dtype]
        # w's pitch: the stride of N for an nn.Linear weight's view (its rows run along K), else of K.
        w_pitch = "stride_wn" if w_n_by_k else "stride_wk"
        signature = {"x_ptr": pointer, "w_ptr": pointer, "offs_ptr": "*i32", "out_ptr": pointer,
                     "E": "i32", "R": "i32", "N": "i32", "K": "i32",
                     "stride_xe": "i64", "stride_xm": "i32", "stride_xk": "constexpr",
                     "stride_we": "i64", "stride_wk": "constexpr", "stride_wn": "constexpr",
                     "stride_oe": "i64", "stride_om": "i32", "stride_on": "constexpr", "num_programs": "i32",
                     "USE_TMA": "constexpr", "W_N_BY_K": "constexpr", "BLOCK_M": "constexpr",
                     "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "DOT_IN_FLOAT32": "constexpr",
                     "INPUT_PRECISION": "constexpr", "TAIL_M": "constexpr", "SHORT_M": "constexpr"}
        signature[w_pitch] = "i32"
        constexprs = {"stride_xk": 1, "stride_on": 1, ("stride_wk" if w_n_by_k else "stride_wn"): 1,
                      "USE_TMA": use_tma, "W_N_BY_K": w_n_by_k, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
                      "BLOCK_K": config.block_k, "DOT_IN_FLOAT32": False, "INPUT_PRECISION": _INPUT_PRECISION,
                      "TAIL_M": config.tail_m, "SHORT_M": config.short_m}
        divisible = ("N", "K", "stride_xe", "stride_xm", "stride_we", w_pitch, "stride_oe", "stride_om")

        def stride(index: int, dim: int, name: str) -> ManifestParam:
            return ManifestParam.stride(index, dim, size=8 if signature[name] == "i64" else 4,
                                        divisible_by=_DECLARED_DIVISOR)

        params = (ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2), ManifestParam.tensor(3),
                  ManifestParam.dim("E"), ManifestParam.dim("R"),
                  ManifestParam.dim("N", divisible_by=_DECLARED_DIVISOR),
                  ManifestParam.dim("K", divisible_by=_DECLARED_DIVISOR),
                  stride(0, -3, "stride_xe"), stride(0, -2, "stride_xm"),
                  stride(1, -3, "stride_we"), stride(1, -1 if w_n_by_k else -2, w_pitch),
                  stride(3, -3, "stride_oe"), stride(3, -2, "stride_om"),
                  ManifestParam.constant(multiprocessors))
        # One rule for both forms, which the grid cannot tell apart: the larger of their item counts
        # (grouped_work_items; a tail only lowers them). The loop strides by num_programs, so the grid must not
        # exceed it.
        row_tiles = f"max(cdiv(R, {config.block_m}) + E, E * cdiv(R, {config.block_m}))"
        grid = (f"min({multiprocessors}, {row_tiles} * cdiv(N, {config.block_n}))", "1", "1")
        w_layouts = _COLUMN_MAJOR if w_n_by_k else _ROW_MAJOR
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible), params, grid,
                          (_ROW_MAJOR, w_layouts, _OFFSETS_LAYOUTS))


GROUPED_FAMILY = GroupedFamily()
