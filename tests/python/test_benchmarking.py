"""kabi bench: every op's quick suite on the CPU writes schema-valid JSON and a PNG; an interrupted run resumes; a
peer that raises, returns a wrong result or is not installed is recorded, not fatal; bad arguments fail clearly;
the markdown report is generated from the JSON."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import statistics
import subprocess
import sys

import pytest
import torch

import kabi
from kabi._base.declarations import load_op_file, op_spec, op_specs, resolve_callable
from kabi._base.registry_fields import RegistryError
from kabi._benchmarking import _ops, _problem_run, _runner, read_document, validation_errors
from kabi._benchmarking._peers import Peer
from kabi._benchmarking._problems import BenchProblem
from kabi._benchmarking._report import BEGIN_MARKER, END_MARKER
from kabi._benchmarking._results import summarize
from kabi._selection.correctness import check_output, reference_output
from kabi.cli import main

QUICK_TIMING = ["--rounds", "2", "--repeat", "3", "--min-time-s", "0.002"]
QUICK_SETTINGS = kabi._benchmarking.TimingSettings(rounds=2, repeat=3, min_time_s=0.002)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MEASURE_PROBLEM = _runner.measure_problem


@pytest.fixture(autouse=True)
def temporary_tuning_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KABI_CACHE_DIR", str(tmp_path / "tuning-cache"))
    kabi.cache.set_directory(tmp_path / "tuning-cache")
    yield
    kabi.cache.set_directory(None)


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """Each op's quick suite, run once through the command line (the tests below read the files)."""
    directory = tmp_path_factory.mktemp("bench")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KABI_CACHE_DIR", str(directory / "tuning-cache"))
        kabi.cache.set_directory(directory / "tuning-cache")
        try:
            for op in _ops.OP_BENCHMARKS:
                out, plot = directory / f"{op}-quick.json", directory / f"{op}-quick.png"
                status = main(["bench", op, "--suite", "quick", "--device", "cpu", "--out", str(out),
                               "--plot", str(plot), *QUICK_TIMING])
                runs[op] = (status, out, plot)
        finally:
            kabi.cache.set_directory(None)
    return runs


def test_every_op_has_a_benchmark_and_a_quick_suite():
    for name, spec in op_specs().items():
        assert name in _ops.OP_BENCHMARKS, name
        assert "quick" in spec.suites, name


@pytest.mark.parametrize("op", sorted(_ops.OP_BENCHMARKS))
def test_quick_suite_writes_schema_valid_json_and_a_png(quick_runs, op):
    status, out, plot = quick_runs[op]
    assert status == 0
    document = read_document(out)
    assert validation_errors(document) == []
    suite = op_spec(op).suites["quick"]
    problems = len(suite.shapes) * len(suite.layouts) * len(suite.dtypes) * max(1, len(suite.routings))
    assert document["complete"] and len(document["problems"]) == problems
    assert document["runs"][0]["command"].startswith(f"kabi bench {op} --suite quick --device cpu")
    assert document["runs"][0]["device"]["type"] == "cpu" and document["runs"][0]["versions"]["torch"] == torch.__version__
    assert all(document["roof"]["matrix_tflops"][dtype] > 0 for dtype in suite.dtypes)
    assert document["roof"]["copy_gbps"] > 0
    data = plot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_quick_results_are_consistent(quick_runs):
    document = read_document(quick_runs["matmul"][1])
    for problem in document["problems"]:
        by_name = {item["name"]: item for item in problem["implementations"]}
        kinds = [item["kind"] for item in problem["implementations"]]
        assert kinds.count("auto") == 1 and kinds.count("candidate") >= 2, problem["key"]
        assert problem["kabi"]["pick"] in by_name
        times = {name: item["times"]["cpu"]["median_us"] for name, item in by_name.items() if "cpu" in item["times"]}
        oracle = problem["oracle"]["cpu"]
        assert oracle == min((name for name in times if by_name[name]["kind"] == "candidate"), key=times.__getitem__)
        ratios = problem["ratios"]["cpu"]
        assert ratios["auto/oracle"] == pytest.approx(times[oracle] / times["auto"])
        assert ratios["auto/torch.matmul"] == pytest.approx(times["torch.matmul"] / times["auto"])
        assert ratios["auto/pick"] == pytest.approx(times[problem["kabi"]["pick"]] / times["auto"])
        auto = by_name["auto"]["times"]["cpu"]
        assert auto["tflops"] == pytest.approx(problem["flops"] / (auto["median_us"] * 1e6))
        assert auto["roof_fraction"] == pytest.approx(problem["roof_us"] / auto["median_us"])
        assert len(auto["round_medians_us"]) == 2
        assert auto["median_us"] == pytest.approx(statistics.fmean(auto["round_medians_us"]))
        # F.linear applies to an nn.Linear weight only; the CUDA-only peers do not apply on the CPU.
        linear = problem["layout"] == "transposed_b" and len(problem["shape"]) == 3
        assert ("F.linear" in by_name) == linear
        assert "torch.compile" not in by_name and "torch.matmul (cuBLASLt)" not in by_name
    assert document["summary"]["ratios"]["primary"]["auto/oracle"]["count"] == len(document["problems"])


