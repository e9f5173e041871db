"""What does an eager decode call's time, as kabi.bench measures it ("cuda-events": one event pair per call, the L2
flushed before each by zeroing a buffer twice its size), consist of? (issue 14's eager target)

In the llm-decode suite every eager time is its CUDA-graph time plus about 9 us, for cuBLAS, Triton and CUTLASS alike
and for a 7 us problem as for a 110 us one: a constant that pulls every ratio towards 1. Two causes fit: the host's
launch latency (if the host falls behind the device), or the write-back of the flush's dirty lines, which the timed
call's reads evict from L2. This times, per decode shape, torch.matmul and kabi's automatic pick (tuned first, in a
temporary cache) with the flush done five ways, interleaved over rounds:

- write: the buffer zeroed (kabi.bench today);
- write, idle: zeroed, then the stream kept busy for ~100 us (torch.cuda._sleep), so the host is surely ahead;
- write, read: zeroed, then read once, which leaves the L2 holding clean lines only;
- read: the buffer only read (a sum), so no flush line is ever dirty;
- none: no flush (the weights stay in L2 where they fit).

Equal "write" and "write, idle" put no host latency in the figure; "write, read" equal to "read" and below "write"
puts the write-back there. The last column, "host", is the host's time per call when it issues 2000 calls without
waiting (the device runs behind only by the kernels' time): what a CPU-bound eager loop pays per call.

    python scripts/debug/eager_flush_probe.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

# The suite's llm-decode shapes, after two small ones whose kernels take less time than a launch, so that their host
# column is the host's cost alone (elsewhere it is the larger of host and device time).
_SHAPES = [(1, 512, 512), (16, 512, 512), (1, 4096, 4096), (1, 6144, 4096), (16, 4096, 4096), (16, 14336, 4096),
           (64, 28672, 8192), (64, 8192, 28672)]
_IDLE_CYCLES = 200_000


def _flushes(device: torch.device) -> dict:
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    buffer = torch.empty(2 * l2_bytes, dtype=torch.int8, device=device)
    words = buffer.view(torch.int64)
    buffer.zero_()

    def write():
        buffer.zero_()

    def write_idle():
        buffer.zero_()
        torch.cuda._sleep(_IDLE_CYCLES)

    def write_read():
        buffer.zero_()
        words.sum()

    def read():
        words.sum()

    return {"write": write, "write, idle": write_idle, "write, read": write_read, "read": read, "none": None}


def _sample(call, flush, stream) -> float:
    if flush is not None:
        flush()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    call()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def _host_us(call, calls: int = 2000) -> float:
    """Host microseconds per call over ``calls`` calls issued without waiting, after a synchronized start."""
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter_ns() - start
    torch.cuda.synchronize()
    return elapsed / calls / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="samples per (implementation, flush), interleaved")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("eager_flush_probe: needs a CUDA device")
    os.environ["KABI_CACHE_DIR"] = tempfile.mkdtemp(prefix="kabi-flush-probe-")
    import kabi

    device = torch.device("cuda")
    stream = torch.cuda.current_stream(device)
    flushes = _flushes(device)
    print(f"{'shape (MxKxN)':>16} {'implementation':>44}" + "".join(f" {name:>12}" for name in flushes)
          + f" {'host':>8}   (median us of one call between events; host: us per call issued)")
    for m, k, n in _SHAPES:
        a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        b = torch.randn(k, n, dtype=torch.bfloat16, device=device)
        kabi.ops.matmul(a, b)
        pick = kabi.explain(kabi.ops.matmul, a, b).pick
        calls = {"torch.matmul": lambda: torch.matmul(a, b), f"kabi ({pick})": lambda: kabi.ops.matmul(a, b)}
        for call in calls.values():
            for _ in range(5):
                call()
        torch.cuda.synchronize()
        samples = {(name, flush): [] for name in calls for flush in flushes}
        for round_index in range(args.rounds):
            order = list(calls.items())
            if round_index % 2:
                order.reverse()
            for flush_name, flush in flushes.items():
                for name, call in order:
                    samples[name, flush_name].append(_sample(call, flush, stream))
        for name, call in calls.items():
            host_us = statistics.median(_host_us(call) for _ in range(3))
            print(f"{f'{m}x{k}x{n}':>16} {name[:44]:>44}"
                  + "".join(f" {statistics.median(samples[name, flush]):12.2f}" for flush in flushes)
                  + f" {host_us:8.2f}")


if __name__ == "__main__":
    main()
