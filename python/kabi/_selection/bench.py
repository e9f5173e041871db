"""`kabi.bench`: the one timing utility shared by the tuner and benchmarks/.

One function measures a zero-argument callable and returns a frozen :class:`BenchResult` in microseconds per call.
How it measures depends on where the work runs:

- **CPU**: ``time.perf_counter_ns`` around batches of calls, each batch long enough that the clock's resolution and
  the loop's cost vanish; the median over batches.
- **CUDA, one event pair per call** (default): CUDA events bracket each call, the L2 cache is flushed before each
  repetition by reading a buffer twice its size (outside the events, so the flush is never timed), and the median
  is taken. This measures the kernel as a cold-cache first touch, which is how large-layer GEMMs run in a model.
  The flush reads rather than writes: a written buffer leaves the L2 full of dirty lines, and the timed call paid
  their write-back as its reads evicted them (7-8 us a call on an H200, the same for every kernel, so it pulled
  every ratio of short calls toward 1: benchmarks/results/debug-eager-flush-nvidia-h200.txt). A call in a model
  finds the L2 holding what earlier kernels read, mostly clean.
- **CUDA, back-to-back** (``back_to_back=True``): one event pair around N consecutive calls, divided by N. Host
  overhead counts whenever it exceeds the device time, which is the honest number for tiny, launch-bound problems.
- **CUDA graph** (``cuda_graph=True``): N calls captured once into a graph, the replays timed; what a decode step
  sees inside a captured model.

Example::

    >>> import torch, kabi
    >>> a, b = torch.randn(64, 64), torch.randn(64, 64)
    >>> result = kabi.bench(lambda: a @ b, repeat=5, min_time_s=0.001)
    >>> result.mode, result.count
    ('cpu', 5)
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["BenchResult", "CapturedCalls", "bench", "capture_calls", "run_unmeasured"]

# A CPU batch shorter than this is dominated by perf_counter's resolution and call cost (~0.05 us here).
_MIN_CPU_BATCH_NS = 20_000
# Devices whose L2 size torch cannot report get a flush buffer this large (bigger than any current GPU's L2).
_FALLBACK_FLUSH_BYTES = 256 * 1024 * 1024
_flush_buffers: dict[int, torch.Tensor] = {}


@dataclass(frozen=True)
class BenchResult:
    """Per-call times of one measurement, in microseconds.

    ``count`` is the number of samples the statistics are over; each sample times ``calls_per_sample`` calls and
    is divided by it. ``mode`` is ``"cpu"``, ``"cuda-events"``, ``"cuda-back-to-back"`` or ``"cuda-graph"``.
    """

    median_us: float
    min_us: float
    max_us: float
    count: int
    mode: str
    calls_per_sample: int = 1
    cpu_share: float | None = None
    """CPU only: the process's CPU time (all threads) over the wall time of the timed samples. Well under 1 for
    work that computes on the CPU means the process was starved (a busy machine) while it was timed."""

    def __str__(self) -> str:
        return (
            f"{self.median_us:.2f} us median (min {self.min_us:.2f}, max {self.max_us:.2f}; "
            f"{self.count} samples x {self.calls_per_sample} calls, {self.mode})"
        )


def bench(
    fn: Callable[[], Any],
    *,
    warmup: int = 3,
    repeat: int = 21,
    device: torch.device | str | None = None,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    back_to_back: bool = False,
    min_time_s: float = 0.05,
) -> BenchResult:
    """Time ``fn()`` and return its per-call :class:`BenchResult`.

    Args:
        fn: the work, called with no arguments. Its return value is only used to find the device.
        warmup: calls before timing (compilation, caches, allocator); at least 1.
        repeat: the least number of samples the median is taken over; at least 1.
        device: where ``fn`` runs. ``None`` takes the device of the first tensor ``fn`` returns during warm-up,
            else the CPU.
        flush_l2: CUDA: flush the L2 cache before each sample (not timed). Ignored on the CPU and within a
            back-to-back or graph sample, where the calls after the first find warm caches by design. The flush
            also keeps the device busy while the host launches the next call; without it, per-call events time
            the launch latency too whenever the device runs dry (use back_to_back to count host overhead on
            purpose, cuda_graph to exclude it).
        cuda_graph: CUDA: capture the calls of one sample into a graph and time its replays.
        back_to_back: CUDA: time several consecutive calls with one event pair, so host overhead counts.
        min_time_s: the samples together last at least this long: the CPU, back-to-back and graph modes put more
            calls into each sample, the per-call event mode takes more samples.

    Raises:
        ValueError: a bad argument, named with what was expected.
        Whatever ``fn`` raises, unchanged.
    """
    if not callable(fn):
        raise TypeError(f"bench: fn must be a callable taking no arguments, got {type(fn).__name__}")
    _check_count("warmup", warmup, minimum=1)
    _check_count("repeat", repeat, minimum=1)
    if isinstance(min_time_s, bool) or not isinstance(min_time_s, (int, float)) or not min_time_s >= 0:
        raise ValueError(f"bench: min_time_s must be a number of seconds >= 0, got {min_time_s!r}")
    if cuda_graph and back_to_back:
        raise ValueError("bench: choose one of cuda_graph=True and back_to_back=True, not both")

    warmup_start = time.perf_counter_ns()
    returned = None
    for _ in range(warmup):
        returned = fn()
    resolved = _resolve_device(device, returned)
    if resolved.type == "cpu":
        if cuda_graph or back_to_back:
            raise ValueError("bench: cuda_graph and back_to_back need a CUDA device; fn runs on the CPU")
        estimate_ns = (time.perf_counter_ns() - warmup_start) / warmup
        return _bench_cpu(fn, repeat, min_time_s, estimate_ns)
    if resolved.type != "cuda":
        raise ValueError(f"bench: device must be 'cpu' or a CUDA device, got {resolved}")
    with torch.cuda.device(resolved):
        torch.cuda.synchronize()
        stream = torch.cuda.current_stream(resolved)
        estimate_ms = _estimate_cuda_ms(fn, stream)
        if cuda_graph:
            return _bench_cuda_graph(fn, repeat, min_time_s, estimate_ms, flush_l2, resolved)
        if back_to_back:
            return _bench_cuda_back_to_back(fn, repeat, min_time_s, estimate_ms, flush_l2, resolved, stream)
        return _bench_cuda_events(fn, repeat, min_time_s, estimate_ms, flush_l2, resolved, stream)


def run_unmeasured(fn: Callable[[], Any], device: torch.device, seconds: float) -> None:
    """Call ``fn`` for ``seconds``, untimed, on a GPU (nothing on a CPU, or when ``seconds`` is not positive).

    A power-limited GPU's clock follows the load of its last tens of milliseconds, so a measurement taken right
    after other work runs partly at the clock that work left. Running the subject first makes its measurement start
    at the clock its own load holds, as in a model that calls it over and over. Errors propagate."""
    if device.type != "cuda" or not seconds > 0:
        return
    stream = torch.cuda.current_stream(device)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        fn()
        # The host runs ahead of the device: wait for it, so that the time spent is the device's.
        stream.synchronize()


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"bench: {name} must be an integer >= {minimum}, got {value!r}")


def _resolve_device(device: torch.device | str | None, returned: Any) -> torch.device:
    if device is not None:
        try:
            resolved = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"bench: device must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from error
        if resolved.type == "cuda" and resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
        return resolved
    tensor = _first_tensor(returned)
    return tensor.device if tensor is not None else torch.device("cpu")


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _summarize(per_call_us: list[float], mode: str, calls_per_sample: int,
               cpu_share: float | None = None) -> BenchResult:
    return BenchResult(
        median_us=statistics.median(per_call_us),
        min_us=min(per_call_us),
        max_us=max(per_call_us),
        count=len(per_call_us),
        mode=mode,
        calls_per_sample=calls_per_sample,
        cpu_share=cpu_share,
    )


def _bench_cpu(fn: Callable[[], Any], repeat: int, min_time_s: float, estimate_ns: float) -> BenchResult:
    batch_ns = max(_MIN_CPU_BATCH_NS, min_time_s * 1e9 / repeat)
    calls = max(1, math.ceil(batch_ns / max(estimate_ns, 1.0)))
    clock, cpu_clock = time.perf_counter_ns, time.process_time_ns
    per_call_us = []
    wall_start, cpu_start = clock(), cpu_clock()
    for _ in range(repeat):
        start = clock()
        for _ in range(calls):
            fn()
        per_call_us.append((clock() - start) / calls / 1e3)
    wall_ns = clock() - wall_start
    cpu_share = (cpu_clock() - cpu_start) / wall_ns if wall_ns > 0 else None
    return _summarize(per_call_us, "cpu", calls, cpu_share)


def _estimate_cuda_ms(fn: Callable[[], Any], stream: Any) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return max(start.elapsed_time(end), 1e-4)


def _flush_buffer(device: torch.device) -> torch.Tensor:
    """The device's flush buffer: twice its L2 in 8-byte words, zeroed once (the flush only reads it)."""
    buffer = _flush_buffers.get(device.index)
    if buffer is None:
        l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        size = 2 * l2_bytes if l2_bytes > 0 else _FALLBACK_FLUSH_BYTES
        buffer = torch.zeros(math.ceil(size / 8), dtype=torch.int64, device=device)
        _flush_buffers[device.index] = buffer
    return buffer