def _count_calls(monkeypatch, stop_after: int | None = None) -> list[str]:
    measured = []

    def counting(benchmark, problem, *arguments):
        if stop_after is not None and len(measured) == stop_after:
            raise KeyboardInterrupt
        measured.append(problem.key)
        return MEASURE_PROBLEM(benchmark, problem, *arguments)

    monkeypatch.setattr(_runner, "measure_problem", counting)
    return measured


def test_an_interrupted_run_resumes(monkeypatch, tmp_path, capsys):
    out = tmp_path / "quick.json"
    plot = tmp_path / "quick.png"
    first = _count_calls(monkeypatch, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        kabi.benchmark("matmul", "quick", out=out, plot=plot, settings=QUICK_SETTINGS)
    assert plot.read_bytes().startswith(PNG_MAGIC)  # what was measured before the interruption is plotted
    interrupted = read_document(out)
    assert [problem["key"] for problem in interrupted["problems"]] == first and not interrupted["complete"]
    second = _count_calls(monkeypatch)
    results = kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS)
    assert "resuming" in capsys.readouterr().err
    assert not set(first) & set(second)
    assert [problem["key"] for problem in results.problems] == first + second and results.complete
    assert len(results.document["runs"]) == 2 and results.document["roof"] == interrupted["roof"]
    assert validation_errors(read_document(out)) == []
    third = _count_calls(monkeypatch)
    kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS)
    assert third == []


def test_a_run_with_other_parameters_is_refused_and_fresh_starts_over(monkeypatch, tmp_path):
    out = tmp_path / "quick.json"
    _count_calls(monkeypatch, stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS)
    with pytest.raises(kabi.InvalidArgumentError, match="other parameters.*fresh"):
        kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS, peers=["torch.matmul"])
    current = json.loads(out.read_text())
    out.write_text(json.dumps({**current, "schema_version": 1}))
    with pytest.raises(kabi.InvalidArgumentError, match="schema version 1.*version 2.*fresh"):
        kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS)
    measured = _count_calls(monkeypatch)
    results = kabi.benchmark("matmul", "quick", out=out, settings=QUICK_SETTINGS, peers=["torch.matmul"], fresh=True)
    suite = op_spec("matmul").suites["quick"]
    assert len(measured) == len(suite.shapes) * len(suite.layouts) == len(results.problems)
    assert len(results.document["runs"]) == 1


def _raises(inputs):
    raise RuntimeError("this peer cannot run")


