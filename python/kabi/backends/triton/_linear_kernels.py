"""The fused Triton linear kernel: out[M, N] = activation(x[M, K] @ w[N, K]^T + bias[N]).

One program per BLOCK_M x BLOCK_N tile of out, tiles visited in bands of GROUP_M rows (``_grouped_tile``, shared
with the matmul kernels). The product accumulates in float32; the bias is added and the activation applied to the
float32 accumulator before the one rounding to out's dtype, so the epilogue costs no extra pass over memory and no
extra rounding. Every operand is read through its own strides: x's rows, and w as stored by nn.Linear ([N, K]) or
as any view of it (a transposed [K, N] matrix included). Row and column offsets are 64-bit, so no size overflows 32
bits; the K loop steps its pointers.

One source serves both ways of launching it. Triton's JIT specializes on what the call passes: a None bias
(constexpr None) drops the bias from the code, and ``ACTIVATION`` names the activation, chosen at compile time. A
device binary (``_linear.LinearFamily``) serves every problem its manifest admits: it is compiled with a bias
pointer that the core passes as NULL when the call has no bias, and with ``ACTIVATION=None``, reading the
``activation`` argument (the enum's index in ``kabi.ops._references.ACTIVATIONS``, as the core passes an enum
attribute) at run time.

Example (interpreter on CPU, or a GPU)::

    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
    linear_kernel[grid](x, w, bias, out, M, N, K, *x.stride(), *w.stride(), bias.stride(0), *out.stride(), 0,
                        ACTIVATION="gelu", BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, INPUT_PRECISION="ieee",
                        DOT_IN_FLOAT32=False)
"""

import triton
import triton.language as tl

from ...ops._references import ACTIVATIONS
from ._jit_kernels import _grouped_tile

# sqrt(1/2), for gelu's erf(v / sqrt(2)); sqrt(2/pi), the scale inside gelu_tanh's tanh. Constexpr, as Triton
# requires of the globals a kernel reads.
_RSQRT_2 = tl.constexpr(0.7071067811865476)
_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
# The activations' indices in the op's enum, as a device binary receives the attribute.
_RELU = tl.constexpr(list(ACTIVATIONS).index("relu"))
_GELU = tl.constexpr(list(ACTIVATIONS).index("gelu"))
_GELU_TANH = tl.constexpr(list(ACTIVATIONS).index("gelu_tanh"))
_SILU = tl.constexpr(list(ACTIVATIONS).index("silu"))


@triton.jit
def _activate(values, ACTIVATION: tl.constexpr):
    # ACTIVATION is a name of kabi.ops._references.ACTIVATIONS; the branch is chosen at compile time.
    if ACTIVATION == "relu":
        # A comparison rather than maximum keeps NaN as NaN, as torch.relu does.
        values = tl.where(values < 0.0, 0.0, values)
    elif ACTIVATION == "gelu":
        values = 0.5 * values * (1.0 + tl.math.erf(values * _RSQRT_2))
    elif ACTIVATION == "gelu_tanh":
        # 0.5 * (1 + tanh(u)) is sigmoid(2u): the same function, without the cancellation of 1 + tanh(u) near -1
        # and without a tanh, which the interpreter lacks.
        inner = _SQRT_2_OVER_PI * (values + 0.044715 * values * values * values)
        values = values / (1.0 + tl.exp(-2.0 * inner))
    elif ACTIVATION == "silu":
        values = values / (1.0 + tl.exp(-values))
    return values


@triton.jit
def _activate_by_index(values, activation):
    # One uniform branch per launch (every program reads the same index), each arm the compile-time code above.
    if activation == _RELU:
        values = _activate(values, "relu")
    elif activation == _GELU:
        values = _activate(values, "gelu")
    elif activation == _GELU_TANH:
        values = _activate(values, "gelu_tanh")
    elif activation == _SILU:
        values = _activate(values, "silu")
    return values


@triton.jit
def linear_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_bias, stride_om, stride_on, activation,
                  ACTIVATION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr, DOT_IN_FLOAT32: tl.constexpr):
    # DOT_IN_FLOAT32 widens the operands before tl.dot: Triton's CPU interpreter multiplies bfloat16 operands as raw
    # bit patterns. On a GPU it stays False and the tensor cores take the operands as they are.
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows and columns past the edge wrap around to valid ones, so the K loop and the bias load need no row or
    # column mask; the store drops what they computed.
    rows_in_bounds = (rows % M).to(tl.int64)
    cols_in_bounds = (cols % N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows_in_bounds[:, None] * stride_xm + ks[None, :] * stride_xk
    # The [K, N] operand w^T, read in place: its element (k, n) is w[n, k].
    w_ptrs = w_ptr + ks[:, None] * stride_wk + cols_in_bounds[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k_block * BLOCK_K
        x = tl.load(x_ptrs, mask=ks[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=ks[:, None] < k_left, other=0.0)
        if DOT_IN_FLOAT32:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    # A None bias (the JIT's specialization of an absent one) has no code; a binary's bias pointer is NULL when
    # the call has none, which one uniform branch tests (the interpreter's masks take no pointer comparison).
    if bias_ptr is not None:
        if bias_ptr.to(tl.int1):
            acc += tl.load(bias_ptr + cols_in_bounds * stride_bias).to(tl.float32)[None, :]
    if ACTIVATION is None:
        acc = _activate_by_index(acc, activation)
    else:
        acc = _activate(acc, ACTIVATION)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))