def _flush_l2(buffer: torch.Tensor) -> None:
    """Evicts the L2 by reading ``buffer`` (a sum whose result nobody reads): the lines it leaves are clean."""
    buffer.sum()


def _calls_per_sample(repeat: int, min_time_s: float, estimate_ms: float) -> int:
    return max(1, math.ceil(min_time_s * 1e3 / repeat / estimate_ms))


def _bench_cuda_events(fn, repeat, min_time_s, estimate_ms, flush_l2, device, stream) -> BenchResult:
    samples = max(repeat, math.ceil(min_time_s * 1e3 / estimate_ms))
    per_call_us = [ms * 1e3 for ms in _event_timed_samples(fn, samples, flush_l2, device, stream)]
    return _summarize(per_call_us, "cuda-events", 1)


def _bench_cuda_back_to_back(fn, repeat, min_time_s, estimate_ms, flush_l2, device, stream) -> BenchResult:
    calls = _calls_per_sample(repeat, min_time_s, estimate_ms)

    def back_to_back() -> None:
        for _ in range(calls):
            fn()

    per_call_us = [ms * 1e3 / calls for ms in _event_timed_samples(back_to_back, repeat, flush_l2, device, stream)]
    return _summarize(per_call_us, "cuda-back-to-back", calls)


def _event_timed_samples(run, repeat, flush_l2, device, stream) -> list[float]:
    """Milliseconds of ``repeat`` runs on ``stream`` (the device's current one), each between two CUDA events, with
    the L2 flush (when asked) before each sample and outside the timed region.

    The stream is looked up once by the caller: an event recorded without one looks up the current stream itself,
    which cost more host time than the rest of a short sample (9,798 lookups, 0.36 s of a cold first call's 1.6 s
    under cProfile on an H200), and a host that falls behind the device times its own overhead."""
    flush = _flush_buffer(device) if flush_l2 else None
    pairs = []
    for _ in range(repeat):
        if flush is not None:
            _flush_l2(flush)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        run()
        end.record(stream)
        pairs.append((start, end))
    # The last event ends the stream's work of every sample.
    pairs[-1][1].synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def _bench_cuda_graph(fn, repeat, min_time_s, estimate_ms, flush_l2, device) -> BenchResult:
    return _capture(fn, _calls_per_sample(repeat, min_time_s, estimate_ms), device).time(repeat, flush_l2)