def test_failing_wrong_and_missing_peers_are_recorded_not_fatal(monkeypatch, tmp_path):
    always = lambda problem, device: True
    peers = (
        Peer("builds-and-raises", applies=always, build=_raises),
        Peer("calls-and-raises", applies=always, build=lambda inputs: (lambda: _raises(inputs))),
        Peer("wrong", applies=always, build=lambda inputs: (lambda: torch.matmul(*inputs) + 1)),
        Peer("not-installed", applies=always, build=_raises, requires="kabi_no_such_package"),
    )
    matmul = _ops.OP_BENCHMARKS["matmul"]
    monkeypatch.setitem(_ops.OP_BENCHMARKS, "matmul", dataclasses.replace(matmul, peers=matmul.peers + peers))
    results = kabi.benchmark("matmul", "quick", dtypes=["float32"], settings=QUICK_SETTINGS,
                             peers=["torch.matmul", *(peer.name for peer in peers)], out=tmp_path / "peers.json")
    assert results.complete and validation_errors(results.document) == []
    for problem in results.problems:
        by_name = {item["name"]: item for item in problem["implementations"]}
        assert by_name["torch.matmul"]["status"] == "ok"
        assert by_name["builds-and-raises"]["status"] == "failed"
        assert "RuntimeError: this peer cannot run" in by_name["builds-and-raises"]["error"]
        assert by_name["calls-and-raises"]["status"] == "failed"
        assert by_name["wrong"]["status"] == "failed" and "wrong result" in by_name["wrong"]["error"]
        assert by_name["not-installed"]["status"] == "skipped"
        assert "kabi_no_such_package" in by_name["not-installed"]["error"]
        assert set(problem["ratios"]["cpu"]) == {"auto/oracle", "auto/pick", "auto/torch.matmul"}


def test_a_failing_automatic_call_is_recorded_and_misses_every_target(monkeypatch, tmp_path):
    real_tuning, entered = _problem_run.tuning, []

    def tuning_that_runs_out_of_memory_once(policy):
        entered.append(policy)
        if len(entered) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 28.00 GiB")
        return real_tuning(policy)

    monkeypatch.setattr(_problem_run, "tuning", tuning_that_runs_out_of_memory_once)
    results = kabi.benchmark("matmul", "quick", dtypes=["float32"], settings=QUICK_SETTINGS, peers=["torch.matmul"],
                             out=tmp_path / "auto.json")
    assert results.complete and validation_errors(results.document) == []
    failed, *others = results.problems
    by_name = {item["name"]: item for item in failed["implementations"]}
    assert by_name["auto"]["status"] == "failed" and "OutOfMemoryError" in by_name["auto"]["error"]
    assert failed["kabi"]["pick"] is None and "OutOfMemoryError" in failed["kabi"]["reason"]
    assert by_name["torch.matmul"]["status"] == "ok" and failed["ratios"]["cpu"] == {}
    assert any(item["kind"] == "candidate" and item["status"] == "ok" for item in failed["implementations"])
    assert others and all(problem["ratios"]["cpu"] for problem in others)
    for target in results.summary["targets"]:
        if target["statistic"] in ("geomean", "min"):
            assert target["met"] is False and failed["key"] in target["misses"], target


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"suite": "no-such-suite"}, kabi.NotFoundError, "suite must be one of .*quick"),
    ({"suite": "quick", "dtypes": ["int3"]}, kabi.InvalidArgumentError, "dtype must be among .*float32"),
    ({"suite": "quick", "device": "tpu"}, kabi.InvalidArgumentError, "device must be cpu, cuda or cuda:N"),
    ({"suite": "quick", "peers": ["cutlass-by-hand"]}, kabi.InvalidArgumentError, "peers must be among .*torch.matmul"),
])
def test_bad_arguments_name_what_was_expected(tmp_path, arguments, error, message):
    with pytest.raises(error, match=message):
        kabi.benchmark("matmul", out=tmp_path / "x.json", **arguments)
    assert not (tmp_path / "x.json").exists()


def test_an_unknown_op_is_refused():
    with pytest.raises(kabi.NotFoundError, match="op must be one of matmul"):
        kabi.benchmark("convolution", "quick")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where there is no CUDA device")
