"""Where a warm process's first kabi call spends the time that torch's first call does not (issue 14, item 4).

benchmarks/first_call.py shows a warm first call's first selection taking ~0.11 s where every later one takes
2-4 ms, whatever the pick (cuBLASLt or torch.matmul). This probe tests one explanation: the first selection asks
every kernel's supports predicate, the CUDA plugin's cuBLASLt kernels among them, and their first question creates a
cuBLASLt handle and runs the library's first heuristic query, the library's one-time start-up.

A cold child tunes the problem into a fresh cache; then fresh warm children over that cache, each after torch's CUDA
start-up, time:

- ``lt``: cuBLASLt alone, through ctypes, from the libcublasLt torch loaded: cublasLtCreate, the first heuristic
  query for the problem, and a second one (what a query costs once the library has started);
- ``kabi``: kabi's first call, its selections timed one by one;
- ``lt_then_kabi``: ``lt``'s start-up first, then kabi's first call: what kabi's first call pays once cuBLASLt has
  started in the process;
- ``torch_then_kabi``: torch.matmul's first call, then kabi's first call: a served model's case, where torch has run
  GEMMs before kabi's first one;
- ``thread_lt_then_lt``: ``lt``'s start-up on another thread, joined, then ``lt`` again on the main thread: whether
  the start-up is the process's (the main thread's first query then costs what a second one does) or each thread's;
- ``thread_lt_then_kabi``: the same start-up on another thread, joined, then kabi's first call;
- ``thread_small_row_major_lt_then_lt``: the start-up on another thread with a 64x64x64 query of row-major operands,
  joined, then ``lt`` (the problem, b an nn.Linear weight) on the main thread: whether a query of another size and
  layout starts the library for the problem's as well.

    python scripts/debug/warm_first_call_probe.py [--problem 37x4096x4096] [--runs 3]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

# cuBLASLt's enumerations (cublasLt.h, library_types.h) for a bfloat16 GEMM with float32 accumulation.
_COMPUTE_32F = 68
_CUDA_R_32F = 0
_CUDA_R_16BF = 14
_MATMUL_DESC_TRANSA = 3
_OP_T = 1
_PREFERENCE_MAX_WORKSPACE_BYTES = 1
# cublasLtMatmulHeuristicResult_t is 96 bytes; room for more keeps a larger one from writing past the buffer.
_HEURISTIC_RESULT_BYTES = 256


def _libcublaslt() -> ctypes.CDLL:
    """The libcublasLt that torch loaded (the same file the plugin opens), found in the process's maps."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libcublasLt.so" in path:
                return ctypes.CDLL(path)
    raise RuntimeError("torch has not loaded libcublasLt")


def _start_cublaslt(m: int, n: int, k: int, weight_transposed: bool = True) -> dict[str, float]:
    """cublasLtCreate and two heuristic queries for out[m, n] = a[m, k] @ w[n, k].T (``weight_transposed``) or
    a[m, k] @ b[k, n], each timed."""
    lt = _libcublaslt()
    figures = {}
    handle = ctypes.c_void_p()
    start = time.perf_counter()
    assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
    figures["create_s"] = time.perf_counter() - start
    desc = ctypes.c_void_p()
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_32F, _CUDA_R_32F) == 0
    if weight_transposed:
        transposed = ctypes.c_int32(_OP_T)
        lt.cublasLtMatmulDescSetAttribute(desc, _MATMUL_DESC_TRANSA, ctypes.byref(transposed), 4)
    # cuBLASLt is column-major: out[m, n] row-major is D = op(A) B with A = w, seen as k x n and transposed (or b,
    # seen as n x k), B = a seen as k x m, and D n x m.
    layouts = []
    weight_layout = (k, n, k) if weight_transposed else (n, k, n)
    for rows, columns, leading in (weight_layout, (k, m, k), (n, m, n)):
        layout = ctypes.c_void_p()
        assert lt.cublasLtMatrixLayoutCreate(ctypes.byref(layout), _CUDA_R_16BF, ctypes.c_uint64(rows),
                                             ctypes.c_uint64(columns), ctypes.c_int64(leading)) == 0
        layouts.append(layout)
    preference = ctypes.c_void_p()
    assert lt.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)) == 0
    workspace = ctypes.c_uint64(32 << 20)
    lt.cublasLtMatmulPreferenceSetAttribute(preference, _PREFERENCE_MAX_WORKSPACE_BYTES, ctypes.byref(workspace), 8)
    results = ctypes.create_string_buffer(_HEURISTIC_RESULT_BYTES * 8)
    count = ctypes.c_int()
    for name in ("first_heuristic_s", "second_heuristic_s"):
        start = time.perf_counter()
        status = lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                                   preference, 8, results, ctypes.byref(count))
        figures[name] = time.perf_counter() - start
        assert status == 0, f"cublasLtMatmulAlgoGetHeuristic: status {status}"
    figures["algorithms"] = count.value
    return figures


