"""The decode family (M <= 64, weight streamed once): configs and their constraints, every kernel against the float64
reference in Triton's CPU interpreter, sm_80/sm_90 builds with wide weight loads, and (GPU) bfloat16, CUDA graphs
and the nn.Linear weight read in place."""

import re
from types import SimpleNamespace

import pytest
from _interpreter_runs import MATMUL_TOLERANCES, matmul_record_failures, run_interpreter_worker

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from kabi.backends.triton import compile_all  # noqa: E402
from kabi.backends.triton._decode_configs import DECODE_CONFIGS, DecodeConfig, decode_unsupported_reason
from kabi.backends.triton._families import FAMILIES, MatmulProblem, device_facts  # noqa: E402
from kabi.backends.triton._registration import _Supports  # noqa: E402
from _cubins import CUOBJDUMP, sass  # noqa: E402


def _fits(config, m, n=4096, k=4096, n_by_k=True, arch=90, element_size=2) -> bool:
    return not decode_unsupported_reason(config, m, n, k, element_size, arch, n_by_k)


# --- configs and constraints (no kernel runs) -----------------------------------------------------------------


def test_configs_are_unique_values_covering_both_styles_and_layouts():
    assert len({config.tag for config in DECODE_CONFIGS}) == len(DECODE_CONFIGS)
    assert {(config.style, config.weight_layout) for config in DECODE_CONFIGS} == {
        ("gemv", "n_by_k"), ("gemv", "k_by_n"), ("dot", "n_by_k"), ("dot", "k_by_n")}
    assert any(config.split_k > 1 for config in DECODE_CONFIGS)
    config = DecodeConfig("dot", "k_by_n", block_n=64, block_k=128, num_warps=4, num_stages=3, split_k=4)
    assert config == DecodeConfig("dot", "k_by_n", 64, 128, 4, 3, 4) and config.tag == "dot_kn_bn64_bk128_w4_s3_sk4"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(style="gemm"), "style must be one of"),
        (dict(weight_layout="row_major"), "weight_layout must be one of"),
        (dict(style="dot", block_n=8), "block_n must be a power of two >= 16"),
        (dict(block_k=96), "block_k must be a power of two"),
        (dict(block_n=64, block_k=1024), "gemv accumulator needs 512 floats per thread"),
        (dict(num_warps=3), "num_warps must be one of"),
        (dict(split_k=0), "split_k must be >= 1"),
    ],
)
def test_bad_configs_are_refused(fields, message):
    arguments = dict(style="gemv", weight_layout="n_by_k", block_n=8, block_k=512, num_warps=4, num_stages=1)
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**(arguments | fields))


def test_each_config_takes_its_own_weight_layout_and_m_range():
    for config in DECODE_CONFIGS:
        n_by_k = config.weight_layout == "n_by_k"
        assert _fits(config, 1, n_by_k=n_by_k) and not _fits(config, 1, n_by_k=not n_by_k)
        assert _fits(config, 16, n_by_k=n_by_k) == (config.style == "dot")
        # The deep dot pipelines sized for M <= 16 do not fit 64 rows of a in shared memory; the others take M = 64.
        reason = decode_unsupported_reason(config, 64, 4096, 4096, 2, 90, n_by_k)
        assert not reason or (config.style == "gemv" and "one row" in reason) or "shared memory" in reason
        assert not _fits(config, 65, n_by_k=n_by_k)
    for layout in ("n_by_k", "k_by_n"):
        assert any(_fits(config, 64, n_by_k=layout == "n_by_k") for config in DECODE_CONFIGS
                   if config.weight_layout == layout)
    gemv = DECODE_CONFIGS[0]
    assert "one row" in decode_unsupported_reason(gemv, 2, 4096, 4096, 2, 90, True)
    assert "nn.Linear weight" in decode_unsupported_reason(gemv, 1, 4096, 4096, 2, 90, False)
    for split in (config for config in DECODE_CONFIGS if config.split_k > 1):
        n_by_k = split.weight_layout == "n_by_k"
        # Every slice gets two K blocks at least.
        too_short = (2 * split.split_k - 1) * split.block_k
        assert f"too few for split_k={split.split_k}" in decode_unsupported_reason(split, 1, 4096, too_short, 2, 90,
                                                                                   n_by_k)
        assert _fits(split, 1, k=too_short + 1, n_by_k=n_by_k)


