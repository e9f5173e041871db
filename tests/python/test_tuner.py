"""The tuner: tuning inputs, the correctness gate, measuring candidates, the policy, and tuning end to end through
kabi.ops.matmul (picks, rejections, fingerprints, warm caches in new processes, concurrent and corrupt caches)."""

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch

import kabi
from kabi._base.declarations import Tolerance
from kabi._selection import cache, tuner
from kabi._selection.correctness import check_output, reference_output
from kabi.ops._inputs import input_like, inputs_like
from kabi._selection.explain import gate_notes
from kabi._selection.measure import _round_order, fastest, measure_candidates
from kabi._selection.tuning_policy import TuningSettings, current_settings, tuning, tuning_blocked_reason
from kabi.ops import _stats

FLOAT32 = Tolerance(norm=2e-5, extreme=1e-4)
# Quick and noise-blind (neither a spread nor a starved CPU share makes a candidate measured again), without a screen
# (every survivor is measured in full): these tests are about gating, ordering and the cache, not about this
# machine's load (tests/python/test_measure.py covers both bounds, tests/python/test_screening.py the screen).
QUICK = TuningSettings(warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0,
                       screen_margin=math.inf)


# --- tuning inputs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(6, 5),
        lambda: torch.randn(5, 6).t(),
        lambda: torch.randn(6, 9)[:, :5],
        lambda: torch.randn(3, 1, 4).expand(3, 7, 4),
        lambda: torch.randn(2, 6, 5, dtype=torch.float64).transpose(0, 1),
        lambda: torch.randn(8, 8, dtype=torch.bfloat16)[1:, 1:],
        lambda: torch.randint(-5, 5, (4, 4), dtype=torch.int32),
    ],
)
def test_tuning_inputs_copy_shape_dtype_strides_and_alignment_never_data(make):
    original = make()
    before = original.clone()
    fresh = input_like(original)
    assert (fresh.shape, fresh.dtype, fresh.device, fresh.stride()) == (
        original.shape,
        original.dtype,
        original.device,
        original.stride(),
    )
    assert fresh.data_ptr() % 256 == original.data_ptr() % 256
    assert fresh.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    assert not torch.equal(fresh, original)
    assert bool((fresh != 0).any())
    assert torch.equal(original, before)


def test_tuning_inputs_are_reproducible():
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    first, second = inputs_like("matmul", [a, b]), inputs_like("matmul", [a, b])
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[0][:3, :2], first[1])


def test_tuning_input_of_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        input_like([1.0, 2.0])


# --- the correctness gate ---------------------------------------------------------------------------------------


def _reference(a, b):
    return reference_output(torch.matmul, [a, b])


def test_gate_accepts_float32_products_and_rejects_wrong_ones():
    a, b = torch.randn(33, 17), torch.randn(17, 9)
    reference = _reference(a, b)
    assert check_output(a @ b, reference, FLOAT32, torch.float32) is None
    note = check_output((a @ b) * 1.01, reference, FLOAT32)
    assert note.startswith("wrong result: norm error 1.0e-02 > 2e-05")


def test_gate_catches_one_wrong_element_that_the_norm_hides():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    output = a @ b
    output[3, 5] += 0.01 * float(output.abs().max())
    note = check_output(output, _reference(a, b), Tolerance(norm=1e-3, extreme=1e-4))
    assert note.startswith("wrong result: max error") and "relative to max |ref|" in note


def test_gate_rejects_tf32_like_rounding_in_float32():
    a, b = torch.randn(128, 256), torch.randn(256, 64)
    rounded_to_tf32 = lambda x: (x.view(torch.int32) & ~0x1FFF).view(torch.float32)  # 10 mantissa bits
    output = rounded_to_tf32(a) @ rounded_to_tf32(b)
    assert check_output(output, _reference(a, b), FLOAT32) is not None