def _child(mode: str, m: int, n: int, k: int) -> dict[str, Any]:
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    figures: dict[str, Any] = {"mode": mode}
    if mode in ("thread_lt_then_lt", "thread_lt_then_kabi", "thread_small_row_major_lt_then_lt"):
        started: dict[str, Any] = {}
        query = ((64, 64, 64, False) if mode == "thread_small_row_major_lt_then_lt" else (m, n, k, True))
        thread = threading.Thread(target=lambda: started.update(_start_cublaslt(*query)))
        thread.start()
        thread.join()
        figures["cublaslt_other_thread"] = started
    if mode in ("lt", "lt_then_kabi", "thread_lt_then_lt", "thread_small_row_major_lt_then_lt"):
        figures["cublaslt"] = _start_cublaslt(m, n, k)
    if mode == "torch_then_kabi":
        start = time.perf_counter()
        torch.matmul(a, w.T)
        torch.cuda.synchronize()
        figures["torch_first_call_s"] = time.perf_counter() - start
    if mode in ("lt", "thread_lt_then_lt", "thread_small_row_major_lt_then_lt"):
        return figures
    import kabi
    from kabi.ops import _front

    selections = figures["selection_times_s"] = []
    select = _front.OpFront.select

    def timed_select(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return select(self, *args, **kwargs)
        finally:
            selections.append(time.perf_counter() - started)

    _front.OpFront.select = timed_select
    start = time.perf_counter()
    kabi.ops.matmul(a, w.T)
    torch.cuda.synchronize()
    figures["kabi_first_call_s"] = time.perf_counter() - start
    _front.OpFront.select = select
    figures["pick"] = kabi.explain(kabi.ops.matmul, a, w.T).pick
    return figures


def _run(mode: str, problem: tuple[int, int, int], environment: dict[str, str]) -> dict[str, Any]:
    completed = subprocess.run([sys.executable, __file__, "--child", mode, "--problem", "x".join(map(str, problem))],
                               env=environment, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="37x4096x4096", help="MxNxK: out[M, N] = a[M, K] @ w[N, K].T")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    m, n, k = (int(size) for size in args.problem.split("x"))
    if args.child:
        print(json.dumps(_child(args.child, m, n, k)))
        return
    with tempfile.TemporaryDirectory() as directory:
        environment = dict(os.environ, KABI_CACHE_DIR=os.path.join(directory, "kabi"),
                           TRITON_CACHE_DIR=os.path.join(directory, "triton"))
        cold = _run("kabi", (m, n, k), environment)
        print(f"cold (tunes): first call {cold['kabi_first_call_s']:.3f} s, pick {cold['pick']}")
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.runs):
            for mode in ("lt", "kabi", "lt_then_kabi", "torch_then_kabi", "thread_lt_then_lt", "thread_lt_then_kabi",
                         "thread_small_row_major_lt_then_lt"):
                runs.setdefault(mode, []).append(_run(mode, (m, n, k), environment))
    for mode, results in runs.items():
        print(f"{mode}:")
        for result in results:
            fields = []
            if "cublaslt_other_thread" in result:
                fields.append("other thread: " + " ".join(
                    f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                    for key, value in result["cublaslt_other_thread"].items()))
            if "cublaslt" in result:
                fields.append(" ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                                       for key, value in result["cublaslt"].items()))
            if "torch_first_call_s" in result:
                fields.append(f"torch first call {result['torch_first_call_s']:.4f}")
            if "kabi_first_call_s" in result:
                fields.append(f"kabi first call {result['kabi_first_call_s']:.4f} (selections "
                              + ", ".join(f"{time_s:.4f}" for time_s in result["selection_times_s"])
                              + f"; pick {result['pick']})")
            print("  " + "; ".join(fields))
        if "kabi_first_call_s" in results[0]:
            print(f"  median kabi first call {statistics.median(r['kabi_first_call_s'] for r in results):.4f} s")


if __name__ == "__main__":
    main()