def test_dot_tiles_follow_m_and_fit_the_arch_shared_memory():
    dot = next(config for config in DECODE_CONFIGS if config.style == "dot" and config.num_stages == 4)
    assert [dot.rows_per_program(m) for m in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    assert DECODE_CONFIGS[0].rows_per_program(1) == 1
    big = DecodeConfig("dot", "n_by_k", block_n=32, block_k=256, num_warps=4, num_stages=4)
    assert _fits(big, 64, arch=90) and not _fits(big, 64, arch=86)
    assert "shared memory" in decode_unsupported_reason(big, 64, 4096, 4096, 2, 86, True)


def test_supports_reads_the_weight_layout_from_the_problem():
    family = FAMILIES["decode"]

    def problem(m, b_layout):
        return SimpleNamespace(dims={"M": m, "K": 4096, "N": 4096}, dtype="bfloat16",
                               layouts=("contiguous", b_layout), device_type=1, device_index=0)

    for config in family.configs:
        linear = config.weight_layout == "n_by_k"
        # a @ w.T with w an nn.Linear weight [N, K]: b is a column-strided view.
        assert (_Supports(family, config)(problem(1, "col_strided")) is True) == linear
        assert (_Supports(family, config)(problem(1, "contiguous")) is True) == (not linear)
        assert "keeps all of M" in _Supports(family, config)(problem(65, "col_strided" if linear else "contiguous"))


def test_decode_kernels_come_first_among_untuned_decode_candidates():
    # Registration gives each config the family's priority less its rank; every decode config must stay above
    # every small-M config, so a call with no tuning record starts from a kernel built for decode.
    decode, small_m = FAMILIES["decode"], FAMILIES["small_m"]
    assert decode.priority - (len(decode.configs) - 1) > small_m.priority


def test_compile_all_builds_a_binary_per_config_and_row_count(tmp_path):
    from kabi.backends.triton import read_manifest

    paths = compile_all(80, tmp_path, dtypes=["float16"], layouts=("row_major", "row_column"), families=["decode"])
    built = sorted(read_manifest(path).name for path in paths)
    expected = sorted(
        f"triton.matmul.decode.{config.tag}.m{rows}.{'row_column' if config.weight_layout == 'n_by_k' else 'row_major'}"
        f".float16.sm80"
        for config in DECODE_CONFIGS
        for rows in ((1,) if config.style == "gemv" else (16, 32, 64))
        # Row counts whose pipelined tiles overflow sm_80's shared memory get no binary.
        if config.shared_memory_bytes(rows, 2, 80) <= 163 * 1024)
    assert built == expected


# --- every kernel in the interpreter --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    return run_interpreter_worker("decode_interpreter_worker.py")


def test_every_decode_kernel_ran_in_both_dtypes(interpreter_run):
    registered = set(interpreter_run["registered"])
    assert len(registered) == len(DECODE_CONFIGS)
    for dtype in ("float16", "float32"):
        ran = {record["kernel"] for record in interpreter_run["records"] if record["dtype"] == dtype}
        assert ran == registered, f"{dtype}: registered but never run: {sorted(registered - ran)}"


def test_every_decode_kernel_matches_the_reference(interpreter_run):
    def out_path_failure(record: dict, tolerance: dict) -> str | None:
        if "out_norm" in record and not (record["out_norm"] <= tolerance["norm"] and record["out_returned"]
                                         and record["out_untouched_elsewhere"]):
            return f"out= into a strided view wrong: {record}"
        return None

    failures = matmul_record_failures(interpreter_run["records"], out_path_failure)
    assert not failures, "\n".join(failures)


def test_decode_cases_cover_the_edges(interpreter_run):
    records = interpreter_run["records"]
    for style in ("gemv", "dot"):
        for layout in ("n_by_k", "k_by_n"):
            assert any(r["m"] == 1 and r["style"] == style and r["weight_layout"] == layout for r in records)
    assert any(r["m"] & (r["m"] - 1) and r["style"] == "dot" for r in records), "M not a power of two"
    assert all(r["n"] % 2 for r in records if r["m"] == 1), "odd N at M = 1"
    assert all(r["k"] % 16 for r in records), "K a multiple of 16 (and so of some BLOCK_K)"
    assert any(r["split_k"] > 1 for r in records)
    assert sum("out_norm" in r for r in records) == 2 * len(DECODE_CONFIGS)


# --- builds for the GPU, without one --------------------------------------------------------------------------

_PARAMETERS = ("a_ptr", "b_ptr", "c_ptr", "partial_ptr", "counter_ptr", "M", "N", "K", "stride_am", "stride_ak",
               "stride_bk", "stride_bn", "stride_cm", "stride_cn")
_SPLIT_K_POINTERS = {"partial_ptr": "*fp32", "counter_ptr": "*i32"}


def _jit_like_source(config: DecodeConfig, dtype: str, m: int):
    """The kernel specialized as Triton's JIT specializes it for a dense activation, output and weight: unit strides
    folded in as constants, 16-byte aligned pointers, sizes and pitches divisible by 16 (M = 1 a constant too), and
    the split-K buffers None without a split."""
    from triton.compiler import ASTSource

    n_by_k = config.weight_layout == "n_by_k"
    unit = {"stride_ak", "stride_cn", "stride_bk" if n_by_k else "stride_bn"}
    signature, constexprs, attrs = {}, {}, {}
    for position, name in enumerate(_PARAMETERS):
        if name in _SPLIT_K_POINTERS and config.split_k == 1:
            signature[name] = "constexpr"
            constexprs[name] = None
            continue
        if name.endswith("_ptr"):
            signature[name] = _SPLIT_K_POINTERS.get(name, f"*{dtype}")
        elif name in unit or (name == "M" and m == 1):
            signature[name] = "constexpr"
            constexprs[name] = 1
            continue
        else:
            signature[name] = "i32"
        if name != "M":
            attrs[(position,)] = [["tt.divisibility", 16]]
    meta = dict(BLOCK_M=config.rows_per_program(m), BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                SPLIT_K=config.split_k, USE_DOT=config.style == "dot", WEIGHT_N_BY_K=n_by_k, INPUT_PRECISION="ieee",
                NUM_STAGES=config.num_stages)
    for name, value in meta.items():
        signature[name] = "constexpr"
        constexprs[name] = value
    return ASTSource(FAMILIES["decode"].kernel, signature, constexprs, attrs)


def _builds():
    """(config, arch, dtype): every config for sm_90 in bfloat16 (its shared memory decides how many programs share
    an SM, which the configs are sized by), and a GEMV and a dot config for sm_80 in float16."""
    builds = [(config, 90, "bf16") for config in DECODE_CONFIGS]
    builds += [(next(config for config in DECODE_CONFIGS if config.style == style and config.split_k == 1), 80, "fp16")
               for style in ("gemv", "dot")]
    return builds


@pytest.mark.parametrize("config, arch, dtype", _builds(),
                         ids=lambda value: value.tag if isinstance(value, DecodeConfig) else str(value))
def test_builds_stream_the_weight_with_16_byte_loads(tmp_path, config, arch, dtype):
    from triton.backends.compiler import GPUTarget

    m = 1 if config.style == "gemv" else 16
    compiled = triton.compile(_jit_like_source(config, dtype, m), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": config.num_warps, "enable_fp_fusion": True})
    assert compiled.metadata.shared <= 227 * 1024
    # A split's last program to finish a tile adds the slices (serial split-K); an unsplit kernel counts nothing.
    assert ("atom.global.gpu.acq_rel.add" in compiled.asm["ptx"]) == (config.split_k > 1)
    if not CUOBJDUMP.exists():
        pytest.skip("the Triton wheel has no cuobjdump to read the SASS with")
    cubin = tmp_path / "decode.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    listing = sass(cubin)
    # Pipelined loops load through cp.async into shared memory (sm_80 adds an L2 prefetch hint, .LTC128B), the
    # others straight into registers; both 16 bytes per thread.
    wide_load = r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128" if config.num_stages > 1 else r"LDG\.E\.128"
    assert re.search(wide_load, listing)
    assert ("HMMA" in listing) == (config.style == "dot")


# --- on a GPU ---------------------------------------------------------------------------------------------------

def _gpu_operands(m, n, k, n_by_k, dtype):
    generator = torch.Generator(device="cuda").manual_seed(m * 131 + n + k)
    a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    if n_by_k:
        weight = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
        return a, weight, weight.t()
    weight = torch.randn(k, n, device="cuda", generator=generator).to(dtype)
    return a, weight, weight


def _assert_close(out, a, b, dtype_name, where):
    reference = a.double() @ b.double()
    difference = out.double() - reference
    norm = (difference.norm() / reference.norm()).item()
    extreme = (difference.abs().max() / reference.abs().max()).item()
    tolerance = MATMUL_TOLERANCES[dtype_name]
    assert norm <= tolerance["norm"] and extreme <= tolerance["extreme"], \
        f"{where}: norm {norm:.2e}, extreme {extreme:.2e}"


# bfloat16, which the interpreter cannot check; test_triton_gpu.py runs every family, this one included, in each
# dtype on its own cases.
@pytest.mark.parametrize("m", [1, 16, 64])
@pytest.mark.parametrize("n_by_k", [True, False], ids=["n_by_k", "k_by_n"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_config_on_the_gpu_in_bfloat16(m, n_by_k):
    family = FAMILIES["decode"]
    arch, _ = device_facts(torch.device("cuda"))
    n, k = 1000, 4104
    a, _, b = _gpu_operands(m, n, k, n_by_k, torch.bfloat16)
    problem = MatmulProblem(m, n, k, a.element_size(), arch, False, n_by_k)
    ran = 0
    for config in family.configs:
        if family.unsupported_reason(config, problem):
            continue
        _assert_close(family.launch(config, a, b), a, b, "bfloat16", config.tag)
        ran += 1
    assert ran > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_linear_weight_is_read_in_place_and_replays_in_a_graph():
    family = FAMILIES["decode"]
    a, weight, b = _gpu_operands(1, 4096, 4096, True, torch.bfloat16)
    for config in (config for config in family.configs if config.weight_layout == "n_by_k"):
        family.launch(config, a, b)  # compile outside the measurement
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = family.launch(config, a, b)
        torch.cuda.synchronize()
        # A copy of the 32 MiB weight would show; the output is kilobytes and split-K's partial tiles at most 1 MiB
        # (4 K slices of 64 tiles of 16 x 64 float32: a dot config's tile keeps 16 rows even at M = 1).
        assert torch.cuda.max_memory_allocated() - before < weight.numel() * weight.element_size() // 16, config.tag
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            replayed = family.launch(config, a, b)
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        _assert_close(replayed, a, b, "bfloat16", f"{config.tag} graph replay")
        assert not torch.equal(out, replayed)


@pytest.mark.parametrize("arch", [80, 90])
def test_the_shared_memory_estimate_is_what_each_binary_takes(tmp_path, arch):
    # The estimate prunes configs before anything compiles, and decides which row counts get a binary: one that
    # fell short (wgmma's extra stage at 64 rows on sm_90) produced binaries that failed to launch.
    from kabi.backends.triton import compile_to_binary, read_manifest
    from kabi.backends.triton._configs import shared_memory_limit
    from kabi.backends.triton._native import binary_variants

    variants = [variant for variant in binary_variants(arch, ["decode"], ["bfloat16"])]
    assert variants
    for variant in variants:
        manifest = read_manifest(compile_to_binary("decode", variant.config, "bfloat16", arch, tmp_path,
                                                   layout=variant.layout, rows=variant.rows))
        estimate = variant.config.shared_memory_bytes(variant.rows, 2, arch)
        assert manifest.shared_memory_bytes == estimate, variant.name(arch)
        assert manifest.shared_memory_bytes <= shared_memory_limit(arch), variant.name(arch)
