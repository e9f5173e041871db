"""The fused linear kernel from Python: its configs, what each config fits, the launcher, and its family of device
binaries.

``launch_linear(config, x, w, bias, activation, out=...)`` has the Python kernel convention of kabi's ``linear``
op (inputs, then attributes, then ``out``), so ``functools.partial(launch_linear, config)`` is a kernel. x may be
any [..., K]: its leading dimensions are read as one row stride when they nest (a copy is made only when they do
not); w is read through its own strides, an nn.Linear weight [N, K] or any view of one. Importing this module imports
no Triton: the launcher imports the kernel (and Triton) at its first call.

``LINEAR_FAMILY`` compiles the same kernel to device binaries (``compile_to_binary``), one per config, dtype and arch,
each serving every activation and both a bias and none: the activation reaches the kernel as the enum's index (the
core's ``attribute`` param) and is applied by a branch at run time, and an absent bias arrives as a NULL pointer,
which the kernel tests before loading the bias.

Example::

    out = launch_linear(LINEAR_CONFIGS[0], x, w, bias, "silu")   # F.silu(F.linear(x, w, bias))
    compile_to_binary(LINEAR_FAMILY, LINEAR_CONFIGS[0], "bfloat16", 90, "binaries/")
"""

from __future__ import annotations

import math

import torch

from ...ops._references import activation_named
from ._configs import MatmulConfig, ceil_div, next_power_of_two, shared_memory_limit
from ._families import (_DECLARED_DIVISOR, _INPUT_PRECISION, _MAX_ELEMENTS, _ROW_MAJOR, _TRITON_DTYPES, BinarySpec,
                        KernelFamily, _divisibility_reason, _pointer_attrs)
from ._kernel_modules import LINEAR_KERNELS
from ._manifest_params import ManifestParam
from ._names import LINEAR_FAMILY_NAME

__all__ = ["LINEAR_CONFIGS", "LINEAR_FAMILY", "launch_linear", "linear_unsupported_reason"]

# What a binary takes of (x, w, bias). x dense: its rows, however many leading dimensions hold them, are K apart (a
# row-strided x of rank 3 or more may give its size-1 row dimension any stride, and one of rank 1 has none, so the
# stride of x's dimension -2 is not its row stride in every problem the layout class admits). w row-major: the
# nn.Linear weight, rows a pitch apart. bias dense (or absent: an absent input is not filtered).
_BINARY_INPUT_LAYOUTS = (("contiguous",), _ROW_MAJOR, ("contiguous",))

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
    # The JIT compiles ACTIVATION in; the activation's index (0 here) is read only by a device binary.
    LINEAR_KERNELS.linear_kernel[grid](
        x_rows, w, bias, out_rows, m, n, k, *x_rows.stride(), *w.stride(), 0 if bias is None else bias.stride(0),
        *out_rows.stride(), 0, ACTIVATION=activation, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m, INPUT_PRECISION=_INPUT_PRECISION,
        DOT_IN_FLOAT32=x.dtype == torch.bfloat16 and x.device.type == "cpu",
        num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    if not in_place:
        result.copy_(out_rows.view(result.shape))
    return result


class LinearFamily(KernelFamily):
    """The fused linear kernel as device binaries: one per (config, dtype, arch), each serving every activation, a
    bias or none, and any number of x's leading dimensions. x is dense, w an nn.Linear weight [N, K] read in place
    (row-major, its rows a pitch apart), out dense; the unit strides are folded into the code.

    What the image assumes, the manifest declares, so the core declines (with a reason) what it would compute wrong:
    those layouts per input (a given bias dense; an absent one passes NULL, which the kernel reads as no bias), x's
    leading dimensions flattening to one row stride, 16-byte aligned data, and K, N and w's pitch multiples of 16
    elements (Triton's ``tt.divisibility``: 16-byte loads, masks constant over them). The activation is the op's
    attribute, read at run time. Its Python twin serves the rest."""

    name = LINEAR_FAMILY_NAME
    op = "linear"
    kernel_source = (LINEAR_KERNELS, "linear_kernel")
    configs = LINEAR_CONFIGS
    # float32 stays with the Python kernel: without tensor cores (IEEE float32 tl.dot) it runs at a small fraction
    # of the 16-bit rate, as matmul's float32 kernels do.
    dtypes = (torch.float16, torch.bfloat16)
    layout_variants = ("row_major",)

    def covering_layout(self, layouts: tuple) -> str | None:
        """The layout variant whose binaries take inputs of these layout classes (x, w, bias), if one does."""
        if all(layout in classes or (index == 2 and layout == "absent")
               for index, (layout, classes) in enumerate(zip(layouts, _BINARY_INPUT_LAYOUTS))):
            return self.layout_variants[0]
        return None

    def binary_unsupported_reason(self, n: int, k: int) -> str:
        """Why a binary declines a problem its Python kernel takes, judged from the sizes (dense pitches assumed)."""
        return _divisibility_reason(k, n)

    def binary_spec(self, config: MatmulConfig, dtype: torch.dtype, layout_variant: str) -> BinarySpec:
        if layout_variant not in self.layout_variants:
            raise ValueError(f"layout: the {self.name} family compiles for {self.layout_variants} (x dense, w an "
                             f"nn.Linear weight [N, K]); got {layout_variant!r}")
        pointer = "*" + _TRITON_DTYPES[dtype]
        signature = {"x_ptr": pointer, "w_ptr": pointer, "bias_ptr": pointer, "out_ptr": pointer,
                     "M": "i32", "N": "i32", "K": "i32",
                     "stride_xm": "i32", "stride_xk": "constexpr", "stride_wn": "i32", "stride_wk": "constexpr",
                     "stride_bias": "constexpr", "stride_om": "i32", "stride_on": "constexpr", "activation": "i32",
                     "ACTIVATION": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                     "BLOCK_K": "constexpr", "GROUP_M": "constexpr", "INPUT_PRECISION": "constexpr",
                     "DOT_IN_FLOAT32": "constexpr"}
        # ACTIVATION None: the kernel applies the activation whose index the ``activation`` argument holds.
        constexprs = {"stride_xk": 1, "stride_wk": 1, "stride_bias": 1, "stride_on": 1, "ACTIVATION": None,
                      "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                      "GROUP_M": config.group_m, "INPUT_PRECISION": _INPUT_PRECISION, "DOT_IN_FLOAT32": False}
        divisible = ("N", "K", "stride_xm", "stride_wn", "stride_om")
        n_param = ManifestParam.dim("N", divisible_by=_DECLARED_DIVISOR)
        k_param = ManifestParam.dim("K", divisible_by=_DECLARED_DIVISOR)
        # The rows of dense x and out are K and N elements apart whatever their rank (1 included), so their row
        # strides are those dims; the rows are x's leading dimensions flattened, the problem's batch.
        params = (ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2), ManifestParam.tensor(3),
                  ManifestParam.dim("batch"), n_param, k_param, k_param,
                  ManifestParam.stride(1, -2, divisible_by=_DECLARED_DIVISOR), n_param, ManifestParam.attribute(0))
        grid = (f"cdiv(batch, {config.block_m}) * cdiv(N, {config.block_n})", "1", "1")
        return BinarySpec(signature, constexprs, _pointer_attrs(signature, divisible), params, grid,
                          _BINARY_INPUT_LAYOUTS, batch_mode="uniform")


LINEAR_FAMILY = LinearFamily()
