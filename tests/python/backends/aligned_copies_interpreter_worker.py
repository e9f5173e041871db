"""Runs triton.matmul.aligned_copies (zero-padded copies made by the Triton copy kernel, cuBLAS's product on a GPU,
torch's on the CPU) in Triton's CPU interpreter; prints one JSON object of records.

Started by test_triton_aligned_copies_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before
Triton is first imported. Not a test module itself (no ``test_`` prefix).

Records:
- ``launches``: per case, weight layout, dtype and operand pitch (dense, or views into wider rows), the gate's
  verdicts (None: within the op's tolerance of the float64 reference) of the call, of ``out=`` a NaN-filled
  contiguous matrix and of ``out=`` every other column of a wider one, with whether out was returned and the wider
  one's other columns left alone;
- ``copies``: the copy kernel into NaN-filled targets larger and smaller than the source, source row- and
  column-major: whether the target holds the source where they overlap and zeros everywhere else;
- ``dispatch``: kabi.ops.matmul with the kernel forced on a problem its supports predicate accepts, and the
  predicate's verdict on an aligned one.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

import kabi  # noqa: E402
from kabi._base.declarations import op_spec  # noqa: E402
from kabi._selection.correctness import check_output, reference_output  # noqa: E402
from kabi.backends.triton import register_triton_kernels  # noqa: E402
from kabi.backends.triton._aligned_copies import copy_into, launch_aligned_copies  # noqa: E402
from kabi.backends.triton._names import aligned_copies_kernel_name  # noqa: E402

# M, N, K: N and K not multiples of 8, a row longer than one tile of 256 columns, several row bands, M = 1; only N
# unaligned (a is not copied), only K unaligned (the product is not copied back).
CASES = ((7, 143, 41), (33, 17, 9), (1, 300, 257), (130, 301, 263), (33, 17, 16), (33, 16, 9))
_DTYPES = (torch.float16, torch.bfloat16)


def _operands(m, n, k, b_column_major, dtype, generator, pitched=False):
    """a [M, K] and b [K, N] (column-major: the transpose of an [N, K] weight); pitched: each a view into a wider
    matrix, starting a few elements into its rows (a pitch longer than the row, and data at an odd address)."""
    extra, start = (5, 3) if pitched else (0, 0)

    def matrix(rows, columns):
        return torch.randn(rows, columns + extra, generator=generator).to(dtype)[:, start:start + columns]

    return matrix(m, k), matrix(n, k).t() if b_column_major else matrix(k, n)


def _launch_record(m, n, k, b_column_major, dtype, generator, pitched=False):
    record = {"case": f"{m}x{n}x{k} {'b_column_major' if b_column_major else 'b_row_major'}"
                      f"{' pitched' if pitched else ''}",
              "dtype": str(dtype).removeprefix("torch.")}
    try:
        a, b = _operands(m, n, k, b_column_major, dtype, generator, pitched)
        tolerance = op_spec("matmul").tolerance[record["dtype"]]
        reference = reference_output(torch.matmul, [a, b])
        record["verdict"] = check_output(launch_aligned_copies(a, b), reference, tolerance, expected_dtype=dtype)
        out = torch.full((m, n), float("nan"), dtype=dtype)
        record["out_returned"] = launch_aligned_copies(a, b, out=out) is out
        record["out_verdict"] = check_output(out, reference, tolerance, expected_dtype=dtype)
        wide = torch.full((m, 2 * n), float("nan"), dtype=dtype)
        launch_aligned_copies(a, b, out=wide[:, ::2])
        record["strided_out_verdict"] = check_output(wide[:, ::2], reference, tolerance, expected_dtype=dtype)
        record["strided_out_untouched_elsewhere"] = bool(wide[:, 1::2].isnan().all())
    except Exception as error:  # recorded, and failed by the test, with its message
        record["error"] = f"{type(error).__name__}: {error}"
    return record


def _copy_record(source_shape, target_shape, column_major, generator):
    record = {"source": list(source_shape), "target": list(target_shape), "column_major": column_major}
    source = torch.randn(*source_shape, generator=generator).to(torch.bfloat16) + 3  # no zeros in the source
    if column_major:
        source = source.t().contiguous().t()
    target = torch.full(target_shape, float("nan"), dtype=torch.bfloat16)
    copy_into(source, target)
    rows, columns = min(source_shape[0], target_shape[0]), min(source_shape[1], target_shape[1])
    record["holds_the_source"] = bool(torch.equal(target[:rows, :columns], source[:rows, :columns]))
    outside = torch.ones(target_shape, dtype=torch.bool)
    outside[:rows, :columns] = False
    record["zeros_elsewhere"] = bool((target[outside] == 0).all())
    return record


def _candidate(explanation, name):
    return next(candidate for candidate in explanation.candidates if candidate.name == name)


def main() -> None:
    generator = torch.Generator().manual_seed(4099)
    # Views into wider rows for the first two cases only: the copies read them through the same strides.
    launches = [_launch_record(m, n, k, column_major, dtype, generator, pitched)
                for index, (m, n, k) in enumerate(CASES) for column_major in (False, True) for dtype in _DTYPES
                for pitched in ((False, True) if index < 2 else (False,))]
    copies = [_copy_record(source, target, column_major, generator)
              for source, target in (((13, 7), (16, 264)), ((19, 300), (24, 304)), ((9, 300), (9, 257)))
              for column_major in (False, True)]
    name = aligned_copies_kernel_name("cpu")
    registered = name in register_triton_kernels(device="cpu")
    # 513 x 515 x 509: just above the 2**27 multiply-adds below which the copies cannot pay; K and N unaligned.
    a, b = _operands(513, 515, 509, True, torch.float16, generator)
    with kabi.use(matmul=name):
        result = kabi.ops.matmul(a, b)
    unaligned = _candidate(kabi.explain(kabi.ops.matmul, a, b), name)
    aligned = _candidate(kabi.explain(kabi.ops.matmul, torch.randn(520, 512).half(), torch.randn(512, 512).half()),
                         name)
    dispatch = {
        "registered": registered,
        "eligible": unaligned.eligible,
        "verdict": check_output(result, reference_output(torch.matmul, [a, b]),
                                op_spec("matmul").tolerance["float16"], expected_dtype=torch.float16),
        "aligned_problem_eligible": aligned.eligible,
        "aligned_problem_reason": aligned.reason,
    }
    json.dump({"launches": launches, "copies": copies, "dispatch": dispatch}, sys.stdout)


if __name__ == "__main__":
    main()