def test_cuda_without_a_gpu_is_refused_clearly(tmp_path):
    with pytest.raises(kabi.UnavailableError, match="no CUDA device"):
        kabi.benchmark("matmul", "quick", device="cuda")


def test_plot_without_matplotlib_fails_before_measuring(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(kabi.UnavailableError, match="matplotlib"):
        kabi.benchmark("matmul", "quick", out=tmp_path / "x.json", plot=tmp_path / "x.png")
    assert not (tmp_path / "x.json").exists()


def test_the_report_is_generated_from_the_json(quick_runs, tmp_path, capsys):
    _, out, plot = quick_runs["matmul"]
    readme = tmp_path / "README.md"
    readme.write_text(f"# Results\n\nbefore\n{BEGIN_MARKER}\nold table\n{END_MARKER}\nafter\n")
    assert main(["bench-report", str(out), "--into", str(readme)]) == 0
    text = readme.read_text()
    document = read_document(out)
    assert "old table" not in text and text.startswith("# Results\n\nbefore\n") and text.endswith("after\n")
    assert document["runs"][0]["command"] in text
    assert f"![matmul quick]({os.path.relpath(plot, tmp_path)})" in text
    for problem in document["problems"]:
        row = next(line for line in text.splitlines() if line.startswith(f"| {problem['key']} |"))
        assert f"{problem['ratios']['cpu']['auto/oracle']:.3f} | {problem['ratios']['cpu']['auto/pick']:.3f} |" in row
        assert f"{problem['ratios']['cpu']['auto/torch.matmul']:.3f}" in row
    assert "| auto/oracle geomean | 0.98 |" in text
    readme.write_text("no markers here\n")
    assert main(["bench-report", str(out), "--into", str(readme)]) == 2
    assert "kabi-bench:begin" in capsys.readouterr().err


def _column_major_product(inputs):
    a, b = inputs
    return lambda: (b.mT @ a.mT).mT


def test_each_output_layout_is_recorded_and_a_peer_unlike_kabi_is_marked(monkeypatch, tmp_path):
    """A peer whose result is laid out unlike kabi's (Inductor's view of a padded product) is marked in the report,
    with both strides, so its ratio is not read as the same work done faster."""
    peer = Peer("column-major", applies=lambda problem, device: True, build=_column_major_product)
    matmul = _ops.OP_BENCHMARKS["matmul"]
    monkeypatch.setitem(_ops.OP_BENCHMARKS, "matmul", dataclasses.replace(matmul, peers=matmul.peers + (peer,)))
    out = tmp_path / "layouts.json"
    results = kabi.benchmark("matmul", "quick", dtypes=["float32"], settings=QUICK_SETTINGS,
                             peers=["torch.matmul", "column-major"], out=out)
    assert validation_errors(results.document) == []
    marked = []
    for problem in results.problems:
        by_name = {item["name"]: item for item in problem["implementations"]}
        output = torch.empty(problem["shape"][:-1])
        assert by_name["auto"]["output_strides"] == list(output.stride())
        assert by_name["torch.matmul"]["output_strides"] == list(output.stride())
        column_major = by_name["column-major"]["output_strides"]
        assert column_major[-2:] == [1, problem["shape"][-3]]
        if column_major != by_name["auto"]["output_strides"]:
            marked.append(problem["key"])
    assert marked
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN_MARKER}\n{END_MARKER}\n")
    assert main(["bench-report", str(out), "--into", str(readme)]) == 0
    text = readme.read_text()
    for key in marked:
        row = next(line for line in text.splitlines() if line.startswith(f"| {key} |"))
        assert row.count("†") == 1
        assert f"{key}: column-major returned strides" in text


