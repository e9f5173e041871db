"""kabi inside CUDA graphs and torch.compile on a GPU: capture uses the remembered or heuristic decision and never
tunes, replay equals eager; compiled graphs equal eager; tuning for graph replay records both modes and the capture
runs the graph-mode winner."""

import math

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.decision_cache import invalidate_all
from kabi._base.declarations import op_spec
from kabi._base.tensors import descriptor
from kabi._selection.correctness import check_output
from kabi._selection.tuning_policy import tuning
from kabi.ops import _scopes
from kabi.ops._front import front_of
from kabi.ops._stats import stats

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def fresh_decisions(tmp_path):
    """An empty tuning cache and no cached decisions, with first-call tuning on: any tuning would happen."""
    _core.cache_set_directory(str(tmp_path / "tuning-cache"))
    invalidate_all()
    with tuning("first-call", warmup=1, repeat=3, min_time_s=0.0):
        yield
    _core.cache_set_directory(None)
    invalidate_all()


def random_pair(m, n, k, dtype=torch.bfloat16):
    return torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)


def capture(function, *inputs):
    """Warm ``function`` on a side stream as torch recommends, then capture it; returns (graph, static output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        function(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = function(*inputs)
    return graph, output


def test_capture_uses_the_remembered_decision_and_replay_equals_eager(fresh_decisions):
    a, b = random_pair(64, 256, 128)
    eager = kabi.ops.matmul(a, b)  # tunes now, outside the capture
    tuned_runs = stats().tuning_runs
    graph, output = capture(kabi.ops.matmul, a, b)
    assert stats().tuning_runs == tuned_runs
    new_a, new_b = random_pair(64, 256, 128)
    a.copy_(new_a)
    b.copy_(new_b)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(output, kabi.ops.matmul(new_a, new_b))
    assert eager.shape == output.shape


def test_a_problem_first_seen_inside_capture_is_refused_then_served_once_called(fresh_decisions):
    """Inside capture kabi can neither tune nor run the correctness gate (both synchronize), and nothing runs before
    it has passed the gate: the call says to call the op once first. Once called, it captures and replays."""
    a, b = random_pair(48, 96, 80)
    before = stats()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(kabi.NoEligibleKernelError, match="call the op once with these shapes before capturing"):
        with torch.cuda.graph(graph):
            kabi.ops.matmul(a, b)
    assert stats().tuning_runs == before.tuning_runs
    expected = kabi.ops.matmul(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = kabi.ops.matmul(a, b)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(output, (a.float() @ b.float()).to(a.dtype), rtol=2e-2, atol=2e-2)


def test_compile_on_cuda_matches_eager(fresh_decisions):
    def block(x, w1, w2):
        return kabi.ops.matmul(torch.relu(kabi.ops.matmul(x, w1)), w2)

    x, w1 = random_pair(32, 128, 64, torch.float32)
    w2 = torch.randn(128, 64, device="cuda")
    expected = block(x, w1, w2)
    explanation = torch._dynamo.explain(block)(x, w1, w2)
    assert explanation.graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(x, w1, w2), expected)


def test_compile_with_cuda_graphs_replays_kabi(fresh_decisions):
    def block(x, w):
        return torch.relu(kabi.ops.matmul(x, w))

    x, w = random_pair(16, 256, 128, torch.float32)
    block(x, w)
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    # Replays run the graph-mode pick, which may be another kernel than the eager call's: each result is held to
    # the op's float32 tolerance against the float64 product, not to the other kernel's rounding.
    tolerance = op_spec("matmul").tolerance["float32"]
    for _ in range(3):
        x = torch.randn_like(x)
        reference = torch.relu(x.double() @ w.double())
        for result in (compiled(x, w), block(x, w)):
            assert check_output(result, reference, tolerance, torch.float32) is None


@pytest.fixture(scope="module")
def tiled_binary(tmp_path_factory):
    """A Triton tiled kernel compiled to a device binary and loaded into the core: its launches go through libkabi."""
    from kabi.backends.triton import compile_to_binary, load_binaries
    from kabi.backends.triton._families import FAMILIES, device_facts

    arch, _ = device_facts(torch.device("cuda"))
    directory = tmp_path_factory.mktemp("binaries")
    manifest = compile_to_binary("tiled", FAMILIES["tiled"].configs[-1], "bfloat16", arch, directory)
    load_binaries(directory)
    return manifest.name.removesuffix(".kabi-manifest")


def test_device_binary_launches_on_the_current_stream_and_inside_capture(fresh_decisions, tiled_binary):
    """The core launches native kernels on torch's current stream (asked through DLPack's exchange API): on a busy
    side stream the launch waits for the write queued before it there, and a capture records the launch (a launch on
    any other stream would fail the capture). 128 rows: the tiled kernel leaves decode shapes (64 rows or fewer) to
    the small-M kernel."""
    a, b = random_pair(128, 256, 128)
    with kabi.use(matmul=tiled_binary):
        assert kabi.explain(kabi.ops.matmul, a, b).pick == tiled_binary
        kabi.ops.matmul(a, b)
        new_a, _ = random_pair(128, 256, 128)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)
            a.copy_(new_a)  # runs on the side stream only after the sleep
            on_side = kabi.ops.matmul(a, b)
        side.synchronize()
        torch.testing.assert_close(on_side, (new_a.float() @ b.float()).to(a.dtype), rtol=2e-2, atol=2e-2)
        graph, output = capture(kabi.ops.matmul, a, b)
        new_a, new_b = random_pair(128, 256, 128)
        a.copy_(new_a)
        b.copy_(new_b)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(output, (new_a.float() @ new_b.float()).to(a.dtype), rtol=2e-2, atol=2e-2)


def _problem_records(key):
    return [record for record in kabi.cache.show("matmul") if record.problem == key]


def test_tuning_for_graph_replay_records_both_modes_and_the_capture_runs_the_graph_winner(fresh_decisions):
    """A warm-up call under kabi.tuning(mode="graph") times every candidate eagerly and replayed in a CUDA graph;
    the calls captured in that scope run the fastest under replay, as the cache recorded it."""
    a, b = random_pair(16, 256, 128)
    with tuning(mode="graph", warmup=1, repeat=3, min_time_s=0.0):
        expected = kabi.ops.matmul(a, b)
        explanation = kabi.explain(kabi.ops.matmul, a, b)
        graph, output = capture(kabi.ops.matmul, a, b)
        _, _, captured_kernel = front_of("matmul").cache.find((a, b), (), _scopes.active_scope())
    records = _problem_records(explanation.problem_key)
    graph_times = {record.kernel: record.time_us for record in records
                   if record.execution_mode == "graph" and math.isfinite(record.time_us)}
    eager_kernels = {record.kernel for record in records if record.execution_mode == "eager"}
    assert graph_times and set(graph_times) <= eager_kernels
    failed = {record.kernel for record in records if not math.isfinite(record.time_us)}
    eligible = {candidate.name for candidate in explanation.candidates if candidate.eligible}
    assert eligible - failed <= set(graph_times), (
        f"eligible kernels without a graph-mode time: {sorted(eligible - failed - set(graph_times))}; "
        f"{explanation.pick_reason}: {explanation.reason}")
    # A screened time (a finalist cut as a clear loser after a few rounds) never competes, even where its median
    # came out below the pick's over all rounds; the pick is the fastest of the fully measured ones.
    contenders = {record.kernel: record.time_us for record in records
                  if record.execution_mode == "graph" and math.isfinite(record.time_us) and not record.screened}
    winner = min(contenders, key=contenders.get)
    assert explanation.execution_mode == "graph" and explanation.pick == winner
    assert captured_kernel == winner
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(output, expected)


def test_a_capture_outside_the_scope_runs_the_graph_pick_where_it_differs_from_the_eager_one(fresh_decisions,
                                                                                            monkeypatch):
    """Records that make one kernel the eager winner and another the graph winner: eager calls run the first, the
    call being captured (detected with torch's capture check) the second, and the replay equals eager."""
    a, b = random_pair(16, 256, 128)
    kabi.ops.matmul(a, b)  # gates and tunes the candidates
    eligible = [candidate.name for candidate in kabi.explain(kabi.ops.matmul, a, b).candidates if candidate.eligible]
    assert len(eligible) >= 2, "needs two eligible CUDA kernels"
    eager_winner, graph_winner = eligible[:2]
    graph_flag = _core.TUNING_RECORD_GRAPH_MODE
    _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], [
        (eager_winner, 1.0, "", 0, 0.0), (graph_winner, 2.0, "", 0, 0.0),
        (eager_winner, 2.0, "", graph_flag, 0.0), (graph_winner, 1.0, "", graph_flag, 0.0),
    ] + [(name, 3.0, "", 0, 0.0) for name in eligible[2:]] + [(name, 3.0, "", graph_flag, 0.0) for name in eligible[2:]])
    front = front_of("matmul")
    implementation, ran = front.implementation, []

    def spied(selection, inputs):
        run = implementation(selection, inputs)
        return lambda *args, **kwargs: ran.append(selection.kernel.name) or run(*args, **kwargs)

    monkeypatch.setattr(front, "implementation", spied)
    invalidate_all()
    expected = kabi.ops.matmul(a, b)
    graph, output = capture(kabi.ops.matmul, a, b)
    assert ran == [eager_winner, eager_winner, graph_winner], "eager call, side-stream warm-up, capture"
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(output, expected)