@pytest.mark.parametrize(("bad_value", "kind"), [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_gate_rejects_nonfinite_values_where_the_reference_is_finite(bad_value, kind):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    output = a @ b
    output[2, 2] = bad_value
    assert check_output(output, _reference(a, b), Tolerance(norm=1.0, extreme=1.0)) == f"{kind} in output (1 elements)"


def test_gate_accepts_nonfinite_values_the_reference_has_too():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    a[1, 1] = float("nan")
    assert check_output(a @ b, _reference(a, b), FLOAT32) is None
    assert "differ where the reference is NaN" in check_output(torch.nan_to_num(a @ b), _reference(a, b), FLOAT32)


@pytest.mark.parametrize(
    ("output", "expected_note"),
    [
        ([[1.0]], "returned list, expected a tensor"),
        (torch.ones(3, 4), "wrong shape [3, 4], expected [4, 3]"),
        (torch.ones(4, 3, dtype=torch.float64), "wrong dtype float64, expected float32"),
    ],
)
def test_gate_names_the_wrong_kind_of_output(output, expected_note):
    reference = _reference(torch.randn(4, 2), torch.randn(2, 3))
    assert check_output(output, reference, FLOAT32, torch.float32) == expected_note


def test_gate_of_an_empty_product_passes():
    a, b = torch.randn(0, 3), torch.randn(3, 5)
    assert check_output(a @ b, _reference(a, b), FLOAT32) is None


# --- measuring candidates ---------------------------------------------------------------------------------------


def _matmul_inputs():
    return inputs_like("matmul", [torch.empty(24, 16), torch.empty(16, 8)])


def _raises(a, b):
    raise RuntimeError("launch failed:\n  out of registers")


def _writes_into_input(a, b):
    a.mul_(2)
    return torch.matmul(a / 2, b)


def test_measure_gates_times_and_records_why_candidates_failed():
    candidates = [
        ("torch.mm", torch.mm),
        ("wrong", lambda a, b: a @ b + 1.0),
        ("raises", _raises),
        ("nan", lambda a, b: torch.full((24, 8), float("nan"))),
        ("mutates", _writes_into_input),
        ("torch.matmul", torch.matmul),
    ]
    results = measure_candidates(candidates, _matmul_inputs, torch.matmul, FLOAT32, QUICK, expected_dtype=torch.float32)
    by_name = {result.kernel: result for result in results}
    assert [result.kernel for result in results] == [name for name, _ in candidates]
    for name in ("torch.mm", "torch.matmul"):
        assert by_name[name].passed and by_name[name].note == ""
        assert len(by_name[name].rounds_us) == 3
        assert by_name[name].time_us == statistics.median(by_name[name].rounds_us)
    assert by_name["wrong"].note.startswith("wrong result: norm error")
    assert by_name["raises"].note == "raised RuntimeError: launch failed: out of registers"
    assert by_name["nan"].note == "NaN in output (192 elements)"
    assert by_name["mutates"].note.startswith("wrote into its inputs")
    for name in ("wrong", "raises", "nan", "mutates"):
        assert math.isinf(by_name[name].time_us) and by_name[name].rounds_us == ()
    assert fastest(results).kernel in ("torch.mm", "torch.matmul")
    assert fastest(results).time_us == min(by_name["torch.mm"].time_us, by_name["torch.matmul"].time_us)


def _slow_matmul(a, b):
    time.sleep(0.002)
    return torch.matmul(a, b)


def test_stats_split_tuning_time_into_its_phases():
    _stats.reset_stats()
    candidates = [("torch.mm", torch.mm), ("slow", _slow_matmul), ("torch.matmul", torch.matmul)]
    settings = dataclasses.replace(QUICK, screen_margin=0.25)
    results = measure_candidates(candidates, _matmul_inputs, torch.matmul, FLOAT32, settings,
                                 expected_dtype=torch.float32)
    assert {result.kernel: result.screened for result in results}["slow"]
    figures = kabi.stats()
    # The slow candidate sleeps once in its gate and at least once per screen call; it is cut there, so the full
    # rounds time the two fast ones only.
    assert figures.tuning_gate_seconds >= 0.002
    assert figures.tuning_screen_seconds >= 0.002
    assert figures.tuning_measure_seconds > 0
    assert figures.tuning_graph_seconds == 0


def test_fastest_is_none_when_every_candidate_fails():
    results = measure_candidates([("raises", _raises)], _matmul_inputs, torch.matmul, FLOAT32, QUICK)
    assert fastest(results) is None


def test_a_candidate_that_fails_only_while_timed_is_rejected():
    calls = []

    def flaky(a, b):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("second call breaks")
        return a @ b

    [result] = measure_candidates([("flaky", flaky)], _matmul_inputs, torch.matmul, FLOAT32, QUICK)
    assert result.note == "raised ValueError while being timed: second call breaks"


def _out_of_memory(a, b, out=None):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 28.00 GiB")


def test_a_candidate_out_of_memory_is_rejected_for_this_process_only():
    calls = []

    def out_of_memory_when_timed(a, b):
        calls.append(1)
        return a @ b if len(calls) == 1 else _out_of_memory(a, b)

    candidates = [("gate", _out_of_memory), ("timed", out_of_memory_when_timed), ("torch.mm", torch.mm),
                  ("raises", _raises)]
    results = {result.kernel: result for result in
               measure_candidates(candidates, _matmul_inputs, torch.matmul, FLOAT32, QUICK)}
    assert results["gate"].note.startswith("raised OutOfMemoryError while being gated: CUDA out of memory")
    assert results["timed"].note.startswith("raised OutOfMemoryError while being timed")
    for name in ("gate", "timed"):
        result = results[name]
        assert math.isinf(result.time_us) and result.out_of_memory and result.for_this_process_only
        assert result.note.endswith("kept for this process only")
    assert results["torch.mm"].passed and not results["torch.mm"].for_this_process_only
    assert not results["raises"].out_of_memory and not results["raises"].for_this_process_only


def test_candidates_are_timed_in_interleaved_rounds_with_changing_predecessors():
    calls = []

    def recording(name):
        def kernel(a, b):
            calls.append(name)
            return torch.matmul(a, b)

        return kernel

    results = measure_candidates([(name, recording(name)) for name in "ABC"], _matmul_inputs, torch.matmul,
                                 FLOAT32, QUICK)
    assert calls[:3] == ["A", "B", "C"], "the gate runs each candidate once, in order"
    assert all(result.passed and len(result.rounds_us) == QUICK.repeat for result in results)
    # Each round is a permutation of the candidates, and a candidate does not always follow the same one (a GPU's
    # clock carries the last candidate's load over into the next one's sample).
    orders = [_round_order("ABC", index) for index in range(5)]
    assert all(sorted(order) == ["A", "B", "C"] for order in orders)
    cyclic_predecessors = {order[order.index("B") - 1] for order in orders}
    assert len(cyclic_predecessors) > 1, orders
    assert orders == [_round_order("ABC", index) for index in range(5)], "the orders repeat from run to run"


# --- the policy -------------------------------------------------------------------------------------------------


def test_default_policy_is_first_call(monkeypatch):
    monkeypatch.delenv("KABI_TUNE", raising=False)
    assert current_settings().mode == "first-call"
    assert tuning_blocked_reason([torch.ones(1)]) is None


def test_environment_and_context_set_the_policy(monkeypatch):
    monkeypatch.setenv("KABI_TUNE", "off")
    monkeypatch.setenv("KABI_TUNE_REPEAT", "4")
    assert current_settings() == TuningSettings(mode="off", repeat=4)
    assert "tuning is off" in tuning_blocked_reason()
    with tuning("first-call", warmup=2) as settings:
        assert settings == current_settings() == TuningSettings(mode="first-call", warmup=2, repeat=4)
        with tuning("off"):
            assert current_settings().mode == "off"
        assert current_settings().mode == "first-call"
    assert current_settings().mode == "off"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KABI_TUNE", "always", "tuning mode must be one of 'off', 'first-call'"),
        ("KABI_TUNE_REPEAT", "many", "KABI_TUNE_REPEAT='many' is not a number"),
        ("KABI_TUNE_WARMUP", "0", "warmup must be an integer >= 1"),
        ("KABI_TUNE_MIN_TIME_S", "-1", "min_time_s must be a number of seconds >= 0"),
    ],
)
def test_bad_environment_is_named(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(kabi.InvalidArgumentError, match=message) as error_info:
        current_settings()
    assert variable in str(error_info.value)


def test_bad_context_arguments_are_named():
    with pytest.raises(kabi.InvalidArgumentError, match="tuning mode must be one of"):
        with tuning("sometimes"):
            pass
    with pytest.raises(ValueError, match="repeat must be an integer >= 1"):
        with tuning(repeat=0):
            pass


def test_no_tuning_on_fake_or_meta_tensors_or_while_compiling():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with tuning("first-call"):
        assert "fake or meta" in tuning_blocked_reason([torch.empty(2, 2, device="meta")])
        with FakeTensorMode():
            fake = torch.empty(2, 2)
        assert "fake or meta" in tuning_blocked_reason([fake])

        reasons = []

        @torch.compile(backend="eager", fullgraph=False)
        def traced(x):
            reasons.append(tuning_blocked_reason())
            return x + 1

        torch._dynamo.reset()
        traced(torch.ones(2))
        assert "torch.compile is tracing" in reasons


# --- end to end through kabi.ops.matmul ------------------------------------------------------------------------


QUICK_TUNING = {"warmup": 1, "repeat": 3, "min_time_s": 0.0, "max_spread": math.inf, "min_cpu_share": 0.0,
                "screen_margin": math.inf}
QUICK_ENVIRONMENT = {"KABI_TUNE": "first-call", "KABI_TUNE_WARMUP": "1", "KABI_TUNE_REPEAT": "3", "KABI_TUNE_MIN_TIME_S": "0",
                     "KABI_TUNE_MAX_SPREAD": "inf", "KABI_TUNE_MIN_CPU_SHARE": "0"}


def _explained(a, b):
    explanation = kabi.explain(kabi.ops.matmul, a, b)
    recorded = {c.name: c.tuned_time_us for c in explanation.candidates if c.eligible or c.gate == "failed"}
    return explanation, recorded


def test_the_tuned_pick_is_the_measured_faster_of_torch_and_openblas(cache_dir):
    a, b = torch.randn(48, 32), torch.randn(32, 40)
    before = _stats.stats()
    with kabi.tuning("first-call", **QUICK_TUNING):
        result = kabi.ops.matmul(a, b)
    torch.testing.assert_close(result, a @ b)
    explanation, recorded = _explained(a, b)
    assert {"torch.matmul.cpu", "cpu.openblas.gemm"} <= set(recorded)
    assert all(math.isfinite(time_us) for time_us in recorded.values())
    assert explanation.pick_reason == "tuned"
    assert explanation.pick == min(recorded, key=recorded.get)
    after = _stats.stats()
    assert after.tuning_runs == before.tuning_runs + 1
    assert after.candidates_benchmarked == before.candidates_benchmarked + len(recorded)
    report = tuner.last_report("matmul", "cpu", explanation.problem_key)
    assert report.pick == explanation.pick
    assert {m.kernel: m.time_us for m in report.measurements} == pytest.approx(recorded, rel=1e-9)


def _counting_selections(monkeypatch) -> list:
    front = kabi.ops._front.front_of("matmul")
    selections = []
    select = front.select
    monkeypatch.setattr(front, "select", lambda *args, **kwargs: selections.append(1) or select(*args, **kwargs))
    return selections


def test_a_miss_that_tunes_selects_before_and_after_measuring_and_for_the_other_mode(cache_dir, monkeypatch):
    selections = _counting_selections(monkeypatch)
    with kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(torch.randn(19, 8), torch.randn(8, 6))
    # Selecting again under the measurement lock would find what the miss's selection found: nothing changed since.
    assert len(selections) == 3


def test_a_problem_tuned_while_the_miss_waited_for_the_lock_is_not_measured_again(cache_dir, monkeypatch):
    a, b = torch.randn(21, 8), torch.randn(8, 6)
    real_lock = tuner.measurement_lock

    class TunedMeanwhile:
        """The lock, which another thread held while it tuned the problem (that thread's kabi.tune takes it too)."""

        tuned = False

        def __enter__(self):
            real_lock.__enter__()
            if not self.tuned:
                self.tuned = True
                kabi.tune(kabi.ops.matmul, a, b, settings=QUICK)

        def __exit__(self, *exception):
            return real_lock.__exit__(*exception)

    monkeypatch.setattr(tuner, "measurement_lock", TunedMeanwhile())
    before = _stats.stats().tuning_runs
    with kabi.tuning("first-call", **QUICK_TUNING):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
    assert _stats.stats().tuning_runs == before + 1, "only the other thread measured"


def _scaled_kernel(a, b, out=None):
    return torch.matmul(a, b) * 1.5


def _raising_kernel(a, b, out=None):
    raise RuntimeError("this kernel always fails")


def _nan_kernel(a, b, out=None):
    result = torch.matmul(a, b)
    result[0, 0] = float("nan")
    return result


def test_wrong_raising_and_nan_kernels_are_never_picked_and_say_why(cache_dir, registered):
    for fn, name in ((_scaled_kernel, "test.wrong"), (_raising_kernel, "test.raises"), (_nan_kernel, "test.nan")):
        registered(fn, name, priority=1000)
    a, b = torch.randn(24, 16), torch.randn(16, 8)
    before = _stats.stats()
    with kabi.tuning("first-call", **QUICK_TUNING):
        result = kabi.ops.matmul(a, b)
    torch.testing.assert_close(result, a @ b)
    explanation, recorded = _explained(a, b)
    assert explanation.pick in ("torch.matmul.cpu", "cpu.openblas.gemm")
    for name in ("test.wrong", "test.raises", "test.nan"):
        assert math.isinf(recorded[name])
    assert _stats.stats().gate_failures == before.gate_failures + 3
    notes = {record.kernel: record.note for record in cache.show("matmul") if record.problem == explanation.problem_key}
    assert notes["test.wrong"].startswith("wrong result: norm error")
    assert notes["test.raises"] == "raised RuntimeError: this kernel always fails"
    assert notes["test.nan"] == "NaN in output (1 elements)"
    rejected = {k: v for k, v in notes.items() if v}
    report = tuner.last_report("matmul", "cpu", explanation.problem_key)
    assert {m.kernel: m.note for m in report.measurements if not m.passed} == rejected
    assert gate_notes("matmul", explanation.problem) == rejected
    assert explanation.gate_failures == rejected
    rows = {row[0]: row for row in explanation._rows()}
    for name, note in rejected.items():
        assert rows[name][5] == "failed gate" and rows[name][7] == f"failed the correctness gate on this problem: {note}"
        (line,) = [line for line in str(explanation).splitlines() if line.split()[:1] == [name]]
        assert "failed gate" in line and line.endswith(note)
    tuner._reports.clear()  # a later process knows only what the tuning cache kept
    assert gate_notes("matmul", explanation.problem) == rejected
    assert kabi.explain(kabi.ops.matmul, a, b).gate_failures == rejected


def test_a_kernel_out_of_memory_while_tuned_is_not_recorded_beyond_this_process(cache_dir, registered):
    registered(_out_of_memory, "test.out_of_memory", priority=1000)
    a, b = torch.randn(24, 16), torch.randn(16, 8)
    with kabi.tuning("first-call", **QUICK_TUNING):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
    explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.pick in ("torch.matmul.cpu", "cpu.openblas.gemm")
    [record] = [record for record in cache.show("matmul") if record.kernel == "test.out_of_memory"]
    assert record.memory_only and math.isinf(record.time_us) and "out of memory" in record.note
    log = (cache_dir / "tuning-v4.log").read_text()  # what a later process reads: it measures the kernel again
    assert "torch.matmul.cpu" in log and "test.out_of_memory" not in log


def test_a_gate_out_of_memory_raises_and_records_no_verdict(cache_dir, registered):
    registered(_out_of_memory, "test.out_of_memory", priority=1000)
    a, b = torch.randn(20, 12), torch.randn(12, 6)
    with kabi.use(matmul="test.out_of_memory"), pytest.raises(torch.OutOfMemoryError) as raised:
        kabi.ops.matmul(a, b)
    assert any("no verdict was recorded" in note for note in raised.value.__notes__)
    assert [record.kernel for record in cache.show("matmul")] == []


def test_tuning_that_runs_out_of_memory_leaves_the_untuned_pick_and_is_not_retried(cache_dir, monkeypatch):
    attempts = []

    def no_memory_for_fresh_inputs(*arguments, **keywords):
        attempts.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 28.00 GiB")

    monkeypatch.setattr(tuner, "inputs_like", no_memory_for_fresh_inputs)
    monkeypatch.setattr(tuner, "_out_of_memory_problems", set())  # this test's memory of the problem, not the process's
    a, b = torch.randn(28, 16), torch.randn(16, 8)
    with kabi.tuning("first-call", **QUICK_TUNING), pytest.warns(RuntimeWarning, match="ran out of device memory"):
        first = kabi.ops.matmul(a, b)
    torch.testing.assert_close(first, a @ b)
    assert len(attempts) == 1
    with kabi.tuning("first-call", **QUICK_TUNING):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
    assert len(attempts) == 1, "a problem whose tuning ran out of memory is not tried again in this process"
    records = cache.show("matmul")
    assert records and all(record.gate_only for record in records), "only the untuned pick's gate verdict"


def test_forced_and_off_selections_do_not_tune_but_gate_their_pick_once(cache_dir):
    a, b = torch.randn(20, 12), torch.randn(12, 6)
    before = _stats.stats()
    with kabi.use(matmul="torch"), kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(a, b)
    with kabi.tuning("off"):
        kabi.ops.matmul(a, b)  # the heuristic prefers the kernel that has passed the gate: no second gate run
    after = _stats.stats()
    assert after.tuning_runs == before.tuning_runs
    assert after.tuning_skipped == before.tuning_skipped + 1
    assert [(r.kernel, r.gate_only, r.time_us) for r in cache.show("matmul")] == [("torch.matmul.cpu", True, 0.0)]


def test_a_new_fingerprint_invalidates_the_kernels_records(cache_dir, registered):
    a, b = torch.randn(10, 6), torch.randn(6, 4)
    registered(lambda a, b, out=None: torch.matmul(a, b), "test.versioned", fingerprint="v1")
    with kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(a, b)
    assert _explained(a, b)[0].pick_reason == "tuned"
    fingerprints = lambda: {r.fingerprint for r in cache.show("matmul") if r.kernel == "test.versioned"}
    assert fingerprints() == {"v1"}
    kabi.unregister_kernel("matmul", "test.versioned")
    kabi.register_kernel("matmul", lambda a, b, out=None: torch.matmul(a, b), name="test.versioned",
                         dtypes=["float32"], fingerprint="v2")
    explanation, recorded = _explained(a, b)
    assert recorded["test.versioned"] is None and explanation.pick_reason == "heuristic"
    assert "test.versioned has no measurement under its current fingerprint" in explanation.reason
    before = _stats.stats().tuning_runs
    with kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(a, b)
    assert _stats.stats().tuning_runs == before + 1
    assert fingerprints() == {"v2"}, "the new measurement supersedes the old one"
    assert _explained(a, b)[0].pick_reason == "tuned"


CHILD = """
import json, sys, torch, kabi
m, n, k = map(int, sys.argv[1:4])
torch.manual_seed(m)
a, b = torch.randn(m, k), torch.randn(k, n)
torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
explanation = kabi.explain(kabi.ops.matmul, a, b)
stats = kabi.stats()
print(json.dumps({"tuning_runs": stats.tuning_runs, "pick": explanation.pick, "reason": explanation.pick_reason,
                  "corrupt": kabi.cache.stats().corrupt_records}))
"""


def _child(cache_directory, m, n, k, **popen):
    environment = {**os.environ, **QUICK_ENVIRONMENT, "KABI_CACHE_DIR": str(cache_directory)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(m), str(n), str(k)], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(process):
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1]), stderr