def _problem(key: str, auto: float, oracle: float, cublas: float) -> dict:
    def implementation(name, kind, us):
        return {"name": name, "kind": kind, "status": "ok", "error": "", "setup_s": None,
                "times": {"cuda-events": {"median_us": us}}}

    implementations = [implementation("auto", "auto", auto), implementation("fast", "candidate", oracle),
                       implementation("torch.matmul", "peer", cublas)]
    ratios = {"auto/oracle": oracle / auto, "auto/torch.matmul": cublas / auto}
    return {"key": key, "modes": ["cuda-events"], "primary_mode": "cuda-events", "kabi": {"tuning_s": 1.0},
            "ratios": {"cuda-events": ratios}, "implementations": implementations}


def test_the_summary_reports_each_missed_target():
    problems = [_problem("captured", auto=90, oracle=90, cublas=100),
                _problem("missed", auto=100, oracle=90, cublas=100),
                _problem("no headroom", auto=100, oracle=100, cublas=100)]
    summary = summarize(problems)
    targets = {(target["ratio"], target["statistic"]): target for target in summary["targets"]}
    oracle_min = targets[("auto/oracle", "min")]
    assert not oracle_min["met"] and oracle_min["misses"] == ["missed"] and oracle_min["value"] == pytest.approx(0.9)
    capture = targets[("auto/torch.matmul", "where the oracle beats torch.matmul by > 3%")]
    assert capture["misses"] == ["missed"] and capture["value"] == 1 and not capture["met"]
    geomean = summary["ratios"]["primary"]["auto/torch.matmul"]["geomean"]
    assert geomean == pytest.approx(math.prod([100 / 90, 1.0, 1.0]) ** (1 / 3))
    inductor = targets[("auto/torch.compile", "geomean")]
    assert inductor["value"] is None and inductor["met"] is None


def test_the_validator_names_what_is_wrong(quick_runs):
    document = json.loads(quick_runs["matmul"][1].read_text())
    document["problems"][0]["implementations"][0]["status"] = "fine"
    del document["roof"]["copy_gbps"]
    document["surprise"] = 1
    errors = validation_errors(document)
    assert "$.roof: missing 'copy_gbps'" in errors and "$: unexpected 'surprise'" in errors
    assert any(error.startswith("$.problems[0].implementations[0].status: expected one of") for error in errors)


def test_suite_layouts_are_validated(tmp_path):
    text = op_spec("matmul").path.read_text()
    assert op_spec("matmul").suites["smoke"].layouts == ("row_major",)
    assert op_spec("matmul").suites["quick"].layouts == ("row_major", "transposed_b")
    path = tmp_path / "registry" / "ops" / "matmul.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text.replace('layouts = ["row_major", "transposed_b"]', 'layouts = ["row_major", "diagonal"]', 1))
    with pytest.raises(RegistryError, match=r"suites.quick.layouts\[1\]: 'diagonal' is not one of row_major, transposed_b"):
        load_op_file(path)


def test_subjects_run_unmeasured_until_a_gpu_reaches_its_steady_state(monkeypatch):
    from kabi._benchmarking import _timing

    calls = {"steady": 0, "failing": 0}

    def failing():
        calls["failing"] += 1
        raise RuntimeError("not on this device")

    subjects = [_timing.Subject("steady", "peer", lambda: calls.__setitem__("steady", calls["steady"] + 1)),
                _timing.Subject("failing", "peer", failing)]
    monkeypatch.setattr(_timing, "synchronize", lambda device: None)
    _timing._reach_steady_state(subjects, torch.device("cuda"), 0.02)
    assert calls["steady"] > 1 and calls["failing"] == calls["steady"], "a raising subject does not stop the others"
    before = dict(calls)
    _timing._reach_steady_state(subjects, torch.device("cpu"), 0.02)
    assert calls == before, "a CPU has no power-limit ramp to wait out"


