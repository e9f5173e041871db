"""Serial split-K (``store_split_k_tile``): the split-K configs of the small-M and decode families add their K slices
in the same launch. In Triton's CPU interpreter every split config, float16 and float32, against a float64
reference on the edge cases, twice on the same scratch and counters (the counters left zero, the result bit for bit
the same); their sm_80 and sm_90 binaries declare the scratch and zeroed scratch that needs, the grid of one program
per (tile of N, K slice, tile of M), and the shared memory the config estimates; and their SASS counts in with a gpu
scope atomic after a barrier and reads the other slices' parts from L2. What runs on a GPU is in
test_triton_native_gpu.py."""

import re

import pytest
from _interpreter_runs import MATMUL_TOLERANCES, run_interpreter_worker

triton = pytest.importorskip("triton")

from kabi.backends.triton import compile_to_binary, read_manifest  # noqa: E402
from kabi.backends.triton._families import FAMILIES  # noqa: E402
from kabi.backends.triton._native import binary_variants  # noqa: E402
from _cubins import CUOBJDUMP, sass  # noqa: E402
_SPLIT_CONFIGS = {(family, config.tag) for family in ("small_m", "decode")
                  for config in FAMILIES[family].configs if config.split_k > 1}


# --- in the interpreter ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    return run_interpreter_worker("split_k_interpreter_worker.py")


def test_every_split_config_ran_in_both_dtypes(interpreter_run):
    for dtype in ("float16", "float32"):
        ran = {(record["family"], record["config"]) for record in interpreter_run["records"]
               if record["dtype"] == dtype}
        assert ran == _SPLIT_CONFIGS, f"{dtype}: never run: {sorted(_SPLIT_CONFIGS - ran)}"


def test_every_split_config_matches_the_reference_twice_and_leaves_its_counters_zero(interpreter_run):
    failures = []
    for record in interpreter_run["records"]:
        where = (f"{record['family']} {record['config']} {record['dtype']} {record['m']}x{record['n']}x{record['k']}"
                 f"{' b column-major' if record['b_column_major'] else ''}")
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
            continue
        tolerance = MATMUL_TOLERANCES[record["dtype"]]
        for launch, (norm, extreme) in enumerate(record["errors"], start=1):
            if norm > tolerance["norm"] or extreme > tolerance["extreme"]:
                failures.append(f"{where}: launch {launch}: relative error norm {norm:.2e}, extreme {extreme:.2e}")
        if record["counters_zero"] != [True, True]:
            failures.append(f"{where}: counters zero after each launch: {record['counters_zero']}")
        if not record["same_bits"]:
            failures.append(f"{where}: the second launch's result differs from the first's")
    assert not failures, "\n".join(failures)


def test_split_cases_cover_the_edges(interpreter_run):
    records = interpreter_run["records"]
    for family in ("small_m", "decode"):
        mine = [record for record in records if record["family"] == family]
        assert any(record["m"] == 1 for record in mine)
        assert any(record["m"] > 1 and record["m"] & (record["m"] - 1) for record in mine), "M not a power of two"
        assert {record["b_column_major"] for record in mine} == {True, False}
        assert all(record["n"] % 2 and record["k"] % 16 for record in mine), "odd N, K a multiple of no BLOCK_K"


# --- compiled for the GPU, without one ------------------------------------------------------------------------

def _split_variants(arch: int) -> list:
    """One bfloat16 binary of each split config (its first layout and row count; test_triton_decode.py checks the
    shared memory of every decode binary)."""
    chosen = {}
    for variant in binary_variants(arch, ["decode", "small_m"], ["bfloat16"]):
        if variant.config.split_k > 1:
            chosen.setdefault((variant.family, variant.config.tag), variant)
    return list(chosen.values())


@pytest.fixture(scope="module")
def split_binaries(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("split_binaries")
    return {(arch, variant.name(arch)): (variant, compile_to_binary(variant.family, variant.config, "bfloat16", arch,
                                                                    directory, layout=variant.layout,
                                                                    rows=variant.rows))
            for arch in (80, 90) for variant in _split_variants(arch)}


@pytest.mark.parametrize("arch", [80, 90])
def test_split_binaries_declare_their_scratch_counters_and_grid(split_binaries, arch):
    binaries = [binary for (binary_arch, _), binary in split_binaries.items() if binary_arch == arch]
    assert {(variant.family, variant.config.tag) for variant, _ in binaries} == _SPLIT_CONFIGS
    for variant, path in binaries:
        manifest = read_manifest(path)
        config = variant.config
        rows = variant.rows or config.block_m
        # a, b, c, then the float32 partial tile of each program and a 4-byte share of the tiles' counters.
        assert [param.text() for param in manifest.params[3:5]] == [
            f"scratch value={4 * rows * config.block_n}", "zeroed_scratch value=4"], manifest.name
        assert manifest.format_line == "kabi-manifest 3", manifest.name
        assert manifest.grid == (f"cdiv(N, {config.block_n})", str(config.split_k), f"cdiv(M, {rows})")
        if variant.family == "decode":
            assert manifest.shared_memory_bytes == config.shared_memory_bytes(rows, 2, arch), manifest.name


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="the Triton wheel has no cuobjdump to read the SASS with")
@pytest.mark.parametrize("arch", [80, 90])
def test_split_binaries_count_in_after_a_barrier_and_read_the_parts_from_l2(split_binaries, arch):
    for (binary_arch, name), (variant, path) in split_binaries.items():
        if binary_arch != arch:
            continue
        cubin = path.parent / read_manifest(path).image
        listing = sass(cubin)
        # The release: a GPU-wide fence before the atomic; the acquire: L1 invalidated after it; the barrier orders
        # every thread's part before the one thread's atomic; the finisher's loads of the parts are .cg (STRONG.GPU).
        assert re.search(r"MEMBAR\.[A-Z.]*GPU", listing), name
        assert re.search(r"ATOMG\.E\.ADD\.STRONG\.GPU", listing), name
        assert "BAR.SYNC" in listing, name
        assert re.search(r"LDG\.E(\.128)?\.STRONG\.GPU", listing), name
