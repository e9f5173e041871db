"""Tuning by execution mode (issue 14): records measured replayed in a CUDA graph live beside eager ones, selection
for graph replay prefers them, ``kabi.tuning(mode="graph")`` selects the calls in it for graph replay, the tuner
times in a graph where it should, and the front runs the graph pick under capture. CUDA graphs cannot run here:
the graph timer and the capture check are stubbed; tests/python/test_cuda_graphs.py captures for real on a GPU."""

import math
import zlib

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.decision_cache import invalidate_all
from kabi._base.tensors import descriptor
from kabi._selection import tuner
from kabi._selection.measure import CandidateMeasurement
from kabi._selection.tuning_policy import TuningSettings, tuning
from kabi.ops import _front, _scopes
from kabi.ops._front import front_of

GRAPH = _core.TUNING_RECORD_GRAPH_MODE
GATE_ONLY = _core.TUNING_RECORD_GATE_ONLY
OPENBLAS, TORCH = "cpu.openblas.gemm", "torch.matmul.cpu"


def _inputs(m=8, n=6, k=4):
    return torch.randn(m, k), torch.randn(k, n)


def _store(records, inputs=None):
    a, b = inputs if inputs is not None else _inputs()
    _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], records)


def _select(execution_mode, inputs=None):
    a, b = inputs if inputs is not None else _inputs()
    return _core.select("matmul", [descriptor(a), descriptor(b)], allow_unverified=True,
                        execution_mode=execution_mode)


def _records():
    return {(record.kernel, record.execution_mode): record for record in kabi.cache.show("matmul")}


# Eager: OpenBLAS wins; replayed in a graph: torch wins.
BOTH_MODES = [(OPENBLAS, 10.0, "", 0, 0.0), (TORCH, 20.0, "", 0, 0.0),
              (OPENBLAS, 9.0, "", GRAPH, 0.0), (TORCH, 5.0, "", GRAPH, 0.0)]


def test_records_of_both_modes_coexist_and_survive_reload_export_and_import(cache_dir, tmp_path):
    _store(BOTH_MODES)
    expected = {(OPENBLAS, "eager"): 10.0, (TORCH, "eager"): 20.0, (OPENBLAS, "graph"): 9.0, (TORCH, "graph"): 5.0}
    assert {key: record.time_us for key, record in _records().items()} == expected
    kabi.cache.reload()
    assert {key: record.time_us for key, record in _records().items()} == expected
    exported = tmp_path / "export.log"
    assert kabi.cache.export(exported) == 4
    kabi.cache.clear()
    assert kabi.cache.show("matmul") == []
    kabi.cache.import_(exported)
    assert {key: record.time_us for key, record in _records().items()} == expected
    assert all(line.startswith("v4\t") for line in (cache_dir / "tuning-v4.log").read_text().splitlines())


def test_a_new_record_supersedes_only_the_record_of_its_own_mode(cache_dir):
    _store(BOTH_MODES)
    _store([(TORCH, 4.0, "", GRAPH, 0.0)])
    records = _records()
    assert (records[(TORCH, "graph")].time_us, records[(TORCH, "eager")].time_us) == (4.0, 20.0)
    kabi.cache.reload()
    assert _records()[(TORCH, "graph")].time_us == 4.0


def test_the_v2_log_of_an_older_kabi_is_read_and_left_as_it_was(cache_dir):
    a, b = _inputs()
    _store([(TORCH, 1.0, "", 0, 0.0)], (a, b))
    [written] = kabi.cache.show("matmul")
    kabi.cache.clear()
    body = "\t".join(["v2", written.device, "matmul", written.problem, TORCH, written.fingerprint, "7.5", "", "0",
                      "0", "1700000000"])
    legacy = cache_dir / "tuning-v2.log"
    legacy.write_text(f"{body}\t{zlib.crc32(body.encode()):08x}\n")
    kabi.cache.reload()
    [record] = kabi.cache.show("matmul")
    assert (record.kernel, record.time_us, record.execution_mode) == (TORCH, 7.5, "eager")
    _store([(TORCH, 3.0, "", GRAPH, 0.0)], (a, b))
    assert f"{body}\t" in legacy.read_text(), "never written"


