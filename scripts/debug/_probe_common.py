"""What the kernel probes' drivers (decode_mma_probe.py, split_k_gemv_probe.py) share: building a probe's .cu beside
them with nvcc, and timing torch calls in CUDA-graph replay the way the probes time their kernels (unaligned_small_m.py
times its Triton variants with it too)."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
_PLUGIN = _HERE.parents[1] / "csrc" / "plugins" / "cuda"


def build_probe(name: str, directory: str) -> Path:
    """Compiles scripts/debug/<name>.cu (it includes the plugin's headers, and links its split-sums kernel) into
    directory; returns the executable."""
    probe = Path(directory, name)
    subprocess.run(["nvcc", "-std=c++20", "-O3", "-arch=sm_90", "--expt-relaxed-constexpr", f"-I{_PLUGIN}",
                    str(_HERE / f"{name}.cu"), str(_PLUGIN / "split_sums.cu"), "-o", str(probe)], check=True)
    return probe


def graph_time_us(calls, replays: int, warm_replays: int) -> float:
    """Median time of one call, from a graph of len(calls) calls replayed ``replays`` times after ``warm_replays``
    untimed ones."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for call in calls[:3]:
            call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    for _ in range(warm_replays):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    return statistics.median(times)
