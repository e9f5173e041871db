"""Runs the persistent grouped GEMM on CPU tensors in Triton's interpreter; prints one JSON object of failures and
counts.

Started by test_triton_grouped_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before Triton
is first imported, and other test modules import Triton for real. Not a test module itself (no ``test_`` prefix).
Every case runs through the first config (directly, and through kabi.ops with the kernel forced); every other config
runs every case in float32. bfloat16 runs too: the launcher widens its operands to float32 before tl.dot on the CPU.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _grouped_checks import GROUPED_CASES, SIZES, assert_matches, make_inputs  # noqa: E402

import kabi  # noqa: E402
from kabi.backends.triton import grouped_kernel_name, register_triton_kernels  # noqa: E402
from kabi.backends.triton._grouped import GROUPED_CONFIGS, launch_grouped_mm  # noqa: E402


def main() -> None:
    names = register_triton_kernels(device="cpu")
    failures, runs = [], 0
    plan = [(GROUPED_CONFIGS[0], dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32)]
    plan += [(config, torch.float32) for config in GROUPED_CONFIGS[1:]]
    for config, dtype in plan:
        name = grouped_kernel_name(config.tag, "cpu")
        if name not in names:
            failures.append(f"{name} was not registered")
        for case in GROUPED_CASES:
            for transposed_weight, (k, n) in ((True, SIZES[0]), (False, SIZES[1])):
                x, w, offs = make_inputs(case, dtype, transposed_weight=transposed_weight, k=k, n=n)
                where = f"{config.tag} {dtype} {case.name} transposed={transposed_weight}"
                try:
                    assert_matches(launch_grouped_mm(config, x, w, offs), x, w, offs)
                    out = torch.full_like(launch_grouped_mm(config, x, w, offs), float("nan"))
                    assert launch_grouped_mm(config, x, w, offs, out=out) is out
                    assert_matches(out, x, w, offs)
                    runs += 1
                except Exception as error:  # recorded, and failed by the test, with its message
                    failures.append(f"{where}: {type(error).__name__}: {error}")
        # Enough rows for the tallest tile, which declines fewer (its supports predicate).
        many_rows = next(case for case in GROUPED_CASES if case.name == "many-rows")
        x, w, offs = make_inputs(many_rows, dtype, transposed_weight=True)
        try:
            with kabi.use(grouped_mm=name):
                assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)
        except Exception as error:
            failures.append(f"{name} through kabi.ops: {type(error).__name__}: {error}")
    print(json.dumps({"runs": runs, "failures": failures}))


if __name__ == "__main__":
    main()