@dataclass(frozen=True)
class CapturedCalls:
    """``calls`` calls of a function captured once into a CUDA graph on ``device``. :meth:`time` times replays of
    it, so a caller that samples the same work again and again (the tuner's rounds) captures it once."""

    graph: Any
    calls: int
    device: torch.device

    def time(self, repeat: int, flush_l2: bool = True) -> BenchResult:
        """Per-call times of ``repeat`` replays, each between two CUDA events, the L2 flushed before each."""
        _check_count("repeat", repeat, minimum=1)
        with torch.cuda.device(self.device):
            samples = _event_timed_samples(self.graph.replay, repeat, flush_l2, self.device,
                                           torch.cuda.current_stream(self.device))
        return _summarize([ms * 1e3 / self.calls for ms in samples], "cuda-graph", self.calls)


def capture_calls(fn: Callable[[], Any], device: torch.device | str, *, repeat: int = 21,
                  min_time_s: float = 0.05) -> CapturedCalls:
    """Capture as many calls of ``fn`` into one CUDA graph as :func:`bench` with ``cuda_graph=True`` would for
    ``repeat`` samples lasting ``min_time_s`` together (``fn`` must have run on ``device`` before: it is not warmed
    up here beyond the one side-stream call a capture needs)."""
    _check_count("repeat", repeat, minimum=1)
    resolved = _resolve_device(device, None)
    if resolved.type != "cuda":
        raise ValueError(f"capture_calls: a CUDA graph needs a CUDA device, got {resolved}")
    with torch.cuda.device(resolved):
        torch.cuda.synchronize()
        estimate_ms = _estimate_cuda_ms(fn, torch.cuda.current_stream(resolved))
        return _capture(fn, _calls_per_sample(repeat, min_time_s, estimate_ms), resolved)


def _capture(fn: Callable[[], Any], calls: int, device: torch.device) -> CapturedCalls:
    # Capture needs the work (and its allocations) warmed up on a side stream first, as torch.cuda.graphs asks.
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    return CapturedCalls(graph, calls, device)
