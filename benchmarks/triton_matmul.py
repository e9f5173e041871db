"""Triton matmul candidates against cuBLAS on the matmul shape suites, and the host cost of launching them.

For every shape of the suites (registry/ops/matmul.toml: llm-decode, llm-prefill by default) and each dtype:
TFLOP/s of torch.matmul (cuBLAS) and of every Triton candidate kabi would consider for the shape (each family's
configs, pruned by shape as the tuner prunes them), launched through kabi with the candidate forced -- both as a
Python kernel (Triton's JIT launcher) and, for the families that compile to one entry, as a device binary the core
launches. Times are kabi.bench medians with the L2 flushed between calls; decode shapes are also timed as
CUDA-graph replays, which removes host time, once a replay is seen to recompute the result. A candidate that fails
to compile, launch or match the reference is recorded with the error instead of a time.

Then the host cost per call on a tiny problem: a kabi-dispatched Triton kernel (Python and device binary), the
same cubin through a raw cuLaunchKernel, Triton's @jit launch and an @autotune launch.

Usage (on a GPU):
    python benchmarks/triton_matmul.py [--suites llm-decode llm-prefill] [--dtypes bfloat16 float16] [--out DIR]
Writes DIR/triton_matmul-<device>.json (default DIR: benchmarks/results) and prints a table.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import torch
import triton

# This benchmark compares each config as a Python kernel with its device binary, which it compiles and loads itself:
# the default registration's binaries would make the Python kernels decline the problems they serve.
os.environ.setdefault("KABI_TRITON_BINARIES", "0")

import kabi  # noqa: E402
from kabi._selection.bench import bench  # the project's one timing utility (DESIGN.md), shared with the tuner
from kabi.backends.triton import compile_to_binary, kernel_name, load_binaries, register_triton_kernels
from kabi.backends.triton._families import FAMILIES, MatmulProblem, device_facts

_ROOT = Path(__file__).resolve().parents[1]
_TOLERANCE = tomllib.loads((_ROOT / "registry" / "ops" / "matmul.toml").read_text())["tolerance"]


def _tflops(m: int, n: int, k: int, microseconds: float) -> float:
    return 2.0 * m * n * k / (microseconds * 1e-6) / 1e12


def _check(out: torch.Tensor, reference: torch.Tensor, dtype: str) -> str:
    """"" if out matches the float64 reference within the op's tolerance, else why not."""
    difference = out.double() - reference
    norm = (difference.norm() / reference.norm()).item()
    extreme = (difference.abs().max() / reference.abs().max()).item()
    if norm <= _TOLERANCE[dtype]["norm"] and extreme <= _TOLERANCE[dtype]["extreme"]:
        return ""
    return f"wrong result: relative error norm {norm:.2e}, extreme {extreme:.2e}"


def _time(fn, graph: bool) -> float:
    return bench(fn, cuda_graph=graph, repeat=15, min_time_s=0.02).median_us


