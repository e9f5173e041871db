"""`kabi cache show` (the pick, each record's age, spread and flags), problem keys rebuilt into inputs, and
`kabi cache retune` / `kabi.cache.retune` selecting and measuring problems again."""

import math
import time
import zlib

import pytest
import torch

import kabi
from kabi import _core, cli
from kabi._base.tensors import descriptor
from kabi._selection.tuning_keys import representative_problem
from kabi._selection.tuning_policy import TuningSettings
from kabi.cli._commands.cache import _age

# Quick and noise-blind: which problems retune selects must not depend on this machine's load.
QUICK = TuningSettings(warmup=1, repeat=2, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps at the terminal width; keep each row on one line


def _kabi(capsys, *arguments):
    status = cli.main(list(arguments))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _store(records, m=8, n=6, k=4):
    _core.tuning_store("matmul", [descriptor(torch.empty(m, k)), descriptor(torch.empty(k, n))], [], records)


class _Recent:
    """Equal to the age of a record made during the test: a few seconds."""

    def __eq__(self, text):
        return text in ("0 s", "1 s", "2 s", "3 s")


RECENT = _Recent()


def _rows(output, kernel):
    """The cells of ``kernel``'s row in each table, in the order the tables are shown."""
    lines = [line for line in output.splitlines() if f" {kernel} " in line]
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines]


def test_show_marks_the_pick_and_shows_age_spread_and_flags(cache_dir, capsys):
    kabi.register_kernel("matmul", torch.matmul, name="test.show.verdict", dtypes=["float32"])
    try:
        _store([("torch.matmul.cpu", 12.5, "", 0, 0.031),
                ("cpu.openblas.gemm", 9.0, "noisy", _core.TUNING_RECORD_MEMORY_ONLY, 0.6),
                ("test.show.verdict", 0.0, "", _core.TUNING_RECORD_GATE_ONLY, 0.0)])
        _store([("torch.matmul.cpu", 3.0, "", 0, 0.0), ("cpu.openblas.gemm", math.inf, "wrong result", 0, 0.0)],
               m=16)
        status, output = _kabi(capsys, "cache", "show", "--op", "matmul")
    finally:
        kabi.unregister_kernel("matmul", "test.show.verdict")
    assert status == 0
    assert output.count("matmul float32|contiguous,contiguous|1|") == 2, "one table per problem"
    # Problems in key order: M=16 (openblas failed, torch the pick), then M=8, where the fastest timed record is
    # the memory-only one (this process uses it).
    failed, noisy = _rows(output, "cpu.openblas.gemm")
    assert failed == ["", "cpu.openblas.gemm", "eager", "-", "-", RECENT, "failed", "wrong result"]
    assert noisy == ["*", "cpu.openblas.gemm", "eager", "9.00 us", "60%", RECENT, "memory only", "noisy"]
    assert [row[:5] for row in _rows(output, "torch.matmul.cpu")] == [
        ["*", "torch.matmul.cpu", "eager", "3.00 us", "0%"], ["", "torch.matmul.cpu", "eager", "12.50 us", "3%"]]
    [verdict] = _rows(output, "test.show.verdict")
    assert verdict[:7] == ["", "test.show.verdict", "eager", "-", "-", RECENT, "gate only"]


def test_show_lists_both_modes_and_marks_the_pick_of_each(cache_dir, capsys):
    graph = _core.TUNING_RECORD_GRAPH_MODE
    _store([("torch.matmul.cpu", 12.5, "", 0, 0.0), ("cpu.openblas.gemm", 20.0, "", 0, 0.0),
            ("torch.matmul.cpu", 9.0, "", graph, 0.0), ("cpu.openblas.gemm", 4.0, "", graph, 0.0)])
    status, output = _kabi(capsys, "cache", "show", "--op", "matmul")
    assert status == 0
    assert [row[:4] for row in _rows(output, "torch.matmul.cpu")] == [["*", "torch.matmul.cpu", "eager", "12.50 us"],
                                                                     ["", "torch.matmul.cpu", "graph", "9.00 us"]]
    assert [row[:4] for row in _rows(output, "cpu.openblas.gemm")] == [["", "cpu.openblas.gemm", "eager", "20.00 us"],
                                                                      ["*", "cpu.openblas.gemm", "graph", "4.00 us"]]


