"""Runs the fused Triton linear kernel on CPU tensors in Triton's interpreter; prints one JSON object of records.

Started by test_triton_linear_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before Triton
is first imported, and other test modules import Triton for real. Not a test module itself (no ``test_`` prefix).

Each record: config, case, dtype, activation, the gate's verdict (None when the output matches the float64
reference within the op's tolerance), whether ``out=`` was written and returned, and the error text if a launch
raised.

Each binary record runs a problem a device binary admits as the core launches that binary (``launch_as_binary``):
the arguments its manifest's params name, filled as the core fills them (a NULL bias when the call has none, the
activation's index in the op's enum), the constants it is compiled with (``ACTIVATION=None``: the activation chosen
at run time), and its grid rule. Its verdict against the reference, and whether it gave the same bits as the Python
kernel (the activation and the bias compiled in) on the same inputs.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from _linear_cases import BINARY_LINEAR_CASES, LINEAR_CASES, make_inputs, tolerances  # noqa: E402

from kabi._base.declarations import Tolerance  # noqa: E402
from kabi._selection.correctness import check_output, reference_output  # noqa: E402
from kabi.backends.triton._configs import ceil_div  # noqa: E402
from kabi.backends.triton._linear import (LINEAR_CONFIGS, LINEAR_FAMILY, launch_linear,  # noqa: E402
                                          linear_unsupported_reason)
from kabi.backends.triton._kernel_modules import LINEAR_KERNELS  # noqa: E402
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


def _fitting(case, element_size=2):
    rows = torch.Size(case.x_shape[:-1]).numel()
    return [config for config in LINEAR_CONFIGS
            if not linear_unsupported_reason(config, rows, case.n, case.x_shape[-1], element_size, None)]


def _param_value(param, tensors, dims, activation):
    """One manifest param's argument, as the core's launch computes it."""
    if param.kind == "tensor":
        tensor = tensors[param.get("index")]
        # An absent optional input passes NULL: an empty tensor's data pointer is 0.
        return tensor if tensor is not None else torch.empty(0, dtype=tensors[0].dtype)
    if param.kind == "dim":
        return dims[param.get("name")]
    if param.kind == "stride":
        tensor = tensors[param.get("index")]
        return 0 if tensor is None else tensor.stride(param.get("dim"))
    assert param.kind == "attribute" and param.get("index") == 0, param.text()
    return list(ACTIVATIONS).index(activation)


def launch_as_binary(config, x, w, bias, activation):
    """linear through the kernel as the core launches its device binary of ``config``."""
    spec = LINEAR_FAMILY.binary_spec(config, x.dtype, "row_major")
    n, k = w.shape
    rows = torch.Size(x.shape[:-1]).numel()
    out = torch.full((*x.shape[:-1], n), float("nan"), dtype=x.dtype)
    dims = {"batch": rows, "N": n, "K": k}
    values = iter([_param_value(param, (x, w, bias, out), dims, activation) for param in spec.params])
    # bfloat16's product in float32: the interpreter's bfloat16 tl.dot is wrong (a GPU takes the operands as they are).
    constexprs = dict(spec.constexprs, DOT_IN_FLOAT32=x.dtype == torch.bfloat16)
    arguments = {name: constexprs[name] if kind == "constexpr" else next(values)
                 for name, kind in spec.signature.items()}
    assert next(values, None) is None
    grid = tuple(eval(rule, {"cdiv": ceil_div, **dims}) for rule in spec.grid)  # noqa: S307 - the family's rules
    LINEAR_KERNELS.linear_kernel[grid](**arguments)
    return out


def _binary_record(config, case, dtype, activation, tolerance, seed):
    x, w, bias = make_inputs(case, dtype, seed)
    record = {"config": config.tag, "case": case.name, "dtype": str(dtype).removeprefix("torch."),
              "activation": activation}
    try:
        out = launch_as_binary(config, x, w, bias, activation)
        record["verdict"] = _verdict(out, x, w, bias, activation, tolerance)
        record["same_as_python_kernel"] = torch.equal(out, launch_linear(config, x, w, bias, activation))
    except Exception as error:  # recorded, and failed by the test, with its message
        record["error"] = f"{type(error).__name__}: {error}"
    return record


def main() -> None:
    op_tolerances = {name: Tolerance(**values) for name, values in tolerances().items()}
    records = []
    # Every case, dtype and activation through the config that fits the case's rows best; every config that fits
    # through one case per activation.
    for index, case in enumerate(LINEAR_CASES):
        fitting = _fitting(case)
        for dtype in _DTYPES:
            tolerance = op_tolerances[str(dtype).removeprefix("torch.")]
            for activation in ACTIVATIONS:
                records.append(_record(fitting[0], case, dtype, activation, tolerance, seed=index * 7 + 1))
        for config in fitting[1:]:
            for activation in ACTIVATIONS:
                records.append(_record(config, case, torch.float16, activation, op_tolerances["float16"],
                                       seed=index * 7 + 2))
    binary_records = []
    for index, case in enumerate(BINARY_LINEAR_CASES):
        for dtype in (torch.float16, torch.bfloat16):
            tolerance = op_tolerances[str(dtype).removeprefix("torch.")]
            for activation in ACTIVATIONS:
                binary_records.append(_binary_record(_fitting(case)[0], case, dtype, activation, tolerance,
                                                     seed=index * 7 + 3))
    json.dump({"configs": [config.tag for config in LINEAR_CONFIGS], "records": records,
               "binary_records": binary_records}, sys.stdout)


if __name__ == "__main__":
    main()