def _graph_replay_error(fn, reference: torch.Tensor, dtype: str) -> str:
    """"" if a CUDA graph captured from one call recomputes the result on replay, else why not (a launch on a
    stream other than the capturing one is not recorded, and the graph times nothing)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    problem = _check(out, reference, dtype)
    return f"CUDA-graph replay does not recompute the output ({problem})" if problem else ""


def _measure(label: str, fn, shape, dtype: str, reference: torch.Tensor, decode: bool) -> dict:
    m, n, k = shape
    row = {"candidate": label}
    try:
        problem = _check(fn(), reference, dtype)
        if problem:
            row["error"] = problem
            return row
        row["time_us"] = _time(fn, graph=False)
        row["tflops"] = _tflops(m, n, k, row["time_us"])
        if decode:
            row["graph_error"] = _graph_replay_error(fn, reference, dtype)
            if not row["graph_error"]:
                row["graph_time_us"] = _time(fn, graph=True)
                row["graph_tflops"] = _tflops(m, n, k, row["graph_time_us"])
    except Exception as error:  # a failing candidate is a result, not the end of the run
        row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:400]
    return row


def _eligible(shape, dtype: str, arch: int):
    m, n, k = shape
    torch_dtype = getattr(torch, dtype)
    problem = MatmulProblem(m, n, k, torch.empty((), dtype=torch_dtype).element_size(), arch)
    for family in FAMILIES.values():
        if torch_dtype not in family.dtypes or arch < family.arch_min:
            continue
        if family.exact_archs and arch not in family.exact_archs:
            continue
        for config in family.configs:
            if not family.unsupported_reason(config, problem):
                yield family, config


def _compile_binaries(shapes, dtypes, arch: int, multiprocessors: int, directory: Path) -> dict:
    """Row-major device binaries of the eligible candidates (split-K included: one launch), one per row count where
    the family compiles one per count (decode); {(family, tag, dtype, rows): name}."""
    names, errors = {}, {}
    for dtype in dtypes:
        wanted = {(family, config, family.rows_for(config, shape[0])) for shape in shapes
                  for family, config in _eligible(shape, dtype, arch)
                  if "row_major" in family.binary_layouts(config)}
        for family, config, rows in sorted(wanted, key=lambda item: (item[0].name, item[1].tag, item[2])):
            try:
                path = compile_to_binary(family, config, dtype, arch, directory, multiprocessors=multiprocessors,
                                         rows=rows)
                names[(family.name, config.tag, dtype, rows)] = path.name.removesuffix(".kabi-manifest")
            except Exception as error:
                errors[f"{family.name}.{config.tag}.{dtype}.m{rows}"] = f"{type(error).__name__}: {error}"[:400]
    load_binaries(directory)
    return {"names": names, "errors": errors}


def benchmark_shapes(suites: list[str], dtypes: list[str], binaries: bool) -> tuple[list[dict], dict]:
    arch, multiprocessors = device_facts(torch.device("cuda"))
    suite_data = tomllib.loads((_ROOT / "registry" / "ops" / "matmul.toml").read_text())["suites"]
    shapes = [(suite, tuple(shape)) for suite in suites for shape in suite_data[suite]["shapes"]]
    binary_info = {"names": {}, "errors": {}}
    if binaries:
        with tempfile.TemporaryDirectory() as directory:
            binary_info = _compile_binaries([shape for _, shape in shapes], dtypes, arch, multiprocessors,
                                            Path(directory))
    results = []
    for suite, shape in shapes:
        m, n, k = shape
        decode = suite == "llm-decode"
        for dtype in dtypes:
            generator = torch.Generator(device="cuda").manual_seed(m + n + k)
            a = torch.randn(m, k, device="cuda", generator=generator).to(getattr(torch, dtype))
            b = torch.randn(k, n, device="cuda", generator=generator).to(getattr(torch, dtype))
            reference = a.double() @ b.double()
            rows = [_measure("torch.matmul (cuBLAS)", lambda: torch.matmul(a, b), shape, dtype, reference, decode)]
            for family, config in _eligible(shape, dtype, arch):
                name = kernel_name(family.name, config.tag)
                candidates = [(name, name)]
                binary = binary_info["names"].get((family.name, config.tag, dtype, family.rows_for(config, m)))
                if binary:
                    candidates.append((f"{name} [binary]", binary))
                for label, forced in candidates:
                    # Forced for the whole measurement, so that the timed call is the caller's plain call.
                    with kabi.use(matmul=forced):
                        rows.append(_measure(label, lambda: kabi.ops.matmul(a, b), shape, dtype, reference, decode))
            del reference
            results.append({"suite": suite, "shape": list(shape), "dtype": dtype, "candidates": rows})
            _print_shape(results[-1])
    return results, binary_info["errors"]


def _print_shape(result: dict) -> None:
    m, n, k = result["shape"]
    # Decode shapes are compared by their CUDA-graph replays, where host time does not count.
    key = "graph_tflops" if result["suite"] == "llm-decode" else "tflops"
    timed = [row for row in result["candidates"] if key in row]
    cublas = next((row for row in timed if row["candidate"].startswith("torch")), None)
    best = max((row for row in timed if not row["candidate"].startswith("torch")), key=lambda row: row[key],
               default=None)
    failed = sum("error" in row for row in result["candidates"])
    line = f"{result['suite']:<12} {m:>5}x{n:>5}x{k:>5} {result['dtype']:<9} {key:<12}"
    line += f" cuBLAS {cublas[key]:7.1f} TF/s" if cublas else " cuBLAS failed"
    if best:
        line += f" | best Triton {best[key]:7.1f} TF/s ({best['candidate']})"
    print(line + (f" | {failed} failed" if failed else ""), flush=True)


def _raw_launcher(manifest_path: Path, grid: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
    """A cuLaunchKernel of a compiled tiled-kernel cubin with its parameters packed by hand (no kabi, no Triton)."""
    from cuda.bindings import driver

    from kabi.backends.triton import read_manifest

    manifest = read_manifest(manifest_path)
    torch.cuda.current_stream().synchronize()
    error, module = driver.cuModuleLoadData((manifest_path.parent / manifest.image).read_bytes())
    assert error == driver.CUresult.CUDA_SUCCESS, error
    error, function = driver.cuModuleGetFunction(module, manifest.entry.encode())
    assert error == driver.CUresult.CUDA_SUCCESS, error
    m, k = a.shape
    n = b.shape[1]
    tensors = (a, b, c)
    values, types = [], []
    for param in manifest.params:
        if param.kind == "tensor":
            values.append(tensors[param.get("index")].data_ptr())
            types.append(ctypes.c_void_p)
        elif param.kind == "dim":
            values.append({"M": m, "N": n, "K": k}[param.get("name")])
            types.append(ctypes.c_int32)
        elif param.kind == "stride":
            values.append(tensors[param.get("index")].stride(param.get("dim")))
            types.append(ctypes.c_int32)
        elif param.kind == "constant":
            values.append(param.get("value"))
            types.append(ctypes.c_int32)
        else:
            values.append(0)
            types.append(ctypes.c_void_p)
    arguments = (tuple(values), tuple(types))
    stream = torch.cuda.current_stream().cuda_stream

    def launch():
        driver.cuLaunchKernel(function, grid, 1, 1, *manifest.block, manifest.shared_memory_bytes, stream,
                              arguments, 0)
        return c

    return launch


def benchmark_launch_cost() -> dict:
    """Host time per call (back-to-back launches) of one small tiled matmul through each launch path."""
    family = FAMILIES["tiled"]
    config = family.configs[-1]
    m = n = k = 128
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    arch, _ = device_facts(torch.device("cuda"))
    directory = Path(tempfile.mkdtemp())
    manifest_path = compile_to_binary("tiled", config, "float16", arch, directory)
    load_binaries(directory)
    binary_name = manifest_path.name.removesuffix(".kabi-manifest")
    python_name = kernel_name("tiled", config.tag)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    constants = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                     INPUT_PRECISION="ieee", CHECK_ROW_PITCHES=False, num_warps=config.num_warps,
                     num_stages=config.num_stages, enable_fp_fusion=True)
    autotuned = triton.autotune(
        [triton.Config({"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                        "GROUP_M": config.group_m}, num_warps=config.num_warps, num_stages=config.num_stages)],
        key=["M", "N", "K"])(family.kernel)

    def autotuned_grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    def jit_launch():
        family.kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), **constants)
        return c

    def autotune_launch():
        autotuned[autotuned_grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), INPUT_PRECISION="ieee",
                                  CHECK_ROW_PITCHES=False, enable_fp_fusion=True)
        return c

    def kabi_call():
        return kabi.ops.matmul(a, b, out=c)

    paths = {
        "kabi, device binary": (kabi_call, binary_name),
        "kabi, Triton Python kernel": (kabi_call, python_name),
        "raw cuLaunchKernel (cuda.bindings)": (_raw_launcher(manifest_path, grid[0], a, b, c), None),
        "Triton @jit launch": (jit_launch, None),
        "Triton @autotune launch": (autotune_launch, None),
    }
    reference = a.double() @ b.double()
    results = {}
    for label, (fn, forced) in paths.items():
        try:
            with kabi.use(matmul=forced):
                c.zero_()
                fn()
                torch.cuda.synchronize()
                problem = _check(c, reference, "float16")
                results[label] = {"error": problem} if problem else {
                    "host_us_per_call": bench(fn, back_to_back=True, repeat=15, min_time_s=0.05).median_us}
        except Exception as error:
            results[label] = {"error": f"{type(error).__name__}: {error}"[:400]}
        print(f"launch cost  {label:<36} {results[label]}", flush=True)
    raw = results.get("raw cuLaunchKernel (cuda.bindings)", {}).get("host_us_per_call")
    kabi_binary = results.get("kabi, device binary", {}).get("host_us_per_call")
    if raw and kabi_binary:
        results["kabi binary / raw launch"] = kabi_binary / raw
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["llm-decode", "llm-prefill"])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16"])
    parser.add_argument("--out", type=Path, default=_ROOT / "benchmarks" / "results")
    parser.add_argument("--no-binaries", action="store_true", help="skip the device-binary candidates")
    arguments = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("triton_matmul.py needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    started = time.time()
    register_triton_kernels()
    properties = torch.cuda.get_device_properties(0)
    report = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": properties.name, "arch": properties.major * 10 + properties.minor,
                   "multiprocessors": properties.multi_processor_count},
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                     "cuda": torch.version.cuda, "kabi": getattr(kabi, "__version__", "unknown")},
    }
    try:
        report["shapes"], report["binary_compile_errors"] = benchmark_shapes(
            arguments.suites, arguments.dtypes, not arguments.no_binaries)
        report["launch_cost"] = benchmark_launch_cost()
    except Exception:
        report["fatal"] = traceback.format_exc()
        print(report["fatal"], file=sys.stderr)
    report["elapsed_s"] = round(time.time() - started, 1)
    arguments.out.mkdir(parents=True, exist_ok=True)
    device_slug = properties.name.replace(" ", "-").lower()
    path = arguments.out / f"triton_matmul-{device_slug}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path} in {report['elapsed_s']} s")
    return 1 if "fatal" in report else 0


if __name__ == "__main__":
    sys.exit(main())
