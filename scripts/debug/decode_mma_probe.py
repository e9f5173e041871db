"""Which variant of the decode MMA kernel (`cuda.decode.mma`) it should be: builds decode_mma_probe.cu with nvcc,
checks every variant against a float32 reference on awkward shapes (bfloat16 and float16, both b orders) and times
them (each checked again before and after) on bfloat16 decode layers, b row-major [K, N] and column-major (an
nn.Linear weight [N, K]), in CUDA-graph replay over enough copies of b that every call reads it from HBM; then times
torch.matmul the same way and prints one table: microseconds per call, and in brackets the fraction of the floor (b's
bytes over the copy bandwidth measured in the same run).

    python scripts/debug/decode_mma_probe.py [--layers 4096x4096 57344x8192 ...] [--rows 1 8 16]   (layers N x K)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

import torch

from _probe_common import build_probe, graph_time_us

_DEFAULT_LAYERS = ["4096x4096", "6144x4096", "4096x14336", "57344x8192"]
_CALLS_PER_GRAPH = 20


def _torch_times(n: int, k: int, rows: list[int]) -> dict[tuple[int, str], float]:
    """torch.matmul's time per (M, order), over as many copies of b as the probe rotates."""
    copies = min(20, (256 << 20) // (2 * n * k) + 1)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    rotation = (weights * (_CALLS_PER_GRAPH // copies + 1))[:_CALLS_PER_GRAPH]
    times = {}
    for order in ("col", "row"):
        # Column-major b is the weight read in place (w.t()); row-major b is a [K, N] tensor of its own.
        bs = [w.t() for w in rotation] if order == "col" else [w.view(k, n) for w in rotation]
        for m in rows:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            times[m, order] = graph_time_us([lambda b=b: torch.matmul(a, b, out=out) for b in bs], 20, 3)
    del weights
    torch.cuda.empty_cache()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", default=_DEFAULT_LAYERS, help="N x K")
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8, 16], help="M, 1 to 16")
    args = parser.parse_args()
    layers = [tuple(int(size) for size in layer.split("x")) for layer in args.layers]
    with tempfile.TemporaryDirectory() as directory:
        probe = build_probe("decode_mma_probe", directory)
        if not torch.cuda.is_available():
            print("decode_mma_probe: built the probe; timing it needs a CUDA device, and torch sees none")
            return
        rows = ",".join(str(m) for m in args.rows)
        run = subprocess.run([str(probe), *(f"{n},{k}:{rows}" for n, k in layers)], capture_output=True, text=True)
        sys.stderr.write(run.stderr)
    results: dict[tuple[int, int, int, str], dict[str, tuple[str, ...]]] = {}
    variants: list[str] = []
    bandwidth = 0.0
    checks, wrong_checks = 0, []
    for line in run.stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["bandwidth"]:
            bandwidth = float(fields[1]) * 1e9
            print(f"copy bandwidth {float(fields[1]):.0f} GB/s, {fields[2]} multiprocessors; "
                  f"variant cCwWrR: C chunks of 32 k per step, W warps, R resident blocks asked (got: after '@'), "
                  f"s: splits of K;")
            print("then t2: 32 columns per warp (else 64)")
        elif fields[:1] == ["check"]:
            checks += 1
            if fields[-1] != "ok":
                wrong_checks.append(line)
        elif fields[:1] == ["result"]:
            m, n, k, order, variant = int(fields[1]), int(fields[2]), int(fields[3]), fields[4], fields[5]
            results.setdefault((m, n, k, order), {})[variant] = tuple(fields[6:])
            if variant not in variants:
                variants.append(variant)
    if run.returncode != 0 or bandwidth == 0.0:
        print(run.stdout)
        raise SystemExit(f"decode_mma_probe failed (exit {run.returncode})")
    print(f"awkward shapes: {checks - len(wrong_checks)} of {checks} checks match the reference")
    for line in wrong_checks:
        print("  " + line)
    torch_times = {}
    for n, k in layers:
        for (m, order), us in _torch_times(n, k, args.rows).items():
            torch_times[m, n, k, order] = us
    header = f"{'M':>3} {'N':>6} {'K':>6} {'b':>3} {'floor us':>8} {'torch us':>14}"
    print(header + "".join(f" {variant + ' us (frac) s@r':>26}" for variant in variants) + "  best")
    for (m, n, k, order), by_variant in results.items():
        floor_us = 2 * n * k / bandwidth * 1e6
        torch_us = torch_times.get((m, n, k, order), float("nan"))
        line = f"{m:3d} {n:6d} {k:6d} {order:>3} {floor_us:8.1f} {torch_us:7.1f} ({floor_us / torch_us:.2f})"
        best, best_us = "", float("inf")
        for variant in variants:
            resident, splits, us, fraction, error, verdict = by_variant.get(variant, ("?",) * 5 + ("missing",))
            if verdict != "ok":
                line += f" {verdict + ' rel error ' + error:>26}"
                continue
            line += f"   {float(us):8.1f} ({float(fraction):.2f}) s{splits:>3}@{resident:<2}"
            if float(us) < best_us:
                best, best_us = variant, float(us)
        print(line + f"  {best} {torch_us / best_us:.2f}x torch")


if __name__ == "__main__":
    main()