def test_a_gate_verdict_is_never_a_graph_mode_record(cache_dir):
    with pytest.raises(kabi.InvalidArgumentError, match="gate-only verdict in graph mode"):
        _store([(TORCH, 0.0, "", GATE_ONLY | GRAPH, 0.0)])


def test_graph_selection_picks_the_graph_winner_and_eager_selection_ignores_graph_records(cache_dir):
    _store(BOTH_MODES)
    eager, graph = _select("eager"), _select("graph")
    assert eager["kernel"]["name"] == OPENBLAS and eager["reason"].startswith("tuned: fastest of 2")
    assert graph["kernel"]["name"] == TORCH and graph["reason"].startswith("tuned for CUDA-graph replay: fastest of 2")
    times = {candidate["name"]: (candidate["tuned_time_us"], candidate["tuned_execution_mode"])
             for candidate in graph["candidates"]}
    assert times == {OPENBLAS: (9.0, "graph"), TORCH: (5.0, "graph")}
    assert {candidate["tuned_execution_mode"] for candidate in eager["candidates"]} == {"eager"}


def test_graph_selection_falls_back_to_eager_times_unless_every_kernel_has_a_graph_time(cache_dir):
    _store(BOTH_MODES[:3])  # torch has no graph-mode record: graph and eager times are never compared
    graph = _select("graph")
    assert graph["kernel"]["name"] == OPENBLAS
    assert "eager times: not every eligible kernel has a graph-mode measurement" in graph["reason"]
    assert {candidate["tuned_execution_mode"] for candidate in graph["candidates"]} == {"eager"}


def test_a_kernel_that_failed_in_a_graph_is_never_a_graph_pick_and_stays_eligible_eagerly(cache_dir):
    _store([(OPENBLAS, 10.0, "", 0, 0.0), (TORCH, 20.0, "", 0, 0.0),
            (OPENBLAS, math.inf, "raised RuntimeError while being timed: capture failed", GRAPH, 0.0),
            (TORCH, 5.0, "", GRAPH, 0.0)])
    graph = _select("graph")
    assert graph["kernel"]["name"] == TORCH
    [openblas] = [candidate for candidate in graph["candidates"] if candidate["name"] == OPENBLAS]
    assert not openblas["eligible"] and openblas["gate"] == "passed, timed"
    assert openblas["reason"].startswith("could not run inside a CUDA graph on this problem: raised RuntimeError")
    assert _select("eager")["kernel"]["name"] == OPENBLAS


def test_an_unknown_execution_mode_is_refused():
    with pytest.raises(kabi.InvalidArgumentError, match='execution_mode must be "eager" or "graph"'):
        _select("replay")


def test_the_graph_scope_sets_the_execution_mode_and_kabi_use_keeps_it():
    assert _scopes.execution_mode() == "eager"
    with tuning(mode="graph") as settings:
        assert settings.mode == "graph" and _scopes.execution_mode() == "graph"
        with kabi.use(matmul="torch"):
            assert _scopes.execution_mode() == "graph" and _scopes.forced_choice("matmul") == "torch"
        with tuning("off"):
            assert _scopes.execution_mode() == "eager"
        with tuning(repeat=3):
            assert _scopes.execution_mode() == "graph"
    assert _scopes.execution_mode() == "eager" and _scopes.active_scope() is None


def test_explain_shows_the_mode_a_tuned_time_came_from(cache_dir):
    _store(BOTH_MODES)
    a, b = _inputs()
    assert "CUDA-graph" not in str(kabi.explain(kabi.ops.matmul, a, b))
    with tuning(mode="graph"):
        explanation = kabi.explain(kabi.ops.matmul, a, b)
    text = str(explanation)
    assert explanation.execution_mode == "graph" and explanation.pick == TORCH
    assert "selected for CUDA-graph replay" in text and "5.00 us (graph)" in text and "9.00 us (graph)" in text


