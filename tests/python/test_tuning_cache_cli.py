"""`kabi tune` and `kabi cache`, and the `kabi.cache` Python API behind them."""

import math

import pytest
import torch

import kabi
from kabi import cli

QUICK = ["--warmup", "1", "--repeat", "2", "--min-time-s", "0"]
BUILT_IN = {"torch.matmul.cpu", "cpu.openblas.gemm"}


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps at the terminal width; keep each message on one line


@pytest.fixture(autouse=True)
def every_measurement_persisted(monkeypatch):
    # The record counts below must not depend on this machine's load (tests/python/test_measure.py covers noise).
    monkeypatch.setenv("KABI_TUNE_MAX_SPREAD", "inf")


def _kabi(capsys, *arguments):
    status = cli.main(list(arguments))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _problems():
    found = {}
    for record in kabi.cache.show("matmul"):
        found.setdefault(record.problem, {})[record.kernel] = record
    return found


def test_tune_shapes_prints_a_table_per_shape_and_records_every_candidate(cache_dir, capsys):
    status, output = _kabi(capsys, "tune", "matmul", "--shape", "32x24x16", "--shape", "2x8x8x8", *QUICK)
    assert status == 0
    assert "M=32,N=24,K=16 float32 on cpu" in output and "batch=2,M=8,N=8,K=8 float32 on cpu" in output
    assert output.count("pick:") == 2 and all(name in output for name in BUILT_IN)
    problems = _problems()
    assert len(problems) == 2
    for records in problems.values():
        assert BUILT_IN <= set(records) and all(math.isfinite(r.time_us) for r in records.values())


def test_tune_a_suite_tunes_each_of_its_shapes(cache_dir, capsys):
    status, output = _kabi(capsys, "tune", "matmul", "--suite", "smoke", *QUICK)
    assert status == 0
    suite = kabi._base.declarations.op_spec("matmul").suites["smoke"]
    assert output.count("pick:") == len(suite.shapes) * len(suite.dtypes)
    assert len(_problems()) == len(suite.shapes)


def _wrong_kernel(a, b, out=None):
    return torch.matmul(a, b) + 1.0


def test_tune_shows_why_a_candidate_was_rejected(cache_dir, capsys):
    kabi.register_kernel("matmul", _wrong_kernel, name="test.cli.wrong", dtypes=["float32"])
    try:
        status, output = _kabi(capsys, "tune", "matmul", "--shape", "16x16x16", *QUICK)
    finally:
        kabi.unregister_kernel("matmul", "test.cli.wrong")
    assert status == 0
    assert "rejected: wrong result: norm error" in output
    [records] = _problems().values()
    assert math.isinf(records["test.cli.wrong"].time_us)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--suite", "no-such-suite"], "--suite: matmul has no suite 'no-such-suite'"),
        (["--shape", "8x8x8", "--dtype", "float8_e4m3fn"], "--dtype: matmul is not defined for float8_e4m3fn"),
        (["--shape", "8x8x8", "--repeat", "0"], "tuning repeat must be an integer >= 1"),
        (["--shape", "8x8x8", "--device", "tpu:x"], "--device 'tpu:x' is not a device of this machine"),
    ],
)
def test_tune_names_bad_arguments(capsys, arguments, message):
    assert cli.main(["tune", "matmul", *arguments]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_tune_shows_every_candidate_at_120_columns_without_breaking_a_name(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    name = "test.cli.float64_only_kernel_with_a_long_name"
    kabi.register_kernel("matmul", _wrong_kernel, name=name, dtypes=["float64"])
    try:
        status, output = _kabi(capsys, "tune", "matmul", "--shape", "16x16x16", *QUICK)
        candidates = kabi.explain(kabi.ops.matmul, torch.randn(16, 16), torch.randn(16, 16)).candidates
    finally:
        kabi.unregister_kernel("matmul", name)
    lines = output.splitlines()
    assert status == 0
    assert max(map(len, lines)) <= 120
    lines = [line for line in lines if line.startswith("│")]  # the table's rows
    assert {candidate.name for candidate in candidates} >= BUILT_IN | {name}
    for candidate in candidates:
        [row] = [line for line in lines if f" {candidate.name} " in line]
        assert candidate.eligible or "rejected:" in row
    [row] = [line for line in lines if f" {name} " in line]
    assert "rejected: dtype" in row


def test_tune_rejects_a_malformed_shape(capsys):
    assert cli.main(["tune", "matmul", "--shape", "8x8"]) == 2
    assert "--shape '8x8': expected 3 positive sizes [M, N, K]" in capsys.readouterr().err


def test_cache_show_export_clear_import_round_trip(cache_dir, capsys, tmp_path):
    _kabi(capsys, "tune", "matmul", "--shape", "12x10x8", *QUICK)
    before = kabi.cache.show()
    status, output = _kabi(capsys, "cache", "show", "--op", "matmul")
    assert status == 0 and "tuning cache" in output and "2 records" in output
    assert all(name in output for name in BUILT_IN)

    exported = tmp_path / "exported.log"
    status, output = _kabi(capsys, "cache", "export", str(exported))
    assert status == 0 and "exported 2 records" in output and exported.stat().st_size > 0

    status, output = _kabi(capsys, "cache", "clear")
    assert status == 0 and "cleared 2 records" in output
    assert kabi.cache.show() == [] and "no records" in _kabi(capsys, "cache", "show")[1]

    status, output = _kabi(capsys, "cache", "import", str(exported))
    assert status == 0 and "imported 2 records" in output
    assert kabi.cache.show() == before
    assert kabi.explain(kabi.ops.matmul, torch.randn(12, 8), torch.randn(8, 10)).pick_reason == "tuned"


def test_cache_import_refuses_missing_and_foreign_files(cache_dir, capsys, tmp_path):
    status, output = _kabi(capsys, "cache", "import", str(tmp_path / "missing.log"))
    assert status == 2 and "does not exist" in output
    foreign = tmp_path / "foreign.log"
    foreign.write_text("this is not a tuning record\n")
    status, output = _kabi(capsys, "cache", "import", str(foreign))
    assert status == 2 and "foreign.log:1: not a tuning record" in output
    assert kabi.cache.stats().records == 0


def test_cache_api_filters_counts_and_checks_its_arguments(cache_dir):
    assert kabi.cache.directory() == cache_dir
    settings = kabi._selection.tuning_policy.TuningSettings(repeat=2, min_time_s=0)
    kabi.tune(kabi.ops.matmul, torch.empty(6, 5), torch.empty(5, 4), settings=settings)
    stats = kabi.cache.stats()
    assert (stats.records, stats.corrupt_records, stats.path) == (len(kabi.cache.show()), 0, cache_dir)
    assert kabi.cache.show("no-such-op") == []
    assert {record.op for record in kabi.cache.show("matmul")} == {"matmul"}
    with pytest.raises(TypeError, match="path must be a non-empty path"):
        kabi.cache.export("")
    with pytest.raises(TypeError, match="op must be an op name"):
        kabi.cache.show(op=3)
