"""Kernels that name the variant they run per problem (issue 13: the cuBLASLt slot kernels name the algorithm the
heuristic chose), with a test plugin (tests/abi/variant_plugin.c) whose matmul kernel names "tile=8 revision=R",
R read from KABI_TEST_VARIANT_REVISION at every call: tuning records the variant, ``kabi.explain`` and the cache show
it, export and import carry it, a record of another variant is stale (explained, and the problem is tuned again),
kernels without variants keep their records, and a record written before kabi kept variants still loads.

The plugin's kernel is unregistered when the module's tests end, so that other tests see matmul's usual kernels.
"""

from __future__ import annotations

import zlib

import pytest
import torch

import _cmake
import kabi
from kabi import _core, cli
from kabi._base.tensors import descriptor

VARIANT_KERNEL = "abi_test.variant.matmul"
QUICK_TUNING = {"warmup": 1, "repeat": 2, "min_time_s": 0.0}


@pytest.fixture(scope="module", autouse=True)
def variant_kernel(tmp_path_factory: pytest.TempPathFactory):
    path = _cmake.build_variant_test_plugin(tmp_path_factory.mktemp("variant_plugin"))
    kabi.load_plugin(path)
    yield
    kabi.unregister_kernel("matmul", VARIANT_KERNEL)


@pytest.fixture(autouse=True)
def revision(monkeypatch):
    """``revision(R)``: from now on the plugin's heuristic chooses revision R, as a new process would see it (the
    cache is reloaded, so no decision of this process outlives the change)."""

    def choose(value: int) -> None:
        monkeypatch.setenv("KABI_TEST_VARIANT_REVISION", str(value))
        kabi.cache.reload()

    choose(1)
    return choose


def _inputs(columns: int = 6):
    return torch.randn(8, 4), torch.randn(4, columns)


def _tune(a, b) -> None:
    with kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(a, b)


def _candidates(explanation) -> dict:
    return {candidate.name: candidate for candidate in explanation.candidates}


def _records() -> dict:
    return {record.kernel: record for record in kabi.cache.show("matmul") if record.execution_mode == "eager"}


def test_tuning_records_the_variant_and_explain_shows_it(cache_dir):
    a, b = _inputs()
    before = _candidates(kabi.explain(kabi.ops.matmul, a, b))
    assert before[VARIANT_KERNEL].variant == "tile=8 revision=1", "known before any record"
    assert before[VARIANT_KERNEL].kernel.has_variant and not before["cpu.openblas.gemm"].kernel.has_variant
    _tune(a, b)
    records = _records()
    assert records[VARIANT_KERNEL].variant == "tile=8 revision=1"
    assert records["cpu.openblas.gemm"].variant == "" and records["torch.matmul.cpu"].variant == ""

    explanation = kabi.explain(kabi.ops.matmul, a, b)
    candidates = _candidates(explanation)
    assert candidates[VARIANT_KERNEL].variant == "tile=8 revision=1"
    assert candidates[VARIANT_KERNEL].stale_variant is None
    assert candidates[VARIANT_KERNEL].tuned_time_us is not None
    text = str(explanation).splitlines()
    header = text[3] if text[2].startswith("plan:") else text[2]
    assert header.split()[-2:] == ["variant", "reason"]
    [row] = [line for line in text if line.strip().startswith(VARIANT_KERNEL)]
    assert "tile=8 revision=1" in row
    if explanation.pick == VARIANT_KERNEL:
        assert explanation.pick_variant == "tile=8 revision=1"
        assert text[1].startswith(f"pick: {VARIANT_KERNEL}, variant tile=8 revision=1 (")
    else:
        assert explanation.pick_variant == "" and text[1].startswith(f"pick: {explanation.pick} (")


