"""Runs every decode kernel, forced through kabi, on the decode edge cases in Triton's CPU interpreter; prints the
records as JSON.

Started by test_triton_decode.py in a fresh process, because TRITON_INTERPRET must be set before Triton is first
imported. Not a test module itself (no ``test_`` prefix).

Each record: config tag, case, dtype, relative errors (norm, extreme) against a float64 reference, whether the
output's dtype and shape were right, and the error text if the run raised.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

import kabi  # noqa: E402
from kabi.backends.triton import kernel_name, register_triton_kernels  # noqa: E402
from kabi.backends.triton._families import FAMILIES, MatmulProblem  # noqa: E402
from _worker_checks import relative_errors  # noqa: E402

# (M, N, K, weight layout, a transposed). N odd or below a tile, K not a multiple of any BLOCK_K (nor of 16), M = 1
# (gemv and dot), M not a power of two for the dot tiles of 16 and 64 rows, and column-major activations.
CASES = (
    (1, 75, 1000, "n_by_k", False),
    (1, 75, 1000, "k_by_n", False),
    (5, 33, 1000, "n_by_k", True),
    (5, 33, 1000, "k_by_n", False),
    (47, 33, 1000, "n_by_k", False),
    (47, 33, 1000, "k_by_n", True),
)


def _operands(m, n, k, weight_layout, a_transposed, dtype, generator):
    a = torch.randn(k, m, generator=generator).to(dtype).t() if a_transposed else \
        torch.randn(m, k, generator=generator).to(dtype)
    if weight_layout == "n_by_k":
        weight = torch.randn(n, k, generator=generator).to(dtype)  # an nn.Linear weight
        return a, weight.t()
    return a, torch.randn(k, n, generator=generator).to(dtype)


def main() -> None:
    registered = [name for name in register_triton_kernels(device="cpu") if name.startswith("triton.matmul.decode.")]
    family = FAMILIES["decode"]
    generator = torch.Generator().manual_seed(2024)
    records = []
    checked_out_path = set()
    for dtype in (torch.float32, torch.float16):
        for m, n, k, weight_layout, a_transposed in CASES:
            a, b = _operands(m, n, k, weight_layout, a_transposed, dtype, generator)
            reference = a.double() @ b.double()
            problem = MatmulProblem(m, n, k, a.element_size(), None, a_transposed, weight_layout == "n_by_k")
            for config in family.configs:
                if family.unsupported_reason(config, problem):
                    continue
                name = kernel_name(family.name, config.tag, "cpu")
                record = {"kernel": name, "style": config.style, "weight_layout": weight_layout,
                          "split_k": config.split_k, "m": m, "n": n, "k": k,
                          "case": f"{m}x{n}x{k} {weight_layout}{' aT' if a_transposed else ''}",
                          "dtype": str(dtype).removeprefix("torch.")}
                try:
                    with kabi.use(matmul=name):
                        out = kabi.ops.matmul(a, b)
                        # out= into every other column of a wider matrix (a row pitch that is not N), once per
                        # kernel and dtype: the store path is the same for every case.
                        if (name, dtype) not in checked_out_path:
                            checked_out_path.add((name, dtype))
                            wide = torch.full((m, 2 * n), float("nan"), dtype=dtype)
                            returned = kabi.ops.matmul(a, b, out=wide[:, ::2])
                            record["out_norm"], _ = relative_errors(wide[:, ::2], reference)
                            record["out_returned"] = returned.data_ptr() == wide.data_ptr()
                            record["out_untouched_elsewhere"] = bool(wide[:, 1::2].isnan().all())
                    record["norm"], record["extreme"] = relative_errors(out, reference)
                    record["dtype_ok"] = out.dtype == dtype and tuple(out.shape) == (m, n)
                except Exception as error:  # recorded, and failed by the test, with its message
                    record["error"] = f"{type(error).__name__}: {error}"
                records.append(record)
    json.dump({"registered": registered, "records": records}, sys.stdout)


if __name__ == "__main__":
    main()
