"""Runs the fused Triton linear kernel on CPU tensors in Triton's interpreter; prints one JSON object of records.

Started by test_triton_linear_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before Triton
is first imported, and other test modules import Triton for real. Not a test module itself (no ``test_`` prefix).

Each record: config, case, dtype, activation, the gate's verdict (None when the output matches the float64
reference within the op's tolerance), whether ``out=`` was written and returned, and the error text if a launch
raised.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from _linear_cases import LINEAR_CASES, make_inputs, tolerances  # noqa: E402

from kabi._base.declarations import Tolerance  # noqa: E402
from kabi._selection.correctness import check_output, reference_output  # noqa: E402
from kabi.backends.triton._linear import LINEAR_CONFIGS, launch_linear, linear_unsupported_reason  # noqa: E402
from kabi.ops import _references  # noqa: E402
from kabi.ops._references import ACTIVATIONS  # noqa: E402

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _verdict(output, x, w, bias, activation, tolerance):
    reference = reference_output(_references.linear, [x, w, bias, activation])
    return check_output(output, reference, tolerance, expected_dtype=x.dtype)


def _record(config, case, dtype, activation, tolerance, seed):
    x, w, bias = make_inputs(case, dtype, seed)
    record = {"config": config.tag, "case": case.name, "dtype": str(dtype).removeprefix("torch."),
              "activation": activation}
    try:
        record["verdict"] = _verdict(launch_linear(config, x, w, bias, activation), x, w, bias, activation,
                                     tolerance)
        # A given out whose leading dimensions do not nest (a transposed batch) takes the copy-back path.
        out = torch.full((*case.x_shape[:-1], case.n), float("nan"), dtype=dtype)
        if out.dim() > 2:
            out = out.transpose(0, 1).contiguous().transpose(0, 1)
        returned = launch_linear(config, x, w, bias, activation, out=out)
        record["out_returned"] = returned is out
        record["out_verdict"] = _verdict(out, x, w, bias, activation, tolerance)
    except Exception as error:  # recorded, and failed by the test, with its message
        record["error"] = f"{type(error).__name__}: {error}"
    return record


def main() -> None:
    op_tolerances = {name: Tolerance(**values) for name, values in tolerances().items()}
    records = []
    # Every case, dtype and activation through the config that fits the case's rows best; every config that fits
    # through one case per activation.
    for index, case in enumerate(LINEAR_CASES):
        rows = torch.Size(case.x_shape[:-1]).numel()
        fitting = [config for config in LINEAR_CONFIGS
                   if not linear_unsupported_reason(config, rows, case.n, case.x_shape[-1], 2, None)]
        for dtype in _DTYPES:
            tolerance = op_tolerances[str(dtype).removeprefix("torch.")]
            for activation in ACTIVATIONS:
                records.append(_record(fitting[0], case, dtype, activation, tolerance, seed=index * 7 + 1))
        for config in fitting[1:]:
            for activation in ACTIVATIONS:
                records.append(_record(config, case, torch.float16, activation, op_tolerances["float16"],
                                       seed=index * 7 + 2))
    json.dump({"configs": [config.tag for config in LINEAR_CONFIGS], "records": records}, sys.stdout)


if __name__ == "__main__":
    main()