class FakeGraphTimer:
    """Stands for the CUDA-graph timer (no graph can be captured here): fixed times, and the kernels it timed."""

    def __init__(self, times, settings, calls):
        self.times, self.settings, self.calls = times, settings, calls

    def screen_and_measure(self, names):
        self.calls.append(list(names))
        return [CandidateMeasurement(name, self.times[name], rounds_us=(self.times[name],)) for name in names]


def _fake_graph_timer(times):
    calls = []

    def cuda_graph_timer(candidates, make_inputs, settings, device, **gate):
        return FakeGraphTimer(times, settings, calls)

    return cuda_graph_timer, calls


def test_the_tuner_under_a_graph_scope_stores_eager_and_graph_records(cache_dir, monkeypatch):
    timer, calls = _fake_graph_timer({OPENBLAS: 50.0, TORCH: 1.0})
    monkeypatch.setattr(tuner, "_cuda_graph_timer", timer)
    invalidate_all()
    a, b = _inputs(16, 16, 16)
    with tuning(mode="graph", warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
        kabi.ops.matmul(a, b)
        report = tuner.last_report("matmul", "cpu", _select("eager", (a, b))["problem"]["key"])
    assert calls == [[OPENBLAS, TORCH]]
    records = _records()
    assert {mode for _, mode in records} == {"eager", "graph"}
    assert (records[(OPENBLAS, "graph")].time_us, records[(TORCH, "graph")].time_us) == (50.0, 1.0)
    assert math.isfinite(records[(OPENBLAS, "eager")].time_us) and records[(OPENBLAS, "eager")].time_us != 50.0
    assert report.graph_pick == TORCH and "replayed in a CUDA graph: pick torch.matmul.cpu" in str(report)
    assert _select("graph", (a, b))["kernel"]["name"] == TORCH


def test_the_tuner_times_a_host_bound_problem_in_a_graph_without_being_asked(cache_dir, monkeypatch):
    timer, calls = _fake_graph_timer({OPENBLAS: 2.0, TORCH: 1.0})
    monkeypatch.setattr(tuner, "_cuda_graph_timer", timer)
    monkeypatch.setattr(tuner, "HOST_BOUND_US", math.inf)
    invalidate_all()
    with tuning(warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
        kabi.ops.matmul(*_inputs(12, 12, 12))
    assert calls == [[OPENBLAS, TORCH]]
    monkeypatch.setattr(tuner, "HOST_BOUND_US", 0.0)
    with tuning(warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
        kabi.ops.matmul(*_inputs(13, 13, 13))
    assert len(calls) == 1, "a problem slower than the bound is timed eagerly only"


def test_kabi_tune_graph_mode_gates_eagerly_and_times_only_in_the_graph(cache_dir, monkeypatch):
    timer, calls = _fake_graph_timer({OPENBLAS: 3.0, TORCH: 2.0})
    monkeypatch.setattr(tuner, "_cuda_graph_timer", timer)
    a, b = _inputs(10, 10, 10)
    report = kabi.tune(kabi.ops.matmul, a, b, settings=TuningSettings(warmup=1, repeat=3, min_time_s=0.0),
                       mode="graph")
    assert calls == [[OPENBLAS, TORCH]] and report.pick is None and report.graph_pick == TORCH
    records = _records()
    assert records[(OPENBLAS, "eager")].gate_only and records[(TORCH, "eager")].gate_only
    assert records[(TORCH, "graph")].time_us == 2.0
    with pytest.raises(kabi.InvalidArgumentError, match="mode must be one of eager, graph, both"):
        kabi.tune(kabi.ops.matmul, a, b, mode="replay")


def test_the_front_under_a_capture_runs_the_graph_pick_and_eagerly_the_eager_pick(cache_dir, monkeypatch):
    """Where the hit path cannot learn the current stream (a torch without DLPack's exchange API), a decision whose
    picks differ by mode runs one implementation that asks torch, per call, whether a capture is under way."""
    monkeypatch.setattr(_front, "_has_exchange_api", False)
    a, b = _inputs(8, 6, 4)
    _store(BOTH_MODES, (a, b))
    ran = []
    spy = lambda name: (lambda *args, **kwargs: ran.append(name) or torch.zeros(8, 6))
    front = front_of("matmul")
    monkeypatch.setattr(front, "implementation", lambda selection, inputs: spy(selection.kernel.name))
    invalidate_all()
    capturing = {"now": False}
    monkeypatch.setattr(_scopes, "cuda_graph_capturing", lambda device: capturing["now"])
    with tuning("off"):
        kabi.ops.matmul(a, b)  # the miss: eager
        kabi.ops.matmul(a, b)  # a hit
        capturing["now"] = True
        kabi.ops.matmul(a, b)  # a hit under capture
        capturing["now"] = False
        kabi.ops.matmul(a, b)
    assert ran == [OPENBLAS, OPENBLAS, TORCH, OPENBLAS]


@pytest.mark.skipif(not _core.dlpack_exchange_available(torch.Tensor),
                    reason="this torch has no DLPack C exchange API: the hit path cannot learn the current stream")
def test_a_decision_keeps_both_picks_and_its_hits_ask_the_core_how_they_run(cache_dir, monkeypatch):
    """The hit path keeps the eager pick and the pick for captured calls side by side, and asks the core (not torch)
    which one a call needs: a CPU call is never captured, so it runs the eager pick, natively, with no capture check
    in Python. tests/python/test_cuda_graphs.py captures for real."""
    a, b = _inputs(8, 6, 4)
    _store(BOTH_MODES, (a, b))
    invalidate_all()
    checks = []
    monkeypatch.setattr(_scopes, "cuda_graph_capturing", lambda device: checks.append(device) or False)
    with tuning("off"):
        first = kabi.ops.matmul(a, b)  # the miss asks torch
        checks_after_miss = len(checks)
        table = front_of("matmul").cache
        table.reset_counts()
        for _ in range(3):
            torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
    torch.testing.assert_close(first, a @ b)
    assert checks_after_miss > 0 and len(checks) == checks_after_miss, "hits asked the core, not torch"
    assert table.hits == 3
    scope = _scopes.active_scope()
    eager_implementation, _, eager_kernel = table.find((a, b), (), scope)
    capturing_implementation, _, capturing_kernel = table.find((a, b), (), scope, capturing=True)
    assert (eager_kernel, capturing_kernel) == (OPENBLAS, TORCH)
    assert isinstance(eager_implementation.prepared, _core.PreparedLaunch), "the eager pick launches natively"
    torch.testing.assert_close(capturing_implementation(a, b), a @ b)


def test_a_miss_met_during_a_capture_runs_the_graph_pick_and_keeps_the_eager_pick_for_eager_calls(cache_dir,
                                                                                                  monkeypatch):
    a, b = _inputs(8, 6, 4)
    _store(BOTH_MODES, (a, b))
    ran = []
    spy = lambda name: (lambda *args, **kwargs: ran.append(name) or torch.zeros(8, 6))
    monkeypatch.setattr(front_of("matmul"), "implementation", lambda selection, inputs: spy(selection.kernel.name))
    invalidate_all()
    capturing = {"now": True}
    monkeypatch.setattr(_scopes, "cuda_graph_capturing", lambda device: capturing["now"])
    kabi.ops.matmul(a, b)
    capturing["now"] = False
    kabi.ops.matmul(a, b)
    assert ran == [TORCH, OPENBLAS]


def test_calls_in_a_graph_scope_use_the_graph_pick_without_a_capture_check(cache_dir, monkeypatch):
    a, b = _inputs(8, 6, 4)
    _store(BOTH_MODES, (a, b))
    ran = []
    spy = lambda name: (lambda *args, **kwargs: ran.append(name) or torch.zeros(8, 6))
    monkeypatch.setattr(front_of("matmul"), "implementation", lambda selection, inputs: spy(selection.kernel.name))
    invalidate_all()
    checks = []
    monkeypatch.setattr(_scopes, "cuda_graph_capturing", lambda device: checks.append(device) or False)
    with tuning(mode="graph"):
        kabi.ops.matmul(a, b)
        checks_after_miss = len(checks)
        kabi.ops.matmul(a, b)
    assert ran == [TORCH, TORCH]
    assert len(checks) == checks_after_miss, "the hit asked nothing: the scope is in the decision's key"
