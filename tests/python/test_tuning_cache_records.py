"""What a tuning record carries (ABI 1.2): gate-only verdicts, memory-only records, the timing's spread and when it
was recorded; and records of the older v1 format, which are still read."""

import math
import os
import time
import zlib

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.tensors import descriptor

GATE_ONLY = _core.TUNING_RECORD_GATE_ONLY
MEMORY_ONLY = _core.TUNING_RECORD_MEMORY_ONLY


def _store(records, shape=(8, 6, 4)):
    m, n, k = shape
    inputs = [descriptor(torch.empty(m, k)), descriptor(torch.empty(k, n))]
    _core.tuning_store("matmul", inputs, [], records)


def _by_kernel():
    return {record.kernel: record for record in kabi.cache.show("matmul")}


def test_records_keep_flags_spread_and_their_time(cache_dir):
    before = int(time.time())
    _store([("torch.matmul.cpu", 12.5, "", 0, 0.031), ("cpu.openblas.gemm", 0.0, "", GATE_ONLY, 0.0)])
    records = _by_kernel()
    timed, verdict = records["torch.matmul.cpu"], records["cpu.openblas.gemm"]
    assert (timed.time_us, timed.spread, timed.gate_only, timed.memory_only) == (12.5, 0.031, False, False)
    assert verdict.gate_only and not verdict.memory_only
    assert before <= timed.recorded_at <= int(time.time()) + 1
    kabi.cache.reload()
    assert _by_kernel() == records


def test_a_memory_only_record_stays_in_this_process(cache_dir, tmp_path):
    _store([("torch.matmul.cpu", 99.0, "", MEMORY_ONLY, 0.8)])
    assert _by_kernel()["torch.matmul.cpu"].memory_only
    log = cache_dir / "tuning-v4.log"
    assert not log.exists() or "torch.matmul.cpu" not in log.read_text()
    kabi.cache.reload()
    assert _by_kernel()["torch.matmul.cpu"].time_us == 99.0
    exported = tmp_path / "export.log"
    assert kabi.cache.export(exported) == 0 and exported.read_text() == ""


def test_a_later_persistent_record_replaces_a_memory_only_one(cache_dir):
    _store([("torch.matmul.cpu", 99.0, "", MEMORY_ONLY, 0.8)])
    _store([("torch.matmul.cpu", 11.0, "", 0, 0.01)])
    record = _by_kernel()["torch.matmul.cpu"]
    assert (record.time_us, record.memory_only) == (11.0, False)
    assert "torch.matmul.cpu" in (cache_dir / "tuning-v4.log").read_text()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (("torch.matmul.cpu", math.inf, "failed", GATE_ONLY, 0.0), r"gate-only verdict \(passed\) with time_us infinity"),
        (("torch.matmul.cpu", 1.0, "", 1 << 7, 0.0), "unknown flags 128"),
        (("torch.matmul.cpu", 1.0, "", 0, -0.5), "spread"),
        (("torch.matmul.cpu", 1.0, "", 0, math.nan), "spread"),
    ],
)
def test_inconsistent_records_are_refused(cache_dir, record, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        _store([record])
    assert kabi.cache.show("matmul") == []


def _v1_line(device, problem, kernel, fingerprint, time_us, note=""):
    body = "\t".join(["v1", device, "matmul", problem, kernel, fingerprint, time_us, note])
    return f"{body}\t{zlib.crc32(body.encode()):08x}\n"


def test_the_v1_log_of_an_older_kabi_is_read_and_left_as_it_was(cache_dir):
    _store([("torch.matmul.cpu", 5.0, "", 0, 0.0)])
    [written] = kabi.cache.show("matmul")
    legacy = cache_dir / "tuning-v1.log"
    text = _v1_line(written.device, written.problem, "cpu.openblas.gemm", "old-fingerprint", "7.25")
    legacy.write_text(text)
    kabi.cache.reload()
    records = _by_kernel()
    assert records["cpu.openblas.gemm"].time_us == 7.25 and records["cpu.openblas.gemm"].recorded_at == 0
    assert records["torch.matmul.cpu"].time_us == 5.0
    assert legacy.read_text() == text
    kabi.cache.clear()
    assert kabi.cache.show() == [] and legacy.read_text() == ""


def test_an_export_of_the_v1_format_imports(cache_dir, tmp_path):
    exported = tmp_path / "old-export.log"
    exported.write_text(_v1_line("cpu|test", "float32|x", "torch.matmul.cpu", "fp", "inf", "wrong result"))
    assert kabi.cache.import_(exported) == 1
    [record] = kabi.cache.show("matmul")
    assert math.isinf(record.time_us) and record.note == "wrong result" and not record.gate_only


def test_the_default_directory_follows_the_environment_not_set_directory(cache_dir, tmp_path, monkeypatch):
    """Compiled kernel images live under the default directory: a throwaway tuning cache (kabi bench's) keeps it."""
    assert _core.cache_default_directory() == os.environ["KABI_CACHE_DIR"]
    kabi.cache.set_directory(tmp_path / "elsewhere")
    try:
        assert _core.cache_directory() == str(tmp_path / "elsewhere")
        assert _core.cache_default_directory() == os.environ["KABI_CACHE_DIR"]
    finally:
        kabi.cache.set_directory(None)
    monkeypatch.delenv("KABI_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _core.cache_default_directory() == str(tmp_path / "xdg" / "kabi")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    with pytest.raises(kabi.NotFoundError, match="set KABI_CACHE_DIR, XDG_CACHE_HOME or HOME"):
        _core.cache_default_directory()