@pytest.mark.parametrize(
    ("age_s", "text"),
    [(0, "0 s"), (59, "59 s"), (60, "1 min"), (3 * 60 + 5, "3 min"), (2 * 3600, "2 h"), (2 * 86400 + 7, "2 d")],
)
def test_ages_are_shown_in_their_largest_whole_unit(age_s, text):
    now = 1_800_000_000.0
    assert _age(int(now - age_s), now) == text
    assert _age(0, now) == "?"


@pytest.mark.parametrize(
    "key",
    [
        "float32|contiguous,contiguous|1|64|16|32",
        "float32|contiguous,col_strided|3|64|16|32",
        "float64|row_strided,general|1|8|5|7",
        "bfloat16|col_strided,row_strided|6|4096|3|9",
        "float16|general,contiguous|2|8192|4|4",  # M above the bucketing cap is kept exact
        "float32|contiguous,contiguous|1|1|1024|1024",
    ],
)
def test_representative_problems_describe_to_the_same_problem_key(key):
    inputs, attributes = representative_problem("matmul", key, torch.device("cpu"))
    assert attributes == {}
    assert _core.describe("matmul", [descriptor(tensor) for tensor in inputs])["key"] == key


@pytest.mark.parametrize(
    "key",
    [
        "float32|contiguous,contiguous,contiguous|16|6|8|gelu",
        "float64|contiguous,col_strided,absent|1|24|40|none",
        "float32|row_strided,contiguous,absent|64|32|16|silu",
    ],
)
def test_a_linear_problem_is_rebuilt_with_its_absent_bias_and_its_activation(key):
    inputs, attributes = representative_problem("linear", key, torch.device("cpu"))
    assert attributes == {"activation": key.rsplit("|", 1)[1]}
    assert (inputs[2] is None) == key.split("|")[1].endswith("absent")
    described = _core.describe("linear", [descriptor(t) if t is not None else None for t in inputs],
                               attributes=[attributes["activation"]])
    assert described["key"] == key


GATHER_OP = "test_retune_gather"


@pytest.mark.parametrize(
    "key", ["float64,int32|contiguous,contiguous,contiguous|9|5", "float32,int64|contiguous,general,absent|4|3"]
)
def test_a_problem_of_several_type_variables_and_a_concrete_dtype_is_rebuilt(key):
    if GATHER_OP not in _core.op_list():
        _core.register_op(GATHER_OP, "x: [N] T, index: [M] I, weight?: [M] float32 -> out: [M] T",
                          "T: float32, float64; I: int32, int64", "dtype,layout,N,M")
    inputs, _ = representative_problem(GATHER_OP, key, torch.device("cpu"))
    dtypes = key.split("|")[0].split(",")
    assert [str(t.dtype) for t in inputs[:2]] == [f"torch.{dtype}" for dtype in dtypes]
    assert inputs[2] is None or inputs[2].dtype == torch.float32
    described = _core.describe(GATHER_OP, [descriptor(t) if t is not None else None for t in inputs])
    assert described["key"] == key


