"""kabi.bench: argument checks, device inference, and the arithmetic of its CPU mode under a fake clock."""

import dataclasses

import pytest
import torch

from kabi._selection.bench import BenchResult, bench


def test_cpu_median_min_max_follow_the_measured_call_times(clock):
    durations_ns = iter([25_000] * 2 + [1_000, 3_000, 2_000, 9_000, 4_000])

    def work():
        clock.advance(next(durations_ns))

    result = bench(work, warmup=2, repeat=5, min_time_s=0)
    assert result == BenchResult(median_us=3.0, min_us=1.0, max_us=9.0, count=5, mode="cpu", calls_per_sample=1,
                                 cpu_share=1.0)


def test_cpu_batches_grow_until_the_samples_last_min_time(clock):
    calls = []

    def work():
        calls.append(1)
        clock.advance(100)

    result = bench(work, warmup=1, repeat=4, min_time_s=0.001)
    # 1 ms over 4 samples is 250 us per sample, 2500 calls of 0.1 us each.
    assert result.calls_per_sample == 2500
    assert len(calls) == 1 + 4 * 2500
    assert result.median_us == pytest.approx(0.1)


def test_a_slow_call_is_timed_once_per_sample(clock):
    def work():
        clock.advance(50_000_000)

    result = bench(work, warmup=1, repeat=3, min_time_s=0.01)
    assert (result.calls_per_sample, result.count, result.median_us) == (1, 3, 50_000.0)


def test_result_is_frozen_and_prints_its_numbers():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    result = bench(lambda: a @ b, warmup=1, repeat=3, min_time_s=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.median_us = 0.0
    assert result.mode == "cpu" and result.count == 3
    assert 0 < result.min_us <= result.median_us <= result.max_us
    assert "median" in str(result) and "cpu" in str(result)


def test_device_is_inferred_from_the_returned_tensor_or_defaults_to_cpu():
    assert bench(lambda: (torch.ones(2), 1), warmup=1, repeat=1, min_time_s=0).mode == "cpu"
    assert bench(lambda: None, warmup=1, repeat=1, min_time_s=0, device="cpu").mode == "cpu"


def test_errors_from_fn_propagate_unchanged():
    def broken():
        raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="kernel exploded"):
        bench(broken, warmup=1, repeat=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"repeat": 0}, "repeat must be an integer >= 1"),
        ({"warmup": 0}, "warmup must be an integer >= 1"),
        ({"repeat": 2.5}, "repeat must be an integer"),
        ({"min_time_s": -1.0}, "min_time_s must be a number of seconds >= 0"),
        ({"min_time_s": float("nan")}, "min_time_s"),
        ({"cuda_graph": True, "back_to_back": True}, "choose one of"),
        ({"cuda_graph": True}, "need a CUDA device"),
        ({"back_to_back": True}, "need a CUDA device"),
        ({"device": "not-a-device"}, "device must name a torch device"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bench(lambda: torch.ones(1), **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="fn must be a callable"):
        bench(42)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize(
    ("options", "mode"),
    [({}, "cuda-events"), ({"back_to_back": True}, "cuda-back-to-back"), ({"cuda_graph": True}, "cuda-graph")],
)
def test_cuda_modes_time_device_work(options, mode):
    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    result = bench(lambda: a @ b, warmup=2, repeat=5, min_time_s=0.001, **options)
    assert result.mode == mode
    assert result.count >= 5
    assert 0 < result.min_us <= result.median_us <= result.max_us


@pytest.mark.gpu
@cuda
def test_cuda_device_is_inferred_from_the_returned_tensor():
    a = torch.randn(64, 64, device="cuda")
    result = bench(lambda: a @ a, warmup=2, repeat=10, min_time_s=0)
    assert (result.mode, result.count, result.calls_per_sample) == ("cuda-events", 10, 1)


@pytest.mark.gpu
@cuda
def test_the_l2_flush_reads_a_buffer_twice_the_l2_and_never_writes_it():
    """A written flush buffer leaves dirty lines whose write-back the timed call pays: the flush only reads."""
    from kabi._selection import bench as bench_module

    a = torch.randn(64, 64, device="cuda")
    bench(lambda: a @ a, warmup=1, repeat=5, min_time_s=0)
    buffer = bench_module._flush_buffers[torch.cuda.current_device()]
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    assert buffer.numel() * buffer.element_size() >= 2 * l2_bytes
    version = buffer._version
    bench(lambda: a @ a, warmup=1, repeat=5, min_time_s=0)
    assert buffer._version == version, "the flush wrote its buffer"


class FakeCudaTiming:
    """torch.cuda's stream and event API as bench uses it, on a CPU: counts the stream lookups and device-wide
    synchronizations, and records which stream each event was recorded on (each event then reads 1 ms)."""

    def __init__(self, monkeypatch):
        self.stream = object()
        self.lookups = 0
        self.device_synchronizations = 0
        self.recorded_on = []
        self.waited = []
        timing = self

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self, stream=None):
                timing.recorded_on.append(stream)

            def synchronize(self):
                timing.waited.append(self)

            def elapsed_time(self, end):
                return 1.0

        class DeviceScope:
            def __init__(self, device):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exception):
                return False

        def current_stream(device=None):
            timing.lookups += 1
            return timing.stream

        def synchronize(device=None):
            timing.device_synchronizations += 1

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "device", DeviceScope)
        monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
        monkeypatch.setattr(torch.cuda, "synchronize", synchronize)


def test_cuda_events_record_on_the_stream_looked_up_once_per_bench(monkeypatch):
    timing = FakeCudaTiming(monkeypatch)
    calls = []
    result = bench(lambda: calls.append(1), warmup=1, repeat=7, min_time_s=0, device="cuda:0", flush_l2=False)
    assert (result.mode, result.count, result.median_us) == ("cuda-events", 7, 1000.0)
    assert len(calls) == 1 + 1 + 7, "warm-up, the estimate, the samples"
    assert timing.lookups == 1
    assert timing.recorded_on == [timing.stream] * 2 * (1 + 7)
    # Once before timing; after the samples, waiting for the last event is enough (every sample ran on its stream).
    assert timing.device_synchronizations == 1 and len(timing.waited) == 2
