"""What the first call costs, and where the time goes (issue 14, item 4).

Every figure comes from a fresh Python process, as a service's worker or a notebook would start:

- ``import``: ``import torch`` alone, then ``import kabi`` after it (the goal: kabi adds <= 0.1 s);
- ``torch``: torch.matmul's first call on the problem, after CUDA is initialised (what kabi's first call is compared
  with);
- ``cold``: kabi's first call with an empty kabi cache directory (tuning records and compiled device binaries) and an
  empty Triton cache: a new machine's first call, tuning included (goal <= 1.0 s);
- ``warm``: kabi's first call in a second process over the caches the cold one left (goal <= torch's + 50 ms).

In kabi's processes the first call is broken down by wrapping, in the child process only: the registration of the
CUDA backends (Triton import and device binaries: found, or compiled and cached), Triton's JIT compiles, and the
tuning that kabi.stats() counts (which includes the JIT compiles of the candidates it gates). The rest of the call is
reported as "other" (selection, the correctness gate's reference, allocation, the launch).

    python benchmarks/first_call.py [--problem 37x4096x4096] [--dtype bfloat16] [--runs 5] [--output FILE]
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _timed(box: dict[str, float], name: str, function: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            box[name] = box.get(name, 0.0) + time.perf_counter() - start
    return wrapper


def _child(mode: str, problem: tuple[int, int, int], dtype_name: str) -> dict[str, Any]:
    start = time.perf_counter()
    import torch
    figures: dict[str, Any] = {"import_torch_s": time.perf_counter() - start}
    if mode == "import":
        figures["kabi_bytecode_cached"] = _bytecode_cached()
        start = time.perf_counter()
        import kabi  # noqa: F401
        figures["import_kabi_s"] = time.perf_counter() - start
        return figures
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    torch.zeros(1, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    figures["device_init_s"] = time.perf_counter() - start
    m, n, k = problem
    dtype = getattr(torch, dtype_name)
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(n, k, dtype=dtype, device=device).t()
    if mode == "torch":
        call = lambda: torch.matmul(a, b)
    else:
        start = time.perf_counter()
        import kabi
        from kabi._plugins import discovery
        figures["import_kabi_s"] = time.perf_counter() - start
        breakdown: dict[str, float] = {}
        discovery._state.cuda_backends = [_timed(breakdown, "cuda_backend_registration_s", register)
                                          for register in discovery._state.cuda_backends]
        start = time.perf_counter()
        import triton.compiler
        figures["import_triton_s"] = time.perf_counter() - start
        triton.compiler.compile = _timed(breakdown, "triton_jit_s", triton.compiler.compile)
        figures["breakdown"] = breakdown
        call = lambda: kabi.ops.matmul(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    figures["first_call_s"] = time.perf_counter() - start
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    figures["second_call_s"] = time.perf_counter() - start
    if mode != "torch":
        stats = kabi.stats()
        figures["breakdown"]["tuning_s"] = stats.tuning_seconds
        figures["candidates_measured"] = stats.candidates_benchmarked
        figures["candidates_screened_out"] = stats.candidates_screened_out
        figures["pick"] = kabi.explain(kabi.ops.matmul, a, b).pick
    return figures


def _kabi_sources() -> Path:
    spec = importlib.util.find_spec("kabi")
    assert spec is not None and spec.origin is not None, "kabi is not installed"
    return Path(spec.origin).parent


def _bytecode_cached() -> bool:
    """Whether kabi's modules have compiled bytecode to load. Without it (an editable install run with
    PYTHONDONTWRITEBYTECODE=1) every import compiles kabi's source again, which here cost more than the rest of
    ``import kabi``."""
    return all(Path(importlib.util.cache_from_source(str(path))).exists() for path in _kabi_sources().rglob("*.py"))


def _run_child(mode: str, args: argparse.Namespace, environment: dict[str, str]) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--problem", "x".join(map(str, args.problem)),
         "--dtype", args.dtype], env=environment, capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        raise RuntimeError(f"the {mode} process failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default=(37, 4096, 4096), metavar="MxNxK",
                        type=lambda text: tuple(int(size) for size in text.split("x")))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.problem, args.dtype)))
        return

    report: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "problem": list(args.problem), "layout": "nn_linear",
        "dtype": args.dtype, "runs": {},
    }
    # As pip does when it installs the wheel: an editable install may have none, and may not be allowed to write it.
    compileall.compile_dir(str(_kabi_sources()), quiet=1)
    report["kabi_bytecode_cached"] = _bytecode_cached()
    environment = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="kabi-first-call-") as directory:
        runs: dict[str, list[dict[str, Any]]] = {"import": [], "torch": [], "cold": [], "warm": []}
        for index in range(args.runs):
            runs["import"].append(_run_child("import", args, environment))
            runs["torch"].append(_run_child("torch", args, environment))
            caches = {"KABI_CACHE_DIR": os.path.join(directory, f"kabi-{index}"),
                      "TRITON_CACHE_DIR": os.path.join(directory, f"triton-{index}")}
            runs["cold"].append(_run_child("cold", args, {**environment, **caches}))
            runs["warm"].append(_run_child("warm", args, {**environment, **caches}))
        report["runs"] = runs

    def median(mode: str, key: str, inner: str | None = None) -> float:
        values = [run[key][inner] if inner else run[key] for run in runs[mode] if (inner is None or inner in run[key])]
        return statistics.median(values) if values else 0.0

    summary = {
        "import_torch_s": median("import", "import_torch_s"),
        "import_kabi_after_torch_s": median("import", "import_kabi_s"),
        "import_kabi_after_torch_min_s": min(run["import_kabi_s"] for run in runs["import"]),
        "kabi_bytecode_cached": all(run["kabi_bytecode_cached"] for run in runs["import"]),
        "torch_first_call_s": median("torch", "first_call_s"),
        # Triton is imported here before the call, to time it apart; a real first call imports it itself.
        "cold_first_call_s": median("cold", "first_call_s") + median("cold", "import_triton_s"),
        "warm_first_call_s": median("warm", "first_call_s") + median("warm", "import_triton_s"),
        "cold_breakdown_s": {name: median("cold", "breakdown", name)
                             for name in ("cuda_backend_registration_s", "triton_jit_s", "tuning_s")},
        "warm_breakdown_s": {name: median("warm", "breakdown", name)
                             for name in ("cuda_backend_registration_s", "triton_jit_s", "tuning_s")},
        "import_triton_s": median("cold", "import_triton_s"),
        "picks": sorted({run["pick"] for run in runs["cold"] + runs["warm"]}),
    }
    summary["warm_minus_torch_s"] = summary["warm_first_call_s"] - summary["torch_first_call_s"]
    report["summary"] = summary
    print(json.dumps(summary, indent=1))
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
