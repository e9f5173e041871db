"""Runs every split-K config of the small-M and decode families in Triton's CPU interpreter, twice on the same
scratch and counters, and prints the records as JSON.

Started by test_triton_split_k.py in a fresh process, because TRITON_INTERPRET must be set before Triton is first
imported. Not a test module itself (no ``test_`` prefix).

The launches go through each family's own launcher, whose serial split-K buffers (``_split_k_buffers``) are replaced
by ones this worker keeps: scratch that starts as NaN (a slot read before it was written shows), and counters that
must be all zero after every launch. Before the second launch the scratch is poisoned with NaN again and the
counters are left as the first launch left them, so the second result is right only if the first reset them. Each
record: config, case, dtype, relative errors (norm, extreme) against a float64 reference on each launch, whether the
counters were zero after each, whether the two results are bit for bit equal, or the error text if a launch raised.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from kabi.backends.triton import _families  # noqa: E402
from kabi.backends.triton._families import FAMILIES, MatmulProblem  # noqa: E402
from _worker_checks import relative_errors  # noqa: E402

# (M, N, K, b column-major). M = 1, M not a power of two (for tiles of 16, 32 and 64 rows), N odd, K a multiple of
# neither any BLOCK_K nor 16, and long enough for two K blocks per slice of every split; b row-major ([K, N]) and
# column-major (an nn.Linear weight w[N, K] passed as w.T).
CASES = (
    (1, 75, 1000, False),
    (1, 75, 1000, True),
    (5, 33, 1000, True),
    (20, 33, 1000, False),
    (47, 33, 1000, True),
    (47, 33, 1000, False),
)


class KeptBuffers:
    """The serial split-K buffers of the last launch, kept for the next one of the same grid."""

    def __init__(self) -> None:
        self.partial = None
        self.counters = None
        self._grid = None

    def __call__(self, device, grid, tile_size):
        tiles_n, split_k, tiles_m = grid
        if split_k == 1:
            return None, None
        if self._grid != (grid, tile_size):
            self._grid = (grid, tile_size)
            self.partial = torch.full((tiles_n * split_k * tiles_m * tile_size,), float("nan"), device=device)
            self.counters = torch.zeros(tiles_n * tiles_m, dtype=torch.int32, device=device)
        return self.partial, self.counters


def _operands(m, n, k, b_column_major, dtype, generator):
    a = torch.randn(m, k, generator=generator).to(dtype)
    if b_column_major:
        return a, torch.randn(n, k, generator=generator).to(dtype).t()
    return a, torch.randn(k, n, generator=generator).to(dtype)


def main() -> None:
    kept = KeptBuffers()
    _families._split_k_buffers = kept
    generator = torch.Generator().manual_seed(2025)
    records = []
    for family in (FAMILIES["small_m"], FAMILIES["decode"]):
        for dtype in (torch.float32, torch.float16):
            for m, n, k, b_column_major in CASES:
                a, b = _operands(m, n, k, b_column_major, dtype, generator)
                reference = a.double() @ b.double()
                problem = MatmulProblem(m, n, k, a.element_size(), None, False, b_column_major)
                for config in (config for config in family.configs if config.split_k > 1):
                    if family.unsupported_reason(config, problem):
                        continue
                    record = {"family": family.name, "config": config.tag, "split_k": config.split_k, "m": m,
                              "n": n, "k": k, "b_column_major": b_column_major,
                              "dtype": str(dtype).removeprefix("torch.")}
                    try:
                        first = family.launch(config, a, b)
                        record["counters_zero"] = [bool((kept.counters == 0).all())]
                        kept.partial.fill_(float("nan"))
                        second = family.launch(config, a, b)
                        record["counters_zero"].append(bool((kept.counters == 0).all()))
                        record["errors"] = [relative_errors(out, reference) for out in (first, second)]
                        record["same_bits"] = torch.equal(first, second)
                    except Exception as error:  # recorded, and failed by the test, with its message
                        record["error"] = f"{type(error).__name__}: {error}"
                    records.append(record)
    json.dump({"records": records}, sys.stdout)


if __name__ == "__main__":
    main()