def test_retune_measures_linear_problems_again_with_their_attributes(cache_dir):
    x, w = torch.randn(16, 8), torch.randn(6, 8)
    with kabi.tuning("first-call", warmup=1, repeat=2, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
        kabi.ops.linear(x, w, activation="silu")
    [problem] = {record.problem for record in kabi.cache.show("linear")}
    result = kabi.cache.retune("linear", older_than_s=0, settings=QUICK)
    assert not result.skipped
    [report] = result.reports
    assert report.problem == problem and report.pick is not None


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("float32|contiguous,contiguous|1|64|16", "has 5 fields; its tuning key .* has 6"),
        ("float32|contiguous|1|64|16|32", "layout names 1 inputs, the op has 2"),
        ("float32|contiguous,contiguous|1|sixty|16|32", "M must be a non-negative integer, got 'sixty'"),
        ("float12|contiguous,contiguous|1|64|16|32", "unknown dtype 'float12'"),
        ("float32,float64|contiguous,contiguous|1|64|16|32", "dtype names 2 type variables, the op has 1"),
        ("float32|row_strided,contiguous|1|1|16|32", "no representative inputs found"),
    ],
)
def test_a_key_that_cannot_be_rebuilt_is_named(key, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        representative_problem("matmul", key, torch.device("cpu"))


def _problem_records():
    found = {}
    for record in kabi.cache.show("matmul"):
        found.setdefault(record.problem, {})[record.kernel] = record
    return found


def test_retune_selects_noisy_and_old_problems_and_measures_them_again(cache_dir):
    # Stored, not measured: a measurement on a loaded machine may itself come out noisy.
    _store([("torch.matmul.cpu", 9.0, "", 0, 0.02), ("cpu.openblas.gemm", 5.0, "", 0, 0.01)], m=16, n=6, k=8)
    _store([("torch.matmul.cpu", 7000.0, "", 0, 0.9), ("cpu.openblas.gemm", 5.0, "", 0, 0.01)], m=32)
    [clean_key, noisy_key] = sorted(_problem_records(), key=lambda key: key.split("|")[3])
    assert kabi.cache.retune(older_than_s=3600, settings=QUICK) == kabi.cache.Retuned((), ())

    result = kabi.cache.retune(noisy=True, settings=TuningSettings(**{**QUICK.__dict__, "max_spread": 0.5}))
    assert [report.problem for report in result.reports] == [noisy_key] and result.skipped == ()
    remeasured = _problem_records()[noisy_key]["torch.matmul.cpu"]
    assert remeasured.time_us < 7000.0 and remeasured.spread != 0.9

    time.sleep(1.1)
    result = kabi.cache.retune("matmul", older_than_s=1, settings=QUICK)
    assert sorted(report.problem for report in result.reports) == [clean_key, noisy_key]


def _v1_line(device, problem, kernel, time_us):
    body = "\t".join(["v1", device, "matmul", problem, kernel, "fingerprint", time_us, ""])
    return f"{body}\t{zlib.crc32(body.encode()):08x}\n"


def test_retune_skips_problems_of_another_device_and_says_why(cache_dir, tmp_path, capsys):
    exported = tmp_path / "other-machine.log"
    exported.write_text(_v1_line("cuda|NVIDIA H200|sm_90|abi1", "float32|contiguous,contiguous|1|8|6|4",
                                 "torch.matmul.cuda", "3.5"))
    kabi.cache.import_(exported)
    [skipped] = kabi.cache.retune(settings=QUICK).skipped
    assert skipped.device.startswith("cuda|NVIDIA H200") and "device this machine does not have" in skipped.reason
    status, output = _kabi(capsys, "cache", "retune", "--older-than", "30m")
    assert status == 0 and "skipped matmul float32|contiguous,contiguous|1|8|6|4" in output
    assert "nothing retuned" in output


def test_cache_retune_prints_the_new_table(cache_dir, capsys, monkeypatch):
    monkeypatch.setenv("KABI_TUNE_MAX_SPREAD", "0.5")
    monkeypatch.setenv("KABI_TUNE_REPEAT", "2")
    monkeypatch.setenv("KABI_TUNE_MIN_TIME_S", "0")
    _store([("torch.matmul.cpu", 7000.0, "", 0, 0.9), ("cpu.openblas.gemm", 5.0, "", 0, 0.01)])
    status, output = _kabi(capsys, "cache", "retune", "--noisy", "--op", "matmul")
    assert status == 0 and "retuned 1 problems" in output
    assert "matmul float32|contiguous,contiguous|1|8|6|4" in output and "7000.00 us" not in output
    status, output = _kabi(capsys, "cache", "retune", "--older-than", "1h")
    assert status == 0 and "nothing to retune" in output


@pytest.mark.parametrize("duration", ["7", "x1d", "-3h", "12y"])
def test_a_bad_duration_is_named(duration, capsys):
    with pytest.raises(SystemExit):
        cli.main(["cache", "retune", f"--older-than={duration}"])
    assert "--older-than: expected a duration such as 90s, 30m, 12h or 7d" in capsys.readouterr().err


def test_retune_checks_its_arguments(cache_dir):
    with pytest.raises(kabi.ArgumentTypeError, match="noisy must be True or False"):
        kabi.cache.retune(noisy="yes")
    with pytest.raises(kabi.InvalidArgumentError, match="older_than_s must be a number of seconds >= 0"):
        kabi.cache.retune(older_than_s=-1)
