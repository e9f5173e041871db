"""What the first call costs, and where the time goes (issue 14, item 4).

Every figure comes from a fresh Python process, as a service's worker or a notebook would start:

- ``import``: ``import torch`` alone, then ``import kabi`` after it (the goal: kabi adds <= 0.1 s);
- ``torch``: torch.matmul's first call on the problem, after CUDA is initialised (what kabi's first call is compared
  with);
- ``cold``: kabi's first call with an empty kabi cache directory (tuning records and compiled device binaries) and an
  empty Triton cache: a new machine's first call, tuning included (goal <= 1.0 s). ``binaries_packaged`` says whether
  the installed package ships the Triton device binaries (then they are registered, not compiled);
- ``warm``: kabi's first call in a second process over the caches the cold one left (goal <= torch's + 50 ms).

In kabi's processes the first call is broken down by wrapping, in the child process only: the registration of each
CUDA backend (the built-in CUDA plugin's load; the Triton kernels' declarations and device binaries: found, or
compiled and cached), Triton's import and JIT compiles, and the tuning that kabi.stats() counts (which includes the
JIT compiles of the candidates it gates; ``candidates_cut`` counts the finalists whose measurement stopped early).
Two costs that happen anywhere in the call are reported beside them, overlapping them: ``selection_s`` (the op
front's selections, each one's time in ``selection_times_s``: every registered kernel's filters and supports
predicate each time, and the first use of a library such as cuBLASLt in the first) and
``gc_s`` (Python's garbage collections, ``gc_collections`` of them per generation, timed through ``gc.callbacks``).
The breakdown covers the first call only; the rest of it is the correctness gate's reference, allocation and the
launch.

Triton is not imported ahead of the call: registering the Triton backend does not import it, so a warm call whose
pick is a native kernel never should. ``triton_imported`` says whether the call imported it; ``import_triton_s`` is
how long that import took, inside the call (0 when it did not happen).

With ``--profile FILE``, the first cold process also runs its first call under cProfile and writes the functions that
took the most time (cumulative, then own time) to FILE, headed by the command and date: where a cold call's time
goes below the breakdown's level. ``--profile-warm FILE`` does the same for the first warm process. After its calls,
each warm process also times selections whose one-time costs are paid (``selection_anatomy_s``), so the first
selection's time splits into what every selection costs and what only the first one pays.

    python benchmarks/first_call.py [--problem 37x4096x4096] [--dtype bfloat16] [--runs 5] [--output FILE]
                                    [--profile FILE] [--profile-warm FILE]
"""

from __future__ import annotations

import argparse
import compileall
import cProfile
import datetime
import importlib.abc
import importlib.util
import io
import json
import os
import platform
import pstats
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


class _TritonImportTimer(importlib.abc.MetaPathFinder):
    """Times Triton's import if the call makes it, and then wraps its JIT compiler, without importing it first."""

    def __init__(self, figures: dict[str, Any], breakdown: dict[str, float]) -> None:
        self._figures = figures
        self._breakdown = breakdown
        self._searching = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        # importlib.util.find_spec("triton") (kabi's check that Triton is installed) comes here too, without
        # importing: the finder stays until the import itself runs.
        if name != "triton" or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._searching = False
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def timed_exec_module(module: Any) -> None:
            sys.meta_path.remove(self)
            start = time.perf_counter()
            try:
                execute(module)
            finally:
                self._figures["import_triton_s"] = time.perf_counter() - start
            _time_triton_compiles(module, self._breakdown)

        spec.loader.exec_module = timed_exec_module  # type: ignore[method-assign]
        return spec


def _time_triton_compiles(triton: Any, breakdown: dict[str, float]) -> None:
    # Triton's JIT reads triton.compiler.compile when it first binds a kernel, so the wrapper sees every compile.
    triton.compiler.compile = _timed(breakdown, "triton_jit_s", triton.compiler.compile)


def _each_timed(times: list[float], function: Any) -> Any:
    """``function``, appending each call's duration to ``times``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - start)
    return wrapper


def _time_garbage_collections(figures: dict[str, Any], breakdown: dict[str, float]) -> None:
    """Add each garbage collection's time to ``gc_s`` and count the collections of each generation."""
    import gc

    collections = figures["gc_collections"] = [0, 0, 0]
    breakdown["gc_s"] = 0.0
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            breakdown["gc_s"] += time.perf_counter() - started[0]
            collections[info["generation"]] += 1

    gc.callbacks.append(callback)