def test_each_gpu_measurement_follows_the_subjects_own_unmeasured_calls(monkeypatch):
    from kabi._benchmarking import _timing

    events = []
    subjects = [_timing.Subject(name, "peer", lambda name=name: events.append(name)) for name in ("a", "b")]

    class Stream:
        def synchronize(self):
            pass

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())

    def fake_bench(fn, **options):
        events.append("measured")
        return kabi.bench(lambda: None, repeat=1, min_time_s=0.0, device="cpu")

    monkeypatch.setattr(_timing, "bench", fake_bench)
    settings = kabi._benchmarking.TimingSettings(rounds=2, repeat=1, min_time_s=0.0, steady_state_s=0.0,
                                                 condition_s=0.01)
    _timing.measure_interleaved(subjects, ("cuda-events",), torch.device("cuda"), settings)
    measured = [index for index, event in enumerate(events) if event == "measured"]
    assert len(measured) == 4
    for index in measured:
        previous = events[index - 1]
        assert previous in ("a", "b"), "every measurement is preceded by conditioning calls"
        start = index - 1
        while start > 0 and events[start - 1] == previous:
            start -= 1
        assert index - start > 1, "conditioning lasts more than one call"
    with pytest.raises(ValueError, match="condition_s must be a number of seconds >= 0"):
        kabi._benchmarking.TimingSettings(condition_s=-1)


def test_every_subject_is_timed_early_and_late_in_a_round_over_the_rounds():
    from kabi._benchmarking import _timing

    subjects = [_timing.Subject(f"s{index}", "candidate", lambda: None) for index in range(20)]
    positions = {subject.name: [] for subject in subjects}
    for round_index in range(5):
        for position, subject in enumerate(_timing._round_order(subjects, round_index, 5)):
            positions[subject.name].append(position)
    assert sorted(subject.name for subject in _timing._round_order(subjects, 3, 5)) == sorted(positions)
    for name, seen in positions.items():
        assert min(seen) < 5 and max(seen) >= 15, f"{name} was timed only at positions {seen}"


def test_fast_accum_layouts_pass_the_attribute_and_meet_torchs_fast_peer(monkeypatch, tmp_path):
    calls = []
    suite = op_spec("scaled_mm").suites["quick"]
    monkeypatch.setitem(op_spec("scaled_mm").suites, "quick", dataclasses.replace(
        suite, layouts=("tensor_scales", "row_scales_fast_accum")))
    explain = _problem_run.explain
    monkeypatch.setattr(_problem_run, "explain", lambda function, *inputs, **attributes: calls.append(attributes)
                        or explain(function, *inputs, **attributes))
    results = kabi.benchmark("scaled_mm", "quick", settings=QUICK_SETTINGS, out=tmp_path / "fast.json")
    assert results.complete and validation_errors(results.document) == []
    by_layout = {problem["layout"]: problem for problem in results.problems}
    assert {"tensor_scales", "row_scales_fast_accum"} <= set(by_layout)
    assert {} in calls and {"use_fast_accum": True} in calls
    fast = {item["name"]: item for item in by_layout["row_scales_fast_accum"]["implementations"]}
    accurate = {item["name"]: item for item in by_layout["tensor_scales"]["implementations"]}
    assert fast["torch._scaled_mm (fast accum)"]["status"] == "ok" and "torch._scaled_mm" not in fast
    assert accurate["torch._scaled_mm"]["status"] == "ok" and "torch._scaled_mm (fast accum)" not in accurate
    assert "auto/torch._scaled_mm (fast accum)" in by_layout["row_scales_fast_accum"]["ratios"]["cpu"]


def test_grouped_routing_is_the_same_in_every_process():
    # Python salts str hashes per process: a routing seeded through hash() would change from run to run, and with it
    # the problems a suite's figures describe.
    script = ("from kabi._benchmarking._grouped import routed_offsets\n"
              "from kabi._benchmarking._problems import BenchProblem\n"
              "print(routed_offsets(BenchProblem((16, 512, 64, 32), 'bfloat16', 'transposed_b', 'zipf')).tolist())")
    outputs = set()
    for hash_seed in ("1", "2"):
        environment = dict(os.environ, PYTHONHASHSEED=hash_seed)
        outputs.add(subprocess.run([sys.executable, "-c", script], env=environment, check=True, capture_output=True,
                                   text=True).stdout)
    assert len(outputs) == 1
    offsets = json.loads(outputs.pop())
    assert offsets[-1] == 512 and offsets == sorted(offsets)


