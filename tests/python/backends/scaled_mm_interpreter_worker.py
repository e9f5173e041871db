"""Runs every config of the Triton FP8 kernels (pointer and persistent TMA) through ``kabi.ops.scaled_mm`` on CPU
tensors in Triton's interpreter; prints one JSON object: how many calls ran, and every failure.

Started by test_triton_scaled_mm_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before
Triton is first imported, and other test modules import Triton for real. Not a test module (no ``test_`` prefix).
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import kabi  # noqa: E402
from kabi.backends.triton import register_triton_kernels  # noqa: E402
from kabi.backends.triton._names import scaled_mm_kernel_name  # noqa: E402
from kabi.backends.triton._scaled_mm import SCALED_MM_CONFIGS, SCALED_MM_TMA_CONFIGS  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _scaled_mm_checks import (FP8_DTYPES, OUT_DTYPES, SCALE_KINDS, make_inputs, verdict,  # noqa: E402
                               with_strided_row_scales)

# (M, N, K): edges of every tile (M and N off 16, K off 32 so the K loop's mask runs; TMA, which needs K a multiple
# of 16, declines it), the same with K of 16-byte rows for TMA, and M large enough for the tallest tile, which
# declines smaller M.
_SHAPES = ((19, 40, 72), (19, 40, 80), (130, 24, 48))


def main() -> None:
    names = register_triton_kernels(device="cpu")
    failures, runs = [], 0
    kernels = [(config, False) for config in SCALED_MM_CONFIGS] + [(config, True) for config in SCALED_MM_TMA_CONFIGS]
    for index, (config, tma) in enumerate(kernels):
        name = scaled_mm_kernel_name(config.tag, "cpu", tma)
        if name not in names:
            failures.append(f"{name} was not registered")
            continue
        config_runs = 0
        for m, n, k in _SHAPES:
            for case, (scales, out_dtype, fp8) in enumerate(
                    (scales, out_dtype, fp8) for scales in SCALE_KINDS for out_dtype in OUT_DTYPES
                    for fp8 in FP8_DTYPES):
                bias_dtype = out_dtype if case % 2 else None
                inputs = make_inputs(m, n, k, a_dtype=fp8, b_dtype=fp8, scales=scales, bias_dtype=bias_dtype,
                                     seed=index * 100 + case)
                # Every third case reads its row-wise scales through a stride of 3 (the kernels take any stride).
                a, b, scale_a, scale_b, bias = with_strided_row_scales(inputs) if case % 3 == 0 else inputs
                candidates = kabi.explain(kabi.ops.scaled_mm, a, b, scale_a, scale_b, bias,
                                          out_dtype=out_dtype).candidates
                if name not in {candidate.name for candidate in candidates if candidate.eligible}:
                    continue
                where = f"{name} {m}x{n}x{k} {scales} strided={case % 3 == 0} {out_dtype} {fp8} bias={bias_dtype}"
                try:
                    with kabi.use(scaled_mm=name):
                        out = kabi.ops.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)
                    note = verdict(out, a, b, scale_a, scale_b, bias, out_dtype)
                    if note is not None:
                        failures.append(f"{where}: {note}")
                    config_runs += 1
                except Exception as error:  # recorded, and failed by the test, with its message
                    failures.append(f"{where}: {type(error).__name__}: {error}")
        if config_runs == 0:
            failures.append(f"{name} accepted none of the problems")
        runs += config_runs
    print(json.dumps({"runs": runs, "failures": failures}))


if __name__ == "__main__":
    main()
