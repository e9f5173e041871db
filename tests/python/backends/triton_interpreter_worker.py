"""Runs every Triton kernel through kabi on CPU tensors in Triton's interpreter; prints one JSON record per run.

Started by test_triton_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before Triton is
first imported, and other test modules import Triton for real. Not a test module itself (no ``test_`` prefix).

Each record: kernel name, case, dtype, the relative errors (norm, extreme) against a float64 reference, whether
the output's dtype and shape were right, and the error text if the run raised.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402

import kabi  # noqa: E402
from kabi.backends.triton import kernel_name, register_triton_kernels  # noqa: E402
from kabi.backends.triton._families import FAMILIES, MatmulProblem  # noqa: E402
from kabi.backends.triton._names import aligned_copies_kernel_name  # noqa: E402
from _worker_checks import relative_errors  # noqa: E402

# (M, N, K): none a multiple of the tiles; K not a multiple of 16 in each. The wider ones keep rows of 16-byte
# multiples for the TMA kernel, which declines other pitches.
_LARGE_M_SHAPES = ((100, 72, 40), (136, 136, 56))
# Decode shapes: M = 1 and M for each small-M BLOCK_M (16, 32, 64); K long enough for every split-K config to
# keep all its slices busy.
_SMALL_M_SHAPES = ((1, 70, 100), (5, 72, 4104), (20, 40, 4100), (47, 24, 4097))


def _matrix(rows: int, cols: int, dtype: torch.dtype, transposed: bool, generator: torch.Generator) -> torch.Tensor:
    if transposed:
        return torch.randn(cols, rows, generator=generator).to(dtype).t()
    return torch.randn(rows, cols, generator=generator).to(dtype)


def _cases():
    for dtype in (torch.float32, torch.float16):
        for shapes in (_LARGE_M_SHAPES, _SMALL_M_SHAPES):
            for index, shape in enumerate(shapes):
                # Alternate the layouts across shapes so every family sees row- and column-major operands.
                yield shape, dtype, index % 2 == 1, index % 2 == 0 or shape[0] == 1


def _pitch_checked_records(generator: torch.Generator) -> list:
    """The kernels as compiled for device binaries, which check their row pitches at run time, on pitches that
    pass and fail the check: both paths must be right."""
    family = FAMILIES["persistent_tma"]
    config = family.configs[-1]
    records = []
    for (m, n, k), a_transposed, b_transposed in (((40, 72, 48), False, True), ((40, 72, 33), False, False),
                                                  ((35, 72, 40), True, True)):
        a = _matrix(m, k, torch.float16, a_transposed, generator)
        b = _matrix(k, n, torch.float16, b_transposed, generator)
        c = torch.empty(m, n, dtype=torch.float16)
        family.kernel[(4,)](a, b, c, m, n, k, a.stride(1 if a_transposed else 0), b.stride(1 if b_transposed else 0),
                            c.stride(0), 4, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                            GROUP_M=config.group_m, A_COLUMN_MAJOR=a_transposed, B_COLUMN_MAJOR=b_transposed,
                            CHECK_PITCHES=True)
        norm, extreme = relative_errors(c, a.double() @ b.double())
        records.append({"case": f"persistent_tma {m}x{n}x{k}", "norm": norm, "extreme": extreme})
    # The pointer kernels as compiled for row-major binaries (CHECK_ROW_PITCHES=True): aligned and not.
    for m, n, k in ((40, 72, 48), (40, 70, 33)):
        a = _matrix(m, k, torch.float16, False, generator)
        b = _matrix(k, n, torch.float16, False, generator)
        reference = a.double() @ b.double()
        tiled = FAMILIES["tiled"].configs[-1]
        c = torch.empty(m, n, dtype=torch.float16)
        FAMILIES["tiled"].kernel[(triton.cdiv(m, tiled.block_m) * triton.cdiv(n, tiled.block_n),)](
            a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=tiled.block_m, BLOCK_N=tiled.block_n,
            BLOCK_K=tiled.block_k, GROUP_M=tiled.group_m, INPUT_PRECISION="ieee", CHECK_ROW_PITCHES=True)
        norm, extreme = relative_errors(c, reference)
        records.append({"case": f"tiled {m}x{n}x{k}", "norm": norm, "extreme": extreme})
        # An unsplit config and a split one (serial split-K; here with K slices left empty, as a binary launched on
        # a short K may leave them).
        for small in FAMILIES["small_m"].configs[:2]:
            c = torch.empty(m, n, dtype=torch.float16)
            grid = (triton.cdiv(n, small.block_n), small.split_k, triton.cdiv(m, small.block_m))
            partial, counters = (None, None) if small.split_k == 1 else (
                torch.empty(grid[0] * grid[1] * grid[2] * small.block_m * small.block_n),
                torch.zeros(grid[0] * grid[2], dtype=torch.int32))
            FAMILIES["small_m"].kernel[grid](
                a, b, c, partial, counters, m, n, k, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=small.block_m,
                BLOCK_N=small.block_n, BLOCK_K=small.block_k, SPLIT_K=small.split_k, INPUT_PRECISION="ieee",
                CHECK_ROW_PITCHES=True)
            norm, extreme = relative_errors(c, reference)
            records.append({"case": f"small_m {small.tag} {m}x{n}x{k}", "norm": norm, "extreme": extreme})
    return records


def main() -> None:
    # The decode family has its own edge cases and worker (decode_interpreter_worker.py), and so has the
    # aligned-copies matmul (aligned_copies_interpreter_worker.py); the linear kernels run through kabi.ops.linear
    # in test_linear.py and on their own in linear_interpreter_worker.py.
    own_workers = (aligned_copies_kernel_name("cpu"),)
    registered = [name for name in register_triton_kernels(device="cpu")
                  if name.startswith("triton.matmul.") and not name.startswith("triton.matmul.decode.")
                  and name not in own_workers]
    generator = torch.Generator().manual_seed(1234)
    records = []
    for (m, n, k), dtype, a_transposed, b_transposed in _cases():
        a = _matrix(m, k, dtype, a_transposed, generator)
        b = _matrix(k, n, dtype, b_transposed, generator)
        reference = a.double() @ b.double()
        problem = MatmulProblem(m, n, k, a.element_size(), None, a_transposed, b_transposed)
        for family in FAMILIES.values():
            if dtype not in family.dtypes or family.name == "decode":
                continue
            for config in family.configs:
                if family.unsupported_reason(config, problem):
                    continue
                name = kernel_name(family.name, config.tag, "cpu")
                record = {"kernel": name, "case": f"{m}x{n}x{k} a{'T' if a_transposed else ''}"
                          f" b{'T' if b_transposed else ''}", "dtype": str(dtype).removeprefix("torch.")}
                try:
                    with kabi.use(matmul=name):
                        out = kabi.ops.matmul(a, b)
                        written = torch.empty(m, n, dtype=dtype)
                        returned = kabi.ops.matmul(a, b, out=written)
                    record["norm"], record["extreme"] = relative_errors(out, reference)
                    record["out_norm"], _ = relative_errors(written, reference)
                    record["dtype_ok"] = out.dtype == dtype and tuple(out.shape) == (m, n)
                    record["out_returned"] = returned is written
                except Exception as error:  # recorded, and failed by the test, with its message
                    record["error"] = f"{type(error).__name__}: {error}"
                records.append(record)
    json.dump({"registered": registered, "records": records, "pitch_checked": _pitch_checked_records(generator)},
              sys.stdout)


if __name__ == "__main__":
    main()