class _DocumentedFlashInfer:
    """A stand-in for the ``flashinfer`` module computing what FlashInfer's documentation says each call computes, and
    refusing arguments outside what it documents: b column-major for the GEMMs, int64 ``seg_indptr`` of E + 1 entries
    starting at 0, weights ``(E, d_out, d_in)`` when column-major and ``(E, d_in, d_out)`` otherwise."""

    @staticmethod
    def _column_major(b):
        assert b.stride(-2) == 1, "flashinfer takes b column-major"

    def mm_bf16(self, a, b):
        self._column_major(b)
        assert a.dim() == b.dim() == 2
        return a @ b

    def bmm_bf16(self, a, b):
        self._column_major(b)
        assert a.dim() == b.dim() == 3
        return a @ b

    def bmm_fp8(self, a, b, a_scale, b_scale, dtype):
        self._column_major(b)
        assert a.dim() == b.dim() == 3 and a_scale.numel() == b_scale.numel() == 1
        return ((a.float() * a_scale) @ (b.float() * b_scale)).to(dtype)

    class SegmentGEMMWrapper:
        def __init__(self, workspace):
            assert workspace.dtype == torch.int8

        def run(self, x, weights, batch_size, weight_column_major, out=None, seg_indptr=None):
            assert seg_indptr.dtype == torch.int64 and seg_indptr.shape == (batch_size + 1,) and seg_indptr[0] == 0
            assert weights.is_contiguous() and weights.shape[0] == batch_size
            for group in range(batch_size):
                start, end = int(seg_indptr[group]), int(seg_indptr[group + 1])
                weight = weights[group].mT if weight_column_major else weights[group]
                out[start:end] = x[start:end] @ weight
            return out


@pytest.mark.parametrize("op, peer, layouts, dtype", [
    ("matmul", "flashinfer.mm_bf16", ("transposed_b",), "bfloat16"),
    ("matmul", "flashinfer.bmm_bf16", ("transposed_b",), "bfloat16"),
    ("linear", "flashinfer.mm_bf16", ("row_major",), "bfloat16"),
    ("grouped_mm", "flashinfer.SegmentGEMMWrapper", ("transposed_b", "row_major"), "bfloat16"),
    ("scaled_mm", "flashinfer.bmm_fp8", ("tensor_scales",), "float8_e4m3fn"),
])
def test_flashinfer_peers_call_flashinfer_as_documented(monkeypatch, op, peer, layouts, dtype):
    # FlashInfer is not installed where CI runs (and needs a GPU): the stand-in holds each peer to FlashInfer's
    # documented contract, so that a layout passed the wrong way round fails here rather than as a "wrong result"
    # peer in a GPU run.
    monkeypatch.setitem(sys.modules, "flashinfer", _DocumentedFlashInfer())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    benchmark = _ops.OP_BENCHMARKS[op]
    by_name = {candidate.name: candidate for candidate in benchmark.peers}
    assert by_name[peer].requires == "flashinfer"
    spec = op_spec(op)
    shapes = [shape.positional(spec.shape_order) for shape in spec.suites["quick"].shapes]
    problems = [BenchProblem(shape, dtype, layout, "zipf" if op == "grouped_mm" else "")
                for shape, layout in itertools.product(shapes, layouts)]
    applicable = [problem for problem in problems if by_name[peer].applies(problem, torch.device("cuda"))]
    assert applicable
    for problem in applicable:
        inputs = benchmark.make_inputs(problem, torch.device("cpu"))
        reference = reference_output(resolve_callable(spec.reference), inputs)
        output_dtype = benchmark.output_dtype(problem)
        output = by_name[peer].build(inputs)()
        assert check_output(output, reference, spec.tolerance[output_dtype], getattr(torch, output_dtype)) is None
