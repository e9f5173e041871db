"""Runs the persistent grouped GEMM on CPU tensors in Triton's interpreter; prints one JSON object of failures and
counts.

Started by test_triton_grouped_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before Triton
is first imported, and other test modules import Triton for real. Not a test module itself (no ``test_`` prefix).
Every case runs through the first config (directly, and through kabi.ops with the kernel forced); every other config
runs every case in float32. bfloat16 runs too: the launcher widens its operands to float32 before tl.dot on the CPU.
Each case also runs as the core launches a device binary of the kernel (``launch_as_binary``), and through small
configs that compute a group's last rows their own way (``LAST_TILE_CONFIGS``: a tail, a short last tile) in float32
and bfloat16, with cases of their own (``LAST_TILE_CASES``) added.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _grouped_checks import GROUPED_CASES, SIZES, GroupedCase, assert_matches, make_inputs  # noqa: E402

import kabi  # noqa: E402
from kabi.backends.triton import grouped_kernel_name, register_triton_kernels  # noqa: E402
from kabi.backends.triton._configs import MatmulConfig, ceil_div  # noqa: E402
from kabi.backends.triton._grouped import GROUPED_CONFIGS, launch_grouped_mm  # noqa: E402
from kabi.backends.triton._kernel_modules import GROUPED_KERNELS  # noqa: E402

# 32-row tiles whose last row tile absorbs up to 16 more rows (a tail), or runs as a 16-row tile when at most 16 rows
# are left for it (a short last tile): the shipped ones are taller than these cases' groups.
LAST_TILE_CONFIGS = (MatmulConfig(32, 16, 16, num_warps=4, num_stages=2, tail_m=16),
                     MatmulConfig(32, 16, 16, num_warps=4, num_stages=2, short_m=16))
LAST_TILE_DTYPES = (torch.float32, torch.bfloat16)
# Groups whose last row tile has fewer than, exactly and more than 16 rows left, after one or two full tiles or as
# their only tile, with empty groups between them and rows past the last offset; every row in one group of three
# tiles; the 3-D form with 16 rows left in each group.
LAST_TILE_CASES = (
    GroupedCase("last-tile-remainders", group_rows=(38, 0, 48, 49, 0, 16, 17, 80, 0), tail=5),
    GroupedCase("all-rows-in-one-group-of-three-tiles", group_rows=(0, 0, 70, 0)),
    GroupedCase("3d-last-tile", groups=2, rows_per_group=48),
)

# The SM count a binary bakes in (its num_programs constant): the grid is min(this, the manifest's item bound), so
# the small cases here run fewer programs than num_programs, as a binary does on small problems.
_BINARY_PROGRAMS = 132


def _core_stride(tensor: torch.Tensor, dim: int) -> int:
    """A stride as the core passes a device binary: 0 for a group dimension x or out lacks (the 2-D form) or of
    size 1."""
    if tensor.dim() + dim < 0 or (dim == -3 and tensor.shape[dim] == 1):
        return 0
    return tensor.stride(dim)


def launch_as_binary(config, x, w, offs):
    """grouped_mm as the core launches a device binary of the kernel: offs NULL when absent (an empty tensor's data
    pointer), strides as the core reads them, the manifest's grid rule, num_programs the baked-in SM count."""
    groups, k, n = w.shape
    rows = x.shape[-2]
    out = torch.full((rows, n) if offs is not None else (groups, rows, n), float("nan"), dtype=x.dtype)
    row_tiles = max(ceil_div(rows, config.block_m) + groups, groups * ceil_div(rows, config.block_m))
    grid = min(_BINARY_PROGRAMS, row_tiles * ceil_div(n, config.block_n))
    if grid == 0:
        return out
    offsets = offs if offs is not None else torch.empty(0, dtype=torch.int32)
    assert offs is not None or offsets.data_ptr() == 0
    GROUPED_KERNELS.grouped_mm_kernel[(grid,)](
        x, w, offsets, out, groups, rows, n, k, _core_stride(x, -3), x.stride(-2), x.stride(-1),
        _core_stride(w, -3), w.stride(1), w.stride(2), _core_stride(out, -3), out.stride(-2), out.stride(-1),
        _BINARY_PROGRAMS, USE_TMA=False, W_N_BY_K=w.stride(1) == 1, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, BLOCK_K=config.block_k, DOT_IN_FLOAT32=x.dtype == torch.bfloat16,
        INPUT_PRECISION="ieee", TAIL_M=config.tail_m, SHORT_M=config.short_m)
    return out


def check_cases(config, dtype, *, with_out: bool, cases=GROUPED_CASES) -> tuple[int, list[str]]:
    """Every case in both weight layouts through ``config`` in ``dtype``, launched directly (also into a given out,
    with ``with_out``) and as the core launches a binary: the cases that ran, and the failures."""
    runs, failures = 0, []
    for case in cases:
        for transposed_weight, (k, n) in ((True, SIZES[0]), (False, SIZES[1])):
            x, w, offs = make_inputs(case, dtype, transposed_weight=transposed_weight, k=k, n=n)
            where = f"{config.tag} {dtype} {case.name} transposed={transposed_weight}"
            try:
                assert_matches(launch_grouped_mm(config, x, w, offs), x, w, offs)
                if with_out:
                    out = torch.full_like(launch_grouped_mm(config, x, w, offs), float("nan"))
                    assert launch_grouped_mm(config, x, w, offs, out=out) is out
                    assert_matches(out, x, w, offs)
                assert_matches(launch_as_binary(config, x, w, offs), x, w, offs)
                runs += 1
            except Exception as error:  # recorded, and failed by the test, with its message
                failures.append(f"{where}: {type(error).__name__}: {error}")
    return runs, failures


def main() -> None:
    names = register_triton_kernels(device="cpu")
    failures, runs = [], 0
    plan = [(GROUPED_CONFIGS[0], dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32)]
    plan += [(config, torch.float32) for config in GROUPED_CONFIGS[1:]]
    for config, dtype in plan:
        name = grouped_kernel_name(config.tag, "cpu")
        if name not in names:
            failures.append(f"{name} was not registered")
        config_runs, config_failures = check_cases(config, dtype, with_out=True)
        runs += config_runs
        failures += config_failures
        # Enough rows for the tallest tile, which declines fewer (its supports predicate).
        many_rows = next(case for case in GROUPED_CASES if case.name == "many-rows")
        x, w, offs = make_inputs(many_rows, dtype, transposed_weight=True)
        try:
            with kabi.use(grouped_mm=name):
                assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)
        except Exception as error:
            failures.append(f"{name} through kabi.ops: {type(error).__name__}: {error}")
    for config in LAST_TILE_CONFIGS:
        for dtype in LAST_TILE_DTYPES:
            config_runs, config_failures = check_cases(config, dtype, with_out=False,
                                                       cases=GROUPED_CASES + LAST_TILE_CASES)
            runs += config_runs
            failures += config_failures
    print(json.dumps({"runs": runs, "failures": failures}))


if __name__ == "__main__":
    main()
