"""Decode matmuls against the memory roof: every decode-family kernel, the CUDA plugin's decode kernel and cuBLAS on
Llama-3 and Mixtral layers.

At decode sizes (M <= 64) a layer's matmul reads its weight once and does little else, so its floor is the weight's
bytes over the HBM bandwidth. For each layer (Llama-3 8B and 70B: qkv, o, gate_up, down; a Mixtral expert's up and
down projections), each M in --m and both weight layouts (an nn.Linear weight ``w[N, K]`` used as ``a @ w.T``, read
in place; a row-major ``w[K, N]``), this script:

1. checks every decode kernel that takes the problem (``FAMILIES["decode"]``, pruned by its supports rules) and, for
   M <= 16, the CUDA plugin's ``cuda.decode.mma`` (forced with ``kabi.use`` through ``kabi.ops.matmul``) against a
   float64 reference on fresh random inputs; a kernel that raises or misses the op's tolerance is recorded with the
   reason and not timed;
2. times it and cuBLAS (``F.linear`` / ``torch.matmul``) with ``kabi.bench(cuda_graph=True)``: calls captured in a
   CUDA graph and replayed, so host time does not count, as in a served model. Consecutive calls rotate over enough
   copies of the weight to exceed the L2 cache several times, so every call reads its weight from HBM;
3. measures the copy bandwidth in the same run (a 1 GiB device-to-device copy), which sets the floor, and, per
   layer size, two probes timed like the kernels (one launch per call, graph-replayed, rotated over the L2 cache):
   a copy moving the weight's bytes in all, and the fastest of a few streaming reads of them. They show what one
   memory-bound launch of that size reaches, the per-launch costs the floor leaves out included
   (``sized_probes``); on small layers those costs, not the kernel, bound the fraction of the floor;
4. dispatches one problem per layer and layout through ``kabi.ops.matmul`` with the fastest decode kernel forced,
   to check the registered kernel is what the op runs.

It prints one line per problem and a table at the end (layer, M, layout, best Triton decode kernel and its fraction
of the floor, cuBLAS's fraction, cuBLAS time / best decode time, and the same two figures for ``cuda.decode.mma``),
and writes JSON with the command, date, versions and device. About 2-3 minutes on an H200 for bfloat16.

Usage (on a GPU):
    python benchmarks/decode.py [--output benchmarks/results/decode-nvidia-h200.json] [--dtypes bfloat16 float16]
                                [--m 1 8 16 32 64] [--layers llama3-8b.qkv ...]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import json
import math
import platform
import sys
import time
import traceback
import zlib
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

_ROOT = Path(__file__).resolve().parents[1]
_TOLERANCE = tomllib.loads((_ROOT / "registry" / "ops" / "matmul.toml").read_text())["tolerance"]

# name -> (K, N): in_features, out_features.
LAYERS = {
    "llama3-8b.qkv": (4096, 6144),
    "llama3-8b.o": (4096, 4096),
    "llama3-8b.gate_up": (4096, 28672),
    "llama3-8b.down": (14336, 4096),
    "llama3-70b.qkv": (8192, 10240),
    "llama3-70b.o": (8192, 8192),
    "llama3-70b.gate_up": (8192, 57344),
    "llama3-70b.down": (28672, 8192),
    "mixtral.expert_up": (4096, 14336),
    "mixtral.expert_down": (14336, 4096),
}
LAYOUTS = ("n_by_k", "k_by_n")
_LAYOUT_LABELS = {"n_by_k": "a@w.T w[N,K]", "k_by_n": "a@w w[K,N]"}
# Weight copies rotate until they fill this many L2 caches, so no call finds its weight in L2.
_L2_MULTIPLE = 4
_COPY_BYTES = 1 << 30
_REPEAT = 10
_MIN_TIME_S = 0.01
# The CUDA plugin's decode kernel (csrc/plugins/cuda/decode_mma.cuh) and the rows it computes.
CUDA_DECODE = "cuda.decode.mma"
_CUDA_DECODE_MAX_ROWS = 16


def _relative_errors(out: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    difference = out.double() - reference
    return ((difference.norm() / reference.norm()).item(),
            (difference.abs().max() / reference.abs().max()).item())


def _check(out: torch.Tensor, reference: torch.Tensor, dtype_name: str) -> str:
    """"" if out matches the float64 reference within the op's tolerance, else why not."""
    norm, extreme = _relative_errors(out, reference)
    tolerance = _TOLERANCE[dtype_name]
    if out.shape == reference.shape and norm <= tolerance["norm"] and extreme <= tolerance["extreme"]:
        return ""
    return f"wrong result: relative error norm {norm:.2e}, extreme {extreme:.2e}"