def _kernels_run(function) -> set[str]:
    """The names of the GPU kernels that ``function()`` runs, as the profiler records them (graph replays
    included), without memory operations: a capture adds the memset that zeroes a split-K kernel's counters."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        function()
        torch.cuda.synchronize()
    return {event.name for event in profiled.events() if event.device_type == torch.autograd.DeviceType.CUDA
            and not event.name.startswith(("Memset", "Memcpy"))}


def test_native_picks_of_both_modes_run_from_the_hit_path(fresh_decisions, monkeypatch):
    """Where the eager pick and the graph-mode pick are two native kernels, the hit path launches them itself: calls
    run the eager pick, the call being captured the graph pick (the core answered that its stream was capturing),
    and torch's capture check, which the Python implementation would ask, never runs."""
    a, b = random_pair(16, 256, 128)
    eager_result = kabi.ops.matmul(a, b)  # gates and tunes the candidates
    native = [candidate.name for candidate in kabi.explain(kabi.ops.matmul, a, b).candidates
              if candidate.eligible and candidate.kernel.kind != "external"]
    functions = {}
    for name in native[:8]:
        with kabi.use(matmul=name):
            kabi.ops.matmul(a, b)
            functions[name] = _kernels_run(lambda: kabi.ops.matmul(a, b))
    pairs = [(x, y) for x in functions for y in functions if x != y and functions[x] != functions[y]]
    assert pairs, f"needs two native CUDA kernels that run different GPU functions: {functions}"
    eager_winner, graph_winner = pairs[0]
    graph_flag = _core.TUNING_RECORD_GRAPH_MODE
    others = [name for name in native if name not in (eager_winner, graph_winner)]
    others += [candidate.name for candidate in kabi.explain(kabi.ops.matmul, a, b).candidates
               if candidate.eligible and candidate.kernel.kind == "external"]
    _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], [
        (eager_winner, 1.0, "", 0, 0.0), (graph_winner, 2.0, "", 0, 0.0),
        (eager_winner, 2.0, "", graph_flag, 0.0), (graph_winner, 1.0, "", graph_flag, 0.0),
    ] + [(name, 3.0, "", 0, 0.0) for name in others] + [(name, 3.0, "", graph_flag, 0.0) for name in others])
    invalidate_all()
    kabi.ops.matmul(a, b)  # the miss: remembers both picks
    capture_checks = []
    capturing = _scopes.cuda_graph_capturing
    monkeypatch.setattr(_scopes, "cuda_graph_capturing",
                        lambda device: capture_checks.append(device) or capturing(device))
    table = front_of("matmul").cache
    table.reset_counts()
    assert _kernels_run(lambda: kabi.ops.matmul(a, b)) == functions[eager_winner]
    graph, output = capture(kabi.ops.matmul, a, b)
    assert table.hits == 3 and table.misses == 0, "eager call, side-stream warm-up, capture"
    assert capture_checks == []
    assert _kernels_run(graph.replay) == functions[graph_winner]
    reference = a.double() @ b.double()
    assert check_output(output, reference, op_spec("matmul").tolerance["bfloat16"], torch.bfloat16) is None
    assert check_output(eager_result, reference, op_spec("matmul").tolerance["bfloat16"], torch.bfloat16) is None