def test_a_second_process_with_a_warm_cache_does_no_tuning(tmp_path):
    first, _ = _finish(_child(tmp_path, 16, 12, 8))
    second, _ = _finish(_child(tmp_path, 16, 12, 8))
    assert first["tuning_runs"] == 1 and first["reason"] == "tuned"
    assert second["tuning_runs"] == 0 and second["reason"] == "tuned"
    assert second["pick"] == first["pick"]


@pytest.mark.slow
def test_eight_processes_tuning_different_shapes_at_once_lose_no_record(cache_dir):
    shapes = [(8, 8 + index, 8) for index in range(8)]  # N is kept exact in the problem key; M is bucketed
    processes = [_child(cache_dir, *shape) for shape in shapes]
    results = [_finish(process)[0] for process in processes]
    assert [result["tuning_runs"] for result in results] == [1] * 8
    cache.reload()
    records = cache.show("matmul")
    kernels = {"torch.matmul.cpu", "cpu.openblas.gemm"}
    by_problem = {}
    for record in records:
        by_problem.setdefault(record.problem, set()).add(record.kernel)
    assert len(by_problem) == 8
    assert all(kernels <= found for found in by_problem.values())


def test_a_corrupt_cache_file_is_reported_once_and_rebuilt(tmp_path):
    first, _ = _finish(_child(tmp_path, 12, 10, 8))
    [log] = list(tmp_path.glob("*.log"))
    valid = log.read_text()
    log.write_text(valid + "v1\tgarbage that is not a record\n" + valid.splitlines()[0][:40])
    second, stderr = _finish(_child(tmp_path, 12, 10, 8))
    assert stderr.count("kabi: skipped 2 corrupt records") == 1
    assert second["corrupt"] == 2
    assert second["tuning_runs"] == 0 and second["pick"] == first["pick"]
    assert log.read_text() == valid
    log.write_bytes(b"\x00\xff" * 64)
    third, stderr = _finish(_child(tmp_path, 12, 10, 8))
    assert "kabi: skipped" in stderr and third["tuning_runs"] == 1 and third["reason"] == "tuned"


def test_graph_mode_is_a_scope_and_not_an_environment_policy(monkeypatch):
    # KABI_TUNE=graph would hand kernels picked for replay to every eager call of the process.
    monkeypatch.setenv("KABI_TUNE", "graph")
    with pytest.raises(kabi.InvalidArgumentError, match=r"KABI_TUNE=graph: .*kabi.tuning\(mode='graph'\)"):
        current_settings()
    monkeypatch.setenv("KABI_TUNE", "first-call")
    with tuning("graph"):
        assert current_settings().mode == "graph"