def _watch_triton(figures: dict[str, Any], breakdown: dict[str, float]) -> None:
    figures["import_triton_s"] = 0.0
    figures["triton_imported_before_call"] = "triton" in sys.modules
    if figures["triton_imported_before_call"]:
        _time_triton_compiles(sys.modules["triton"], breakdown)
    else:
        sys.meta_path.insert(0, _TritonImportTimer(figures, breakdown))


def _child(mode: str, problem: tuple[int, int, int], dtype_name: str, profile: Path | None = None) -> dict[str, Any]:
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
        # The total, and each backend's share (load_builtin_plugin_s, register_triton_kernels_s).
        discovery._state.cuda_backends = [
            _timed(breakdown, "cuda_backend_registration_s",
                   _timed(breakdown, f"{register.__name__.lstrip('_')}_s", register))
            for register in discovery._state.cuda_backends]
        _watch_triton(figures, breakdown)
        from kabi.ops._front import OpFront
        selection_times: list[float] = []
        OpFront.select = _each_timed(selection_times, OpFront.select)
        _time_garbage_collections(figures, breakdown)
        call = lambda: kabi.ops.matmul(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize()
    profiler = cProfile.Profile() if profile is not None else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    if profiler is not None:
        profiler.disable()
    figures["first_call_s"] = time.perf_counter() - start
    if profiler is not None:
        _write_profile(profiler, profile, figures["first_call_s"], mode)
    if mode != "torch":
        figures["triton_imported"] = "triton" in sys.modules and not figures["triton_imported_before_call"]
        # The first call's, before the second call adds to the running figures.
        figures["breakdown"] = {**breakdown, "selection_s": sum(selection_times)}
        figures["gc_collections"] = list(figures["gc_collections"])
        # Each selection's time: a one-time cost (a library's first use) shows in one, a cost per selection in all.
        figures["selection_times_s"] = list(selection_times)
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    figures["second_call_s"] = time.perf_counter() - start
    if mode != "torch":
        stats = kabi.stats()
        figures["breakdown"]["tuning_s"] = stats.tuning_seconds
        for phase in ("gate", "screen", "measure", "graph"):
            figures["breakdown"][f"tuning_{phase}_s"] = getattr(stats, f"tuning_{phase}_seconds")
        figures["candidates_measured"] = stats.candidates_benchmarked
        figures["candidates_screened_out"] = stats.candidates_screened_out
        figures["candidates_cut"] = stats.candidates_cut
        figures["second_call_selections"] = len(selection_times) - len(figures["selection_times_s"])
        figures["pick"] = kabi.explain(kabi.ops.matmul, a, b).pick
        if mode == "warm":
            figures["selection_anatomy_s"] = _selection_anatomy(kabi, a, b)
    return figures


def _selection_anatomy(kabi: Any, a: Any, b: Any) -> dict[str, float]:
    """What the first warm selection's one-time costs were, by what selections cost once they are paid: the same
    problem selected again (every kernel's filters and supports predicates, nothing lazy left), a new problem (one
    row more: the per-problem work of a first sight, such as cuBLASLt's heuristic, and no memoized verdicts), that
    one again, and re-reading the tuning cache from disk."""
    from kabi._selection import cache
    from kabi.ops._front import front_of

    front = front_of("matmul")
    grown = a.new_empty((a.shape[0] + 1, a.shape[1])).normal_()
    figures = {}
    for name, inputs in (("same_problem", (a, b)), ("new_problem", (grown, b)), ("new_problem_again", (grown, b))):
        start = time.perf_counter()
        front.select(inputs)
        figures[name] = time.perf_counter() - start
    start = time.perf_counter()
    cache.reload()
    front.select((a, b))
    figures["cache_reload_and_select"] = time.perf_counter() - start
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


def _write_profile(profiler: cProfile.Profile, path: Path, first_call_s: float, mode: str) -> None:
    text = io.StringIO()
    statistics_of_call = pstats.Stats(profiler, stream=text)
    for order in ("cumulative", "tottime"):
        statistics_of_call.sort_stats(order).print_stats(40)
    header = (f"# {os.environ.get('KABI_FIRST_CALL_COMMAND', '')}\n"
              f"# {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}: a {mode} first call "
              f"({first_call_s:.2f} s with the profiler on), by cumulative then own time\n")
    path.write_text(header + text.getvalue())


def _run_child(mode: str, args: argparse.Namespace, environment: dict[str, str],
               profile: Path | None = None) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--problem", "x".join(map(str, args.problem)),
         "--dtype", args.dtype, *(["--profile", str(profile)] if profile is not None else [])],
        env={**environment, "KABI_FIRST_CALL_COMMAND": " ".join([sys.executable, *sys.argv])},
        capture_output=True, text=True, timeout=600)
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
    parser.add_argument("--profile", type=Path, help="where the first cold process writes its first call's profile")
    parser.add_argument("--profile-warm", type=Path,
                        help="where the first warm process writes its first call's profile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.problem, args.dtype, args.profile)))
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
    # Device binaries that ship inside the package (kabi binaries compile --native --out python/kabi/binaries/triton,
    # as a wheel built for the GPU's arch has them): then a cold call registers them instead of compiling them.
    packaged = _kabi_sources() / "binaries" / "triton"
    report["binaries_packaged"] = packaged.is_dir() and any(packaged.rglob("*.kabi-manifest"))
    environment = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="kabi-first-call-") as directory:
        runs: dict[str, list[dict[str, Any]]] = {"import": [], "torch": [], "cold": [], "warm": []}
        for index in range(args.runs):
            runs["import"].append(_run_child("import", args, environment))
            runs["torch"].append(_run_child("torch", args, environment))
            caches = {"KABI_CACHE_DIR": os.path.join(directory, f"kabi-{index}"),
                      "TRITON_CACHE_DIR": os.path.join(directory, f"triton-{index}")}
            runs["cold"].append(_run_child("cold", args, {**environment, **caches},
                                           args.profile if index == 0 else None))
            runs["warm"].append(_run_child("warm", args, {**environment, **caches},
                                           args.profile_warm if index == 0 else None))

        report["runs"] = runs

    def median(mode: str, key: str, inner: str | None = None) -> float:
        values = [run[key][inner] if inner else run[key] for run in runs[mode] if (inner is None or inner in run[key])]
        return statistics.median(values) if values else 0.0

    breakdown_names = ("cuda_backend_registration_s", "load_builtin_plugin_s", "register_triton_kernels_s",
                       "triton_jit_s", "tuning_s", "tuning_gate_s", "tuning_screen_s", "tuning_measure_s",
                       "tuning_graph_s", "selection_s", "gc_s")
    summary = {
        "import_torch_s": median("import", "import_torch_s"),
        "import_kabi_after_torch_s": median("import", "import_kabi_s"),
        "import_kabi_after_torch_min_s": min(run["import_kabi_s"] for run in runs["import"]),
        "kabi_bytecode_cached": all(run["kabi_bytecode_cached"] for run in runs["import"]),
        "torch_first_call_s": median("torch", "first_call_s"),
        # Triton's import, where a call makes it, is inside the call's time.
        "cold_first_call_s": median("cold", "first_call_s"),
        "warm_first_call_s": median("warm", "first_call_s"),
        "cold_breakdown_s": {name: median("cold", "breakdown", name) for name in breakdown_names},
        "warm_breakdown_s": {name: median("warm", "breakdown", name) for name in breakdown_names},
        "cold_triton_imported": [run["triton_imported"] for run in runs["cold"]],
        "warm_triton_imported": [run["triton_imported"] for run in runs["warm"]],
        "triton_imported_before_call": any(run["triton_imported_before_call"] for run in runs["cold"] + runs["warm"]),
        # The import's own time, from the runs that made it (0 where none did).
        "import_triton_s": statistics.median([run["import_triton_s"] for run in runs["cold"] + runs["warm"]
                                              if run["triton_imported"]] or [0.0]),
        "picks": sorted({run["pick"] for run in runs["cold"] + runs["warm"]}),
        "cold_selections": statistics.median(len(run["selection_times_s"]) for run in runs["cold"]),
        "warm_selections": statistics.median(len(run["selection_times_s"]) for run in runs["warm"]),
        "warm_second_call_selections": median("warm", "second_call_selections"),
        "cold_candidates_cut": median("cold", "candidates_cut"),
        "cold_gc_collections": [statistics.median(run["gc_collections"][generation] for run in runs["cold"])
                                for generation in range(3)],
        "warm_gc_collections": [statistics.median(run["gc_collections"][generation] for run in runs["warm"])
                                for generation in range(3)],
        "warm_second_call_s": median("warm", "second_call_s"),
        "warm_first_selection_s": statistics.median(run["selection_times_s"][0] for run in runs["warm"]),
        "warm_selection_anatomy_s": {name: median("warm", "selection_anatomy_s", name) for name in
                                     ("same_problem", "new_problem", "new_problem_again", "cache_reload_and_select")},
    }
    summary["warm_minus_torch_s"] = summary["warm_first_call_s"] - summary["torch_first_call_s"]
    report["summary"] = summary
    print(json.dumps(summary, indent=1))
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