def _graph_time(call, weights: list) -> dict:
    """kabi.bench in CUDA-graph mode of ``call(weight)``, rotating over ``weights`` from one call to the next."""
    import kabi

    rotation = itertools.cycle(weights)
    result = kabi.bench(lambda: call(next(rotation)), cuda_graph=True, repeat=_REPEAT, min_time_s=_MIN_TIME_S)
    return {"time_us": result.median_us, "min_us": result.min_us, "max_us": result.max_us,
            "calls_per_sample": result.calls_per_sample}


def copy_bandwidth() -> dict:
    """Device-to-device copy of 1 GiB: bytes read plus bytes written per second."""
    import kabi

    source = torch.empty(_COPY_BYTES, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    result = kabi.bench(lambda: target.copy_(source), repeat=_REPEAT, min_time_s=0.05)
    del source, target
    return {"bytes": _COPY_BYTES, "time_us": result.median_us,
            "tb_per_s": 2 * _COPY_BYTES / (result.median_us * 1e-6) / 1e12}


@triton.jit
def _streaming_read_kernel(source_ptr, partial_sums_ptr, elements, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    # Each program sums STEPS consecutive blocks and writes one float: the weight's bytes read once, nothing else.
    program = tl.program_id(0)
    offsets = program.to(tl.int64) * (BLOCK * STEPS) + tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(STEPS):
        total += tl.load(source_ptr + offsets, mask=offsets < elements, other=0.0).to(tl.float32)
        offsets += BLOCK
    tl.store(partial_sums_ptr + program, tl.sum(total, axis=0))


# (BLOCK, STEPS, num_warps) of the streaming read; the fastest at each size is the probe's figure.
_STREAMING_READ_CONFIGS = ((2048, 4, 4), (4096, 4, 8), (4096, 8, 8), (8192, 4, 8))


def sized_probes(total_bytes: int, floor_bandwidth: float, l2_bytes: int) -> dict:
    """What one memory-bound launch moving ``total_bytes`` reaches, timed as the decode kernels are (one launch per
    call, replayed in a CUDA graph, rotating over buffers that fill the L2 cache several times), as a fraction of the
    floor (``total_bytes`` over the 1 GiB copy's bandwidth): a copy moving that many bytes in all (half read, half
    written), and the fastest of a few streaming reads of that many bytes (each program sums its blocks). The floor
    leaves out the costs every launch pays (its start, the ramp to full bandwidth, the tail); on small layers these
    probes show how much of the floor any single kernel can reach."""
    copies = max(1, math.ceil(_L2_MULTIPLE * l2_bytes / total_bytes))
    half = total_bytes // 2
    pairs = [(torch.empty(half, dtype=torch.uint8, device="cuda").random_(),
              torch.empty(half, dtype=torch.uint8, device="cuda")) for _ in range(copies)]
    copy = _graph_time(lambda pair: pair[1].copy_(pair[0]), pairs)
    copy["fraction_of_floor"] = 2 * half / floor_bandwidth * 1e6 / copy["time_us"]
    del pairs
    elements = total_bytes // 2
    sources = [torch.randn(elements, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    reads = []
    for block, steps, warps in _STREAMING_READ_CONFIGS:
        programs = math.ceil(elements / (block * steps))
        partial_sums = torch.empty(programs, device="cuda", dtype=torch.float32)

        def read(source, block=block, steps=steps, warps=warps, programs=programs, partial_sums=partial_sums):
            _streaming_read_kernel[(programs,)](source, partial_sums, elements, BLOCK=block, STEPS=steps,
                                               num_warps=warps)
            return partial_sums

        read(sources[0])
        torch.cuda.synchronize()
        expected = sources[0].float().sum().item()
        if not math.isclose(partial_sums.double().sum().item(), expected, rel_tol=1e-3, abs_tol=1e-2 * elements**0.5):
            raise AssertionError(f"streaming read {block}x{steps}: sum {partial_sums.sum().item()} != {expected}")
        timing = _graph_time(read, sources)
        reads.append({"config": f"block{block}_steps{steps}_w{warps}", **timing,
                      "fraction_of_floor": 2 * elements / floor_bandwidth * 1e6 / timing["time_us"]})
    del sources
    best_read = min(reads, key=lambda entry: entry["time_us"])
    return {"bytes": total_bytes, "buffers": copies, "copy": copy, "streaming_read": best_read,
            "streaming_reads": reads}


def _weights(k: int, n: int, layout: str, dtype: torch.dtype, l2_bytes: int, generator) -> list[torch.Tensor]:
    """Copies of one random weight in ``layout``, each as the b operand of a @ b: ``w.t()`` of an nn.Linear weight
    [N, K] (a view, never copied), or a row-major [K, N]."""
    weight_bytes = k * n * torch.empty((), dtype=dtype).element_size()
    copies = max(1, math.ceil(_L2_MULTIPLE * l2_bytes / weight_bytes))
    first = torch.randn((n, k) if layout == "n_by_k" else (k, n), device="cuda", generator=generator).to(dtype)
    stored = [first] + [first.clone() for _ in range(copies - 1)]
    return [weight.t() if layout == "n_by_k" else weight for weight in stored]


def _forced(kernel: str):
    """``kabi.ops.matmul`` with ``kernel`` forced: a native kernel through the op's own dispatch, its gate included."""
    import kabi

    def call(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with kabi.use(matmul=kernel):
            return kabi.ops.matmul(a, b)

    return call


def _cublas(layout: str):
    if layout == "n_by_k":
        # nn.Linear's own call: b.t() is the stored [N, K] weight itself.
        return lambda a, b: F.linear(a, b.t())
    return torch.matmul


def benchmark_layer(layer: str, k: int, n: int, layout: str, dtype_name: str, ms: list, floor_bandwidth: float,
                    arch: int, l2_bytes: int, probes: dict) -> list[dict]:
    from kabi.backends.triton._families import FAMILIES, MatmulProblem

    family = FAMILIES["decode"]
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{layer} {layout} {dtype_name}".encode()))
    operands = _weights(k, n, layout, dtype, l2_bytes, generator)
    activations = torch.randn(max(ms), k, device="cuda", generator=generator).to(dtype)
    reference = activations.double() @ operands[0].double()
    weight_bytes = k * n * activations.element_size()
    floor_us = weight_bytes / floor_bandwidth * 1e6
    rows = []
    for m in ms:
        a = activations[:m]
        problem = MatmulProblem(m, n, k, a.element_size(), arch, False, layout == "n_by_k")
        candidates = [("cuBLAS", _cublas(layout))]
        candidates += [(config.tag, functools.partial(family.launch, config)) for config in family.configs
                       if not family.unsupported_reason(config, problem)]
        if m <= _CUDA_DECODE_MAX_ROWS:
            candidates.append((CUDA_DECODE, _forced(CUDA_DECODE)))
        measured = []
        for name, call in candidates:
            entry = {"kernel": name}
            try:
                entry["error"] = _check(call(a, operands[0]), reference[:m], dtype_name)
                if not entry["error"]:
                    entry.update(_graph_time(functools.partial(call, a), operands))
                    entry["fraction_of_floor"] = floor_us / entry["time_us"]
            except Exception as error:  # a failing candidate is a result, not the end of the run
                entry["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:400]
            if not entry["error"]:
                del entry["error"]
            measured.append(entry)
        row = {"layer": layer, "k": k, "n": n, "m": m, "layout": layout, "dtype": dtype_name,
               "weight_bytes": weight_bytes, "weight_copies": len(operands), "floor_us": floor_us,
               "sized_probes": probes, "candidates": measured}
        _summarize(row)
        rows.append(row)
        print(_line(row), flush=True)
    _dispatch_check(rows[0], activations[: rows[0]["m"]], operands[0], reference[: rows[0]["m"]], dtype_name)
    return rows


def _summarize(row: dict) -> None:
    timed = [entry for entry in row["candidates"] if "time_us" in entry]
    cublas = next((entry for entry in timed if entry["kernel"] == "cuBLAS"), None)
    decode = [entry for entry in timed if entry["kernel"] not in ("cuBLAS", CUDA_DECODE)]
    best = min(decode, key=lambda entry: entry["time_us"], default=None)
    cuda = next((entry for entry in timed if entry["kernel"] == CUDA_DECODE), None)
    row["best_decode"] = best["kernel"] if best else None
    row["best_decode_fraction"] = best["fraction_of_floor"] if best else None
    row["cublas_fraction"] = cublas["fraction_of_floor"] if cublas else None
    row["speedup_over_cublas"] = cublas["time_us"] / best["time_us"] if best and cublas else None
    row["cuda_decode_fraction"] = cuda["fraction_of_floor"] if cuda else None
    row["cuda_decode_speedup_over_cublas"] = cublas["time_us"] / cuda["time_us"] if cuda and cublas else None
    row["failed"] = [f"{entry['kernel']}: {entry['error']}" for entry in row["candidates"] if "error" in entry]


def _dispatch_check(row: dict, a: torch.Tensor, b: torch.Tensor, reference: torch.Tensor, dtype_name: str) -> None:
    """The fastest decode kernel, forced through kabi.ops.matmul: the op must run it and get the right answer."""
    import kabi
    from kabi.backends.triton import kernel_name

    if not row["best_decode"]:
        row["dispatch_check"] = "no decode kernel ran"
        return
    name = kernel_name("decode", row["best_decode"])
    try:
        with kabi.use(matmul=name):
            problem = _check(kabi.ops.matmul(a, b), reference, dtype_name)
        row["dispatch_check"] = f"{name}: {problem or 'ok'}"
    except Exception as error:
        row["dispatch_check"] = f"{name}: {type(error).__name__}: {error}"[:400]


def _fraction(value) -> str:
    return f"{value:5.2f}" if value is not None else "  -  "


def _ratio(row: dict) -> str:
    """cuBLAS time / cuda.decode.mma time (rows of results files written before it was measured have neither)."""
    value = row.get("cuda_decode_speedup_over_cublas")
    return f"{value:5.2f}x" if value else "   -  "


def _line(row: dict) -> str:
    ratio = f"{row['speedup_over_cublas']:5.2f}x" if row["speedup_over_cublas"] else "   -  "
    failed = f"  ({len(row['failed'])} failed)" if row["failed"] else ""
    return (f"{row['layer']:<20} M={row['m']:<3} {_LAYOUT_LABELS[row['layout']]:<13} {row['dtype']:<9} "
            f"floor {row['floor_us']:8.1f} us | decode {_fraction(row['best_decode_fraction'])} "
            f"({row['best_decode'] or '-'}) | cuBLAS {_fraction(row['cublas_fraction'])} | {ratio} | "
            f"{CUDA_DECODE} {_fraction(row.get('cuda_decode_fraction'))} {_ratio(row)} | "
            f"probes: copy {_fraction(row['sized_probes']['copy']['fraction_of_floor'])}, "
            f"read {_fraction(row['sized_probes']['streaming_read']['fraction_of_floor'])}{failed}")


def _print_table(rows: list[dict]) -> None:
    print(f"\n{'layer':<20} {'M':>3} {'layout':<13} {'dtype':<9} {'best decode kernel':<30} {'floor':>6} "
          f"{'cuBLAS':>6} {'ratio':>6} {'cuda':>6} {'ratio':>6} {'copy':>6} {'read':>6}")
    for row in rows:
        ratio = f"{row['speedup_over_cublas']:6.2f}" if row["speedup_over_cublas"] else "     -"
        print(f"{row['layer']:<20} {row['m']:>3} {_LAYOUT_LABELS[row['layout']]:<13} {row['dtype']:<9} "
              f"{row['best_decode'] or '-':<30} {_fraction(row['best_decode_fraction']):>6} "
              f"{_fraction(row['cublas_fraction']):>6} {ratio} {_fraction(row.get('cuda_decode_fraction')):>6} "
              f"{_ratio(row):>6} {_fraction(row['sized_probes']['copy']['fraction_of_floor']):>6} "
              f"{_fraction(row['sized_probes']['streaming_read']['fraction_of_floor']):>6}")
    summary = decode_summary(rows)
    if summary["graded"]:
        print(f"\nM <= 16, {summary['graded']} problems: the best decode kernel at >= 0.85 of the floor on "
              f"{summary['decode_at_0.85']}, >= 1.0x cuBLAS on {summary['decode_beats_cublas']}; the better of decode "
              f"and cuBLAS at >= 0.85 on {summary['best_at_0.85']}, at >= 0.95 on {summary['large_best_at_0.95']} "
              f"of the {summary['large']} layers of 100 MB or more, within 0.95 of the better probe of the same bytes "
              f"on {summary['best_near_probe']}")
    cuda = summary["cuda_decode"]
    if cuda["measured"]:
        print(f"{CUDA_DECODE}, {cuda['measured']} problems (M <= 16): at >= 0.85 of the floor on {cuda['at_0.85']}, "
              f">= 0.90 on {cuda['at_0.90']}, median fraction {cuda['median_fraction']:.2f}; >= 1.0x cuBLAS on "
              f"{cuda['beats_cublas']}, geometric mean {cuda['geomean_speedup_over_cublas']:.2f}x cuBLAS; faster than "
              f"the best Triton decode kernel on {cuda['beats_best_decode']}")


def decode_summary(rows: list[dict]) -> dict:
    """The issue's decode targets counted over the rows of M <= 16 (for the best decode kernel, and for the better of
    it and cuBLAS, which is what a tuned pick gets), and how many reach 0.95 of the better sized probe."""
    graded = [row for row in rows if row["m"] <= 16 and row["best_decode_fraction"] is not None]
    best = [max(row["best_decode_fraction"], row["cublas_fraction"] or 0.0) for row in graded]
    probe = [max(row["sized_probes"]["copy"]["fraction_of_floor"],
                 row["sized_probes"]["streaming_read"]["fraction_of_floor"]) for row in graded]
    large = [index for index, row in enumerate(graded) if row["weight_bytes"] >= 100e6]
    return {
        "cuda_decode": cuda_decode_summary(rows),
        "graded": len(graded),
        "decode_at_0.85": sum(row["best_decode_fraction"] >= 0.85 for row in graded),
        "decode_beats_cublas": sum((row["speedup_over_cublas"] or 0.0) >= 1.0 for row in graded),
        "best_at_0.85": sum(fraction >= 0.85 for fraction in best),
        "large": len(large),
        "large_best_at_0.95": sum(best[index] >= 0.95 for index in large),
        "best_near_probe": sum(fraction >= 0.95 * bound for fraction, bound in zip(best, probe)),
        "probes_by_bytes": {row["weight_bytes"]: {"copy": row["sized_probes"]["copy"]["fraction_of_floor"],
                                                  "streaming_read":
                                                      row["sized_probes"]["streaming_read"]["fraction_of_floor"]}
                            for row in graded},
    }


def cuda_decode_summary(rows: list[dict]) -> dict:
    """How cuda.decode.mma did on the rows where it was measured: its fraction of the floor, and cuBLAS time over its
    time (> 1: faster than cuBLAS), also against the best Triton decode kernel."""
    measured = [row for row in rows if row.get("cuda_decode_fraction") is not None]
    fractions = sorted(row["cuda_decode_fraction"] for row in measured)
    speedups = [row["cuda_decode_speedup_over_cublas"] for row in measured if row["cuda_decode_speedup_over_cublas"]]
    return {
        "measured": len(measured),
        "at_0.85": sum(fraction >= 0.85 for fraction in fractions),
        "at_0.90": sum(fraction >= 0.90 for fraction in fractions),
        "median_fraction": fractions[len(fractions) // 2] if fractions else None,
        "beats_cublas": sum(speedup >= 1.0 for speedup in speedups),
        "geomean_speedup_over_cublas": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "beats_best_decode": sum(row["cuda_decode_fraction"] > (row["best_decode_fraction"] or 0.0)
                                 for row in measured),
    }


def summarize(path: Path) -> int:
    """Recompute a results file's summary from its rows (for a run whose summary failed after every row was
    written), recording when and by which command."""
    report = json.loads(path.read_text())
    _print_table(report["results"])
    report["summary"] = decode_summary(report["results"])
    report["summary_recomputed"] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote the summary into {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON path (default: benchmarks/results/decode-<device>.json)")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16"], choices=["bfloat16", "float16"])
    parser.add_argument("--m", nargs="+", type=int, default=[1, 8, 16, 32, 64])
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    parser.add_argument("--summarize", type=Path, default=None, metavar="FILE",
                        help="measure nothing: print FILE's table and store its summary, recomputed from its rows")
    arguments = parser.parse_args(argv)
    if arguments.summarize is not None:
        return summarize(arguments.summarize)
    if not torch.cuda.is_available():
        print("decode.py measures decode kernels on a CUDA GPU; none is visible (torch.cuda.is_available() is "
              "False). Run it on a GPU machine, e.g. through benchmarks/run_gpu.sh decode.", file=sys.stderr)
        return 2
    if not all(1 <= m <= 64 for m in arguments.m):
        parser.error("--m: decode sizes are 1 to 64")

    import kabi
    from kabi.backends.triton import register_triton_kernels
    from kabi.backends.triton._families import device_facts

    started = time.time()
    register_triton_kernels()
    properties = torch.cuda.get_device_properties(0)
    arch, _ = device_facts(torch.device("cuda"))
    l2_bytes = getattr(properties, "L2_cache_size", 0) or 64 * 1024 * 1024
    report = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": properties.name, "arch": arch, "multiprocessors": properties.multi_processor_count,
                   "l2_bytes": l2_bytes, "memory_bytes": properties.total_memory},
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                     "cuda": torch.version.cuda, "kabi": getattr(kabi, "__version__", "unknown")},
        "method": {"timing": "kabi.bench(cuda_graph=True)", "repeat": _REPEAT, "min_time_s": _MIN_TIME_S,
                   "weights_rotated_over_l2_multiple": _L2_MULTIPLE,
                   "floor": "weight bytes / measured copy bandwidth",
                   "sized_probes": "per layer, graph-replayed: a copy moving the weight's bytes (half read, half "
                                  "written) and the fastest of a few streaming reads of them"},
        "results": [],
    }
    try:
        report["copy_bandwidth"] = copy_bandwidth()
        bandwidth = report["copy_bandwidth"]["tb_per_s"] * 1e12
        print(f"copy bandwidth {report['copy_bandwidth']['tb_per_s']:.2f} TB/s ({properties.name}, sm_{arch})",
              flush=True)
        probes_by_bytes: dict[int, dict] = {}
        for dtype_name in arguments.dtypes:
            for layer in arguments.layers:
                k, n = LAYERS[layer]
                weight_bytes = k * n * torch.empty((), dtype=getattr(torch, dtype_name)).element_size()
                if weight_bytes not in probes_by_bytes:
                    probes_by_bytes[weight_bytes] = sized_probes(weight_bytes, bandwidth, l2_bytes)
                    torch.cuda.empty_cache()
                for layout in LAYOUTS:
                    report["results"] += benchmark_layer(layer, k, n, layout, dtype_name, arguments.m, bandwidth,
                                                         arch, l2_bytes, probes_by_bytes[weight_bytes])
                    torch.cuda.empty_cache()
        _print_table(report["results"])
        report["summary"] = decode_summary(report["results"])
    except Exception:
        report["fatal"] = traceback.format_exc()
        print(report["fatal"], file=sys.stderr)
    report["elapsed_s"] = round(time.time() - started, 1)
    output = arguments.output or (_ROOT / "benchmarks" / "results" /
                                  f"decode-{properties.name.replace(' ', '-').lower()}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {output} in {report['elapsed_s']} s")
    return 1 if "fatal" in report else 0


if __name__ == "__main__":
    sys.exit(main())
