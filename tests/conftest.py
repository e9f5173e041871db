"""The shared fixtures.

Every test gets a tuning cache of its own: the suite tunes test-only kernels (``fake.python_matmul`` and friends) and
records timings of a busy machine; none of that may reach the user's cache, and no test may read what an earlier test
or an earlier run recorded. The others are asked for by name: ``registered``, ``untuned``, ``spy`` and ``clock``.
"""

from __future__ import annotations

import time

import pytest
import torch

import kabi
from kabi._base.decision_cache import invalidate_all


def pytest_addoption(parser):
    parser.addoption("--share", metavar="I/N", default=None,
                     help="run the I-th of N shares of the selected tests: every N-th, from the I-th on, in "
                          "collection order (for a suite longer than one GPU machine call)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep only the --share asked for, among the tests the markers selected (this hook runs after theirs), so each
    share gets some of every file's slow tests; a file that fails to collect still fails every share."""
    share = config.getoption("--share")
    if share is None:
        return
    index, _, count = share.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise pytest.UsageError(f"--share: expected I/N with 1 <= I <= N, got {share!r}")
    first, step = int(index) - 1, int(count)
    config.hook.pytest_deselected(items=[item for position, item in enumerate(items) if position % step != first])
    items[:] = items[first::step]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """The test's own, empty tuning cache directory, used by this process and inherited by its children.

    ``XDG_CACHE_HOME`` moves too, so a child started with ``KABI_CACHE_DIR`` removed from its environment still
    falls back to a temporary place rather than the user's ``~/.cache/kabi``.
    """
    directory = tmp_path_factory.mktemp("kabi-cache")
    monkeypatch.setenv("KABI_CACHE_DIR", str(directory))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    kabi.cache.set_directory(directory)
    yield directory
    kabi.cache.set_directory(None)


@pytest.fixture
def registered():
    """``register(fn, name, **declaration)``: a float32 matmul test kernel, unregistered when the test ends."""
    names = []

    def register(fn, name, **declaration):
        kabi.register_kernel("matmul", fn, name=name, dtypes=["float32"], **declaration)
        names.append(name)

    yield register
    for name in names:
        kabi.unregister_kernel("matmul", name)


@pytest.fixture
def untuned(monkeypatch):
    """No tuning hook and no decision made before the test, so picks are the heuristic's and call counts are the
    caller's own, whatever other tests decided."""
    monkeypatch.setattr(kabi.ops._front, "_on_selection_miss", None)
    invalidate_all()
    yield
    invalidate_all()


class KernelSpy:
    """``torch.matmul`` as a kabi kernel; ``calls`` lists the input shapes of every call, ``pointers`` the data
    pointers of its inputs and of the tensor it returned."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], ...]] = []
        self.pointers: list[tuple[int, int, int]] = []

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append((tuple(a.shape), tuple(b.shape)))
        result = torch.matmul(a, b, out=out)
        self.pointers.append((a.data_ptr(), b.data_ptr(), result.data_ptr()))
        return result


@pytest.fixture
def spy(untuned):
    """A matmul kernel that counts its calls, registered for CPU and CUDA (backend "python") and forced for matmul
    while the test runs, so a test can tell that a call (compiled, backward, array) really ran through kabi's
    dispatch."""
    kernel = KernelSpy()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = []
    for device in devices:
        name = f"test.spy.matmul.{device}"
        kabi.register_kernel("matmul", kernel, name=name, device=device, fingerprint="spy")
        names.append(name)
    try:
        with kabi.use(matmul="python"):
            yield kernel
    finally:
        for name in names:
            kabi.unregister_kernel("matmul", name)


class FakeClock:
    """Monotonic wall and process-CPU clocks in nanoseconds that advance only when a test says so, and counts of the
    calls of the kernels made by ``kernel``."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.cpu_ns = 0
        self.calls = 0

    def __call__(self) -> int:
        return self.now_ns

    def process_time_ns(self) -> int:
        return self.cpu_ns

    def advance(self, duration_ns: int, cpu_share: float = 1.0) -> None:
        """``duration_ns`` pass, of which the process computes ``cpu_share`` (less than 1: another process had the
        core the rest of the time)."""
        self.now_ns += duration_ns
        self.cpu_ns += round(duration_ns * cpu_share)

    def kernel(self, duration_us, log=None, cpu_share=1.0):
        """A correct matmul whose call number ``n`` (counted over every candidate) takes ``duration_us(n)``."""

        def run(a, b, out=None):
            index = self.calls
            self.calls += 1
            self.advance(round(duration_us(index) * 1000), cpu_share)
            if log is not None:
                log.append(index)
            return torch.matmul(a, b)

        return run


@pytest.fixture
def clock(monkeypatch):
    """The fake clock, read by kabi.bench (and everything else that reads ``time.perf_counter_ns`` and
    ``time.process_time_ns``) while the test runs."""
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter_ns", fake)
    monkeypatch.setattr(time, "process_time_ns", fake.process_time_ns)
    return fake