def test_another_variant_makes_the_record_stale_and_the_problem_is_tuned_again(cache_dir, revision):
    a, b = _inputs()
    _tune(a, b)
    kept = {name: record.recorded_at for name, record in _records().items()}
    revision(2)
    stale = kabi.explain(kabi.ops.matmul, a, b)
    candidate = _candidates(stale)[VARIANT_KERNEL]
    assert (candidate.variant, candidate.stale_variant) == ("tile=8 revision=2", "tile=8 revision=1")
    assert candidate.tuned_time_us is None and candidate.gate == "none" and candidate.eligible
    assert stale.pick_reason != "tuned" and stale.provisional
    assert stale.plan.startswith("will tune: measures ")
    assert VARIANT_KERNEL in stale.plan
    [row] = [line for line in str(stale).splitlines() if line.strip().startswith(VARIANT_KERNEL)]
    assert row.endswith("its tuning record is stale: made for variant tile=8 revision=1, it now runs variant "
                        "tile=8 revision=2")
    # Kernels without variants keep their records: they are not stale.
    for name in ("cpu.openblas.gemm", "torch.matmul.cpu"):
        assert _candidates(stale)[name].stale_variant is None and _candidates(stale)[name].tuned_time_us is not None

    _tune(a, b)
    retuned = kabi.explain(kabi.ops.matmul, a, b)
    assert retuned.pick_reason == "tuned"
    candidate = _candidates(retuned)[VARIANT_KERNEL]
    assert candidate.stale_variant is None and candidate.tuned_time_us is not None
    assert _records()[VARIANT_KERNEL].variant == "tile=8 revision=2"
    assert set(kept) == set(_records())


def test_the_variant_is_per_problem(cache_dir):
    a, b = _inputs(columns=64)
    assert _candidates(kabi.explain(kabi.ops.matmul, a, b))[VARIANT_KERNEL].variant == "tile=64 revision=1"


def test_export_and_import_carry_the_variant(cache_dir, tmp_path):
    _tune(*_inputs())
    exported = tmp_path / "export.log"
    kabi.cache.export(exported)
    assert "\ttile=8 revision=1\t" in exported.read_text()
    kabi.cache.clear()
    kabi.cache.import_(exported)
    assert _records()[VARIANT_KERNEL].variant == "tile=8 revision=1"


def test_cache_show_lists_the_variant(cache_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    _tune(*_inputs())
    assert cli.main(["cache", "show", "--op", "matmul"]) == 0
    output = capsys.readouterr().out
    assert "variant" in output
    [row] = [line for line in output.splitlines() if f" {VARIANT_KERNEL} " in line]
    assert "tile=8 revision=1" in row


def test_a_record_from_before_variants_loads_and_is_stale_only_for_a_kernel_that_names_one(cache_dir):
    a, b = _inputs()
    _tune(a, b)
    records = _records()
    kabi.cache.clear()
    lines = []
    for name in (VARIANT_KERNEL, "torch.matmul.cpu"):
        record = records[name]
        body = "\t".join(["v3", record.device, "matmul", record.problem, name, record.fingerprint, "7.5", "", "0",
                          "0", "1700000000"])
        lines.append(f"{body}\t{zlib.crc32(body.encode()):08x}\n")
    (cache_dir / "tuning-v3.log").write_text("".join(lines))
    kabi.cache.reload()
    assert {name: (record.time_us, record.variant) for name, record in _records().items()} == {
        VARIANT_KERNEL: (7.5, ""), "torch.matmul.cpu": (7.5, "")}
    candidates = _candidates(kabi.explain(kabi.ops.matmul, a, b))
    assert candidates[VARIANT_KERNEL].stale_variant == "" and candidates[VARIANT_KERNEL].tuned_time_us is None
    assert candidates["torch.matmul.cpu"].stale_variant is None and candidates["torch.matmul.cpu"].tuned_time_us == 7.5
    row = next(line for line in str(kabi.explain(kabi.ops.matmul, a, b)).splitlines()
               if line.strip().startswith(VARIANT_KERNEL))
    assert row.endswith("its tuning record is stale: made for no named variant, it now runs variant tile=8 revision=1")


def test_a_c_caller_sees_the_same_variants(cache_dir, revision):
    """The core decides staleness, so kabi_select (here through the binding's select) agrees with Python."""
    a, b = _inputs()
    _tune(a, b)
    descriptors = [descriptor(a), descriptor(b)]
    selected = {candidate["name"]: candidate for candidate in _core.select("matmul", descriptors)["candidates"]}
    assert (selected[VARIANT_KERNEL]["variant"], selected[VARIANT_KERNEL]["stale_variant"]) == (
        "tile=8 revision=1", None)
    revision(3)
    selected = {candidate["name"]: candidate for candidate in
                _core.select("matmul", descriptors, allow_none=True)["candidates"]}
    assert (selected[VARIANT_KERNEL]["variant"], selected[VARIANT_KERNEL]["stale_variant"]) == (
        "tile=8 revision=3", "tile=8 revision=1")
    assert selected[VARIANT_KERNEL]["tuned_time_us"] is None and selected[VARIANT_KERNEL]["gate"] == "none"
