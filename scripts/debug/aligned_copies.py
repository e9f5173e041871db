"""Where the time of ``torch.matmul.aligned_copies.cuda`` goes on odd bfloat16 problems, and which way of padding
is cheapest: each variant's whole call and its parts (the padded copies, the product, the output copy) timed with
kabi.bench (L2 flushed per sample, median), against torch.matmul on the unpadded operands.

Variants (K and N rounded up to multiples of 8 in every one; the product's first N columns are the result):
- ``current``: kabi's kernel as registered (buffers written by a copy and zero fills);
- ``pad``: each operand padded by one F.pad (one kernel writes data and zeros), output sliced and copied;
- ``pad_pitch64``: as ``pad``, each padded row's pitch rounded up to 64 elements (128 bytes) as Inductor does;
- ``pad_direct_out``: as ``pad``, but the product is written straight into an [M, N] result (b's padded columns
  sliced off first), so no output copy, at the cost of an unaligned output pitch;
- ``triton``: the registered ``triton.matmul.aligned_copies``, each copy one pass of the Triton copy kernel;
- ``native``: the CUDA plugin's ``cuda.cublaslt.aligned_copies`` (its CUDA copy kernel, cuBLASLt on the padded
  problem), launched through the core as the hit path does, into a preallocated output.

    python scripts/debug/aligned_copies.py [--shapes 4093x4099x4091 2047x2049x2051 1001x1003x1005]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import kabi
from kabi import _core
from kabi._base.tensors import descriptor
from kabi.backends.torch_native import matmul_aligned_copies, zero_padded
from kabi.backends.triton import _aligned_copies as triton_copies


def _round(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def _padded(matrix: torch.Tensor, rows: int, columns: int, pitch_multiple: int) -> torch.Tensor:
    """matrix grown with zeros to rows x columns by one F.pad, column-major kept column-major, each row's pitch a
    multiple of pitch_multiple elements."""
    if matrix.stride(0) == 1 and matrix.stride(1) != 1:
        return _padded(matrix.mT, columns, rows, pitch_multiple).mT
    height, width = matrix.shape
    grown = F.pad(matrix, (0, _round(columns, pitch_multiple) - width, 0, rows - height))
    return grown[:, :columns]


def variants(a: torch.Tensor, b: torch.Tensor) -> dict:
    m, k = a.shape
    n = b.shape[1]
    kp, np_ = _round(k, 8), _round(n, 8)

    def pad(pitch_multiple: int):
        return lambda: torch.mm(_padded(a, m, kp, pitch_multiple),
                                _padded(b, kp, np_, pitch_multiple))[:, :n].contiguous()

    def direct():
        return torch.mm(_padded(a, m, kp, 8), _padded(b, kp, np_, 8)[:, :n])

    native_out = a.new_empty((m, n))

    def native():
        _core.launch("matmul", "cuda.cublaslt.aligned_copies", [descriptor(a), descriptor(b)], [descriptor(native_out)],
                     stream=torch.cuda.current_stream().cuda_stream)
        return native_out

    a8, b8 = _padded(a, m, kp, 8), _padded(b, kp, np_, 8)
    a64, b64 = _padded(a, m, kp, 64), _padded(b, kp, np_, 64)
    product = torch.mm(a8, b8)
    return {
        "torch.matmul": lambda: torch.matmul(a, b),
        "current": lambda: matmul_aligned_copies(a, b),
        "pad": pad(8),
        "pad_pitch64": pad(64),
        "pad_direct_out": direct,
        "triton": lambda: triton_copies.launch_aligned_copies(a, b),
        "native": native,
        "part: triton pad a": lambda: zero_padded(a, m, kp, triton_copies.copy_into),
        "part: triton pad b": lambda: zero_padded(b, kp, np_, triton_copies.copy_into),
        "part: triton output copy": lambda: triton_copies.copy_into(product[:, :n], product.new_empty((m, n))),
        "part: pad a (pitch 8)": lambda: _padded(a, m, kp, 8),
        "part: pad b (pitch 8)": lambda: _padded(b, kp, np_, 8),
        "part: mm of padded (pitch 8)": lambda: torch.mm(a8, b8),
        "part: mm of padded (pitch 64)": lambda: torch.mm(a64, b64),
        "part: mm into [M, N] (b sliced)": lambda: torch.mm(a8, b8[:, :n]),
        "part: output copy": lambda: product[:, :n].contiguous(),
    }


def odd_operands(shapes: list[str]):
    """(title, a, b) for each "MxNxK" shape, b row-major and then the transposed view of an [N, K] weight: fresh
    random bfloat16 operands on the GPU."""
    for shape in shapes:
        m, n, k = (int(size) for size in shape.split("x"))
        for layout in ("row_major", "transposed_b"):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) if layout == "row_major"
                 else torch.randn(n, k, device="cuda", dtype=torch.bfloat16).mT)
            yield f"{shape} bfloat16 {layout}", a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["4093x4099x4091", "2047x2049x2051", "1001x1003x1005"])
    args = parser.parse_args()
    torch.manual_seed(0)
    _core.plugin_load_builtin()
    for title, a, b in odd_operands(args.shapes):
        reference = torch.matmul(a.double(), b.double())
        print(title, flush=True)
        for name, call in variants(a, b).items():
            if not name.startswith("part"):
                error = ((call().double() - reference).norm() / reference.norm()).item()
                check = f"rel. error {error:.1e}"
            else:
                check = ""
            result = kabi.bench(call, repeat=31, min_time_s=0.1)
            print(f"  {name:34s} {result.median_us:9.1f} us  {check}", flush=True)


if __name__ == "__main__":
    main()
