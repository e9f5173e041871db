"""The built-in CUDA plugin (kabi-cuda, libkabi_cuda.so) on a machine without a GPU: it is built where nvcc and
CUTLASS's headers are found, its sm_90a code really uses wgmma (FP8 wgmma in the scaled_mm kernels) and TMA (loads, and
stores in the grouped GEMMs), it loads and registers nothing when there is no CUDA device, a host reporting GPUs this
machine lacks gets the kernels registry/kernels/cuda declares for them, their supports predicates decline what they
cannot compute, and a build with CUDA disabled still configures and says what it lacks. Its kernels are checked on a
GPU by test_cuda_plugin_gpu.py, test_cuda_plugin_fp8_gpu.py, test_cuda_plugin_fp8_fast_accum_gpu.py and
test_cuda_plugin_grouped_gpu.py."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kabi import _core
from kabi._base.core_answers import KernelInfo

import _cmake
from _c_caller import REGISTRATION_HOST_SOURCE, SKIPPED, compile_c_caller
from _cuda_plugin_declarations import PLUGIN as PLUGIN_NAME, declared_for, mismatches


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (path for path in ("/usr/local/cuda/bin/nvcc",) if os.access(path, os.X_OK)), None)


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump") or next(
        (path for path in ("/usr/local/cuda/bin/cuobjdump",) if os.access(path, os.X_OK)), None)
    if found is None and importlib.util.find_spec("triton") is not None:
        # The Triton wheel ships one (without importing triton, which takes seconds).
        triton_dir = Path(importlib.util.find_spec("triton").origin).parent
        bundled = triton_dir / "backends" / "nvidia" / "bin" / "cuobjdump"
        found = str(bundled) if bundled.is_file() else None
    return found


def _cuda_plugin_expected() -> bool:
    """The build's conditions for the plugin (cmake/kabiCuda.cmake): a CUDA compiler and CUTLASS's headers."""
    return _nvcc() is not None and importlib.util.find_spec("cutlass_library") is not None


@pytest.fixture(scope="module")
def plugin_record() -> dict:
    _core.plugin_load_builtin()
    records = [record for record in _core.plugin_records() if record["name"] == PLUGIN_NAME]
    if not records:
        if _cuda_plugin_expected():
            pytest.fail("nvcc and nvidia-cutlass are present, but libkabi_cuda.so was not built beside libkabi")
        pytest.skip("this build has no CUDA plugin: no nvcc or no nvidia-cutlass at build time")
    return records[0]


def test_plugin_is_built_and_loads(plugin_record: dict) -> None:
    assert plugin_record["loaded"], plugin_record["message"]
    assert plugin_record["message"] == ""
    assert Path(plugin_record["path"]).name == "libkabi_cuda.so"


def test_import_kabi_leaves_it_unloaded_until_cuda_kernels_are_asked_for(plugin_record: dict) -> None:
    # Loading it enumerates the CUDA devices, which initialises the driver: a cost for the first CUDA dispatch, not
    # for every import.
    probe = ("import kabi\nfrom kabi import _core\n"
             f"print(sorted(record['name'] for record in _core.plugin_records() if record['name'] == {PLUGIN_NAME!r}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA device")
def test_without_a_device_it_registers_nothing(plugin_record: dict) -> None:
    assert plugin_record["num_kernels"] == 0
    assert not [kernel for kernel in _core.kernel_list() if kernel["plugin"] == PLUGIN_NAME]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA device")
def test_from_c_without_a_device_it_loads_and_registers_nothing(plugin_record: dict, tmp_path: Path) -> None:
    program = compile_c_caller(tmp_path)
    result = subprocess.run([str(program), plugin_record["path"]], capture_output=True, text=True, timeout=120)
    assert result.returncode == SKIPPED, result.stdout + result.stderr
    assert "the plugin loaded and registered nothing" in result.stdout


def test_it_links_no_cuda_library_a_cpu_machine_lacks(plugin_record: dict) -> None:
    # The CUDA runtime is static and cuBLASLt is opened at run time; libcuda is the driver's, opened by the runtime.
    needed = subprocess.run(["readelf", "-d", plugin_record["path"]], capture_output=True, text=True, check=True)
    libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", needed.stdout)
    assert not [name for name in libraries if re.match(r"lib(cuda|cudart|cublas|cublasLt|kabi)\b", name)], libraries


@pytest.fixture(scope="module")
def registered_on(plugin_record: dict, tmp_path_factory: pytest.TempPathFactory):
    """What the plugin registers for a host that reports one CUDA device per arch given: {(op, name): KernelInfo}."""
    program = compile_c_caller(tmp_path_factory.mktemp("host"), REGISTRATION_HOST_SOURCE)

    def registered(*archs: int) -> dict[tuple[str, str], KernelInfo]:
        result = subprocess.run([str(program), plugin_record["path"], *map(str, archs)], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        kernels = [KernelInfo.from_core(json.loads(line)) for line in result.stdout.splitlines()]
        return {(kernel.op, kernel.name): kernel for kernel in kernels}

    return registered


@pytest.mark.parametrize("arch", [90, 89, 80, 75])
def test_registration_for_absent_gpus_matches_the_registry_files(registered_on, arch: int) -> None:
    live = registered_on(arch)
    # cuBLASLt's slots exist only where the plugin finds the library (the nvidia-cublas package, or torch's).
    with_cublaslt = any(name.startswith("cuda.cublaslt") for _, name in registered_on(90))
    declared = [spec for spec in declared_for(arch) if with_cublaslt or not spec.name.startswith("cuda.cublaslt")]
    assert sorted(live) == sorted((spec.op, spec.name) for spec in declared)
    for spec in declared:
        assert not mismatches(live[(spec.op, spec.name)], spec)


def test_fp8_cutlass_kernels_serve_scaled_mm_on_sm90_only(registered_on) -> None:
    on_sm90 = [name for op, name in registered_on(90) if op == "scaled_mm" and name.startswith("cuda.cutlass")]
    accurate = [name for name in on_sm90 if name.startswith("cuda.cutlass.sm90.fp8.")]
    fast_accum = [name for name in on_sm90 if name.startswith("cuda.cutlass.sm90.fp8_fast_accum.")]
    assert len(accurate) == 2 and len(fast_accum) == 2 and len(on_sm90) == 4, on_sm90
    for arch in (89, 80):
        assert not [name for op, name in registered_on(arch) if op == "scaled_mm" and name.startswith("cuda.cutlass")]
    # Nor do the FP8 configurations serve the other ops.
    assert not [name for op, name in registered_on(90) if op != "scaled_mm" and ".fp8" in name]


def test_fp8_fast_accum_kernels_have_no_float32_output(registered_on) -> None:
    # Fast accumulation's error over long K is above a float32 output's tolerance, so only 16-bit outputs are built.
    for (op, name), kernel in registered_on(90).items():
        if ".fp8_fast_accum." in name:
            assert set(kernel.dtypes) == {"bfloat16", "float16"}, (name, kernel.dtypes)


# What each scaled_mm call of tests/cpp/cuda_plugin_registration.c gets from the FP8 kernels' supports predicates:
# None (supported) or a fragment of the reason they decline it. cuBLASLt's slots are checked only where the reason
# needs no device (without one, its heuristic cannot run).
CUTLASS_FP8_SUPPORTS = {
    "aligned": None, "one_row": None, "row_scales_bias_float32": None, "mixed_scales": None, "n_136": None,
    "bias_float32": None, "aligned_fast_accum": None, "row_scales_bias_fast_accum": None, "float32_fast_accum": None,
    "k_40": "a's leading dimension is 40, not a multiple of 16 elements", "n_100": "N (out's row stride) is 100",
    "b_row_major": "with a row-major b", "a_column_major": "read a row-major a",
    "b_e5m2": "float8_e4m3fn a and b only", "both_e5m2": "float8_e4m3fn a and b only",
    "strided_scale_a": "contiguous vector of scales", "a_off_16_bytes": "the data of a is not 16-byte aligned",
}
# The same for the FP8 fast-accumulation CUTLASS kernels: every call without use_fast_accum that the shared planning
# accepts is declined for that, and a float32 output, which they have no instantiation for.
NOT_ALLOWED = "the call did not allow it (use_fast_accum)"
CUTLASS_FP8_FAST_ACCUM_SUPPORTS = {
    **{call: NOT_ALLOWED for call in CUTLASS_FP8_SUPPORTS},
    "a_column_major": "read a row-major a", "strided_scale_a": "contiguous vector of scales",
    "aligned_fast_accum": None, "row_scales_bias_fast_accum": None,
    "float32_fast_accum": "no instantiation for this output dtype",
}
CUBLASLT_FP8_DECLINES = {
    "row_scales_bias_float32": "bias with a float32 output", "bias_float32": "bias with a float32 output",
    "n_136": "K and N multiples of 16", "k_40": "K and N multiples of 16", "n_100": "K and N multiples of 16",
    "b_row_major": "b column-major only", "a_column_major": "read a row-major a",
    "both_e5m2": "two float8_e5m2 operands", "strided_scale_a": "contiguous vector of scales",
    "a_off_16_bytes": "the data of a is not 16-byte aligned",
}


def _registration_host_answers(plugin_record: dict, tmp_path: Path, question: str) -> list[dict]:
    """What the registration host prints, a JSON object a line, when it asks the plugin's sm_90 kernels `question`."""
    program = compile_c_caller(tmp_path, REGISTRATION_HOST_SOURCE)
    result = subprocess.run([str(program), plugin_record["path"], "90", question], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_fp8_kernels_decline_what_they_cannot_compute(plugin_record: dict, tmp_path: Path) -> None:
    answers = _registration_host_answers(plugin_record, tmp_path, "--scaled-mm-supports")
    for prefix, table in (("cuda.cutlass.sm90.fp8.", CUTLASS_FP8_SUPPORTS),
                          ("cuda.cutlass.sm90.fp8_fast_accum.", CUTLASS_FP8_FAST_ACCUM_SUPPORTS)):
        cutlass = [answer for answer in answers if answer["kernel"].startswith(prefix)]
        assert {answer["kernel"] for answer in cutlass}, f"no {prefix} kernel answered"
        assert {answer["call"] for answer in cutlass} == set(table)
        for answer in cutlass:
            expected = table[answer["call"]]
            what = f"{answer['kernel']} on {answer['call']}: {answer['reason']!r}"
            assert answer["supported"] == (expected is None), what
            assert expected is None or expected in answer["reason"], what
    for answer in answers:
        if answer["kernel"].startswith("cuda.cublaslt.fp8.") and answer["call"] in CUBLASLT_FP8_DECLINES:
            assert not answer["supported"] and CUBLASLT_FP8_DECLINES[answer["call"]] in answer["reason"], answer


GROUPED_PREFIX = "cuda.cutlass.sm90.grouped."


def test_grouped_cutlass_kernels_serve_grouped_mm_on_sm90_only(registered_on) -> None:
    on_sm90 = [name for op, name in registered_on(90) if op == "grouped_mm"]
    assert len(on_sm90) == 3 and all(name.startswith(GROUPED_PREFIX) for name in on_sm90), on_sm90
    for arch in (89, 80):
        assert not [name for op, name in registered_on(arch) if op == "grouped_mm"]
    assert not [name for op, name in registered_on(90) if op != "grouped_mm" and name.startswith(GROUPED_PREFIX)]


# What each grouped_mm call of tests/cpp/cuda_plugin_registration.c gets from the CUTLASS grouped kernels' supports
# predicates: None (supported) or a fragment of the reason they decline it. Every reason names the argument.
GROUPED_SUPPORTS = {
    "linear_weight": None, "row_major_weight": None, "three_d": None, "three_d_row_major_weight": None,
    "one_group_one_row": None, "deepseek_v3_gate_up": None,
    "k_100": "K is 100, not a multiple of 8 elements (16 bytes)",
    "n_100": "N is 100, not a multiple of 8 elements (16 bytes)",
    "n_100_row_major_weight": "N is 100, not a multiple of 8 elements (16 bytes)",
    "x_column_major": "read x's rows with unit stride along K",
    "x_rows_off_16_bytes": "x's row stride is 268, not a multiple of 8",
    "w_groups_off_16_bytes": "w's group stride is 35908, not a multiple of 8",
    "x_off_16_bytes": "the data of x is not 16-byte aligned",
    "strided_offs": "offs has stride 2",
    "no_rows": "the product is empty",
}
# The groups of each call (the host's table), and the multiprocessors the host reports.
GROUPS = {"deepseek_v3_gate_up": 256, "three_d": 3, "three_d_row_major_weight": 3, "one_group_one_row": 1}
HOST_MULTIPROCESSORS = 132


def test_grouped_kernels_decline_what_they_cannot_compute(plugin_record: dict, tmp_path: Path) -> None:
    answers = _registration_host_answers(plugin_record, tmp_path, "--grouped-mm-supports")
    assert len({answer["kernel"] for answer in answers}) == 3
    assert {answer["call"] for answer in answers} == set(GROUPED_SUPPORTS)
    workspaces: dict[tuple[str, str], int] = {}
    for answer in answers:
        expected = GROUPED_SUPPORTS[answer["call"]]
        what = f"{answer['kernel']} on {answer['call']}: {answer['reason']!r}"
        assert answer["supported"] == (expected is None), what
        assert expected is None or expected in answer["reason"], what
        workspaces[answer["kernel"], answer["call"]] = answer["workspace"]
        # The setup kernel's arrays (a shape of three ints, then three addresses and three strides of 8 bytes: 60
        # bytes a group) and CUTLASS's TMA descriptors (128 bytes each, at least one for x, w and out per
        # multiprocessor, which the kernel rewrites for each group).
        groups = GROUPS.get(answer["call"], 4)
        assert answer["workspace"] >= 60 * groups + 3 * 128 * HOST_MULTIPROCESSORS, what
    for kernel in {answer["kernel"] for answer in answers}:
        assert workspaces[kernel, "deepseek_v3_gate_up"] > workspaces[kernel, "linear_weight"], kernel


@pytest.fixture(scope="module")
def cuobjdump() -> str:
    """The cuobjdump to read the plugin's code with."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump is not installed (CUDA toolkit or the triton wheel)")
    return tool


@pytest.fixture(scope="module")
def sass(plugin_record: dict, cuobjdump: str) -> dict[str, str]:
    """The plugin's SASS per architecture, from cuobjdump."""
    result = subprocess.run([cuobjdump, "--dump-sass", plugin_record["path"]], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    per_arch: dict[str, list[str]] = {}
    arch = None
    for line in result.stdout.splitlines():
        match = re.search(r"arch = (sm_\w+)", line)
        if match:
            arch = match.group(1)
        elif arch is not None:
            per_arch.setdefault(arch, []).append(line)
    return {name: "\n".join(lines) for name, lines in per_arch.items()}


def test_sm90a_code_uses_wgmma_and_tma(sass: dict[str, str]) -> None:
    assert "sm_90a" in sass, f"no sm_90a code in the plugin; architectures: {sorted(sass)}"
    code = sass["sm_90a"]
    assert "HGMMA" in code, "the sm_90a kernels issue no warpgroup MMA (HGMMA)"
    assert "UTMALDG" in code, "the sm_90a kernels issue no TMA loads (UTMALDG)"


def _sass_functions(code: str, name_part: str) -> dict[str, str]:
    """{mangled name: SASS} of the kernels in one arch's cuobjdump output whose names contain ``name_part``
    (cuobjdump prints each kernel's SASS after a "Function : <mangled name>" line)."""
    functions = re.split(r"^\s*Function : ", code, flags=re.MULTILINE)[1:]
    return {body.split(maxsplit=1)[0]: body for body in functions if name_part in body.split(maxsplit=1)[0]}


def test_sm90a_fp8_kernels_use_fp8_wgmma_and_tma(sass: dict[str, str]) -> None:
    # The FP8 GEMMs' names carry CUTLASS's float_e4m3_t.
    fp8 = _sass_functions(sass["sm_90a"], "float_e4m3_t")
    assert fp8, "no FP8 (float_e4m3_t) kernel in the plugin's sm_90a code"
    for name, body in fp8.items():
        assert "QGMMA" in body, f"{name} issues no FP8 warpgroup MMA (QGMMA)"
        assert "UTMALDG" in body, f"{name} issues no TMA loads (UTMALDG)"


def test_sm90a_grouped_kernels_use_wgmma_and_tma(sass: dict[str, str]) -> None:
    # CUTLASS's grouped GEMMs (their kernel's name carries GroupProblemShape): 3 configurations x 2 dtypes x 2 w orders,
    # each multiplying with warpgroup MMAs, loading x and w with TMA and storing out with TMA (the stores' descriptor,
    # rewritten per group, is what keeps a tile's rows past its group out of the next group's rows).
    grouped = _sass_functions(sass["sm_90a"], "GroupProblemShape")
    assert len(grouped) == 12, f"expected 12 grouped GEMMs in the sm_90a code, found {len(grouped)}"
    for name, body in grouped.items():
        assert "HGMMA" in body, f"{name} issues no warpgroup MMA (HGMMA)"
        assert "UTMALDG" in body, f"{name} issues no TMA loads (UTMALDG)"
        assert "UTMASTG" in body, f"{name} issues no TMA stores (UTMASTG)"


def test_no_kernel_spills_registers(plugin_record: dict, cuobjdump: str) -> None:
    # A GEMM whose accumulators spill to local memory runs several times slower (the FP8 128x256 tile's second
    # accumulator did: 428 against cuBLASLt's 1264 TF/s on the H200); ptxas reports it as a per-thread stack.
    result = subprocess.run([cuobjdump, "--dump-resource-usage", plugin_record["path"]], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    kernels = re.findall(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+)", result.stdout)
    assert kernels, f"cuobjdump listed no kernel's resources:\n{result.stdout[:2000]}"
    spilling = [name for name, _, stack in kernels if int(stack) > 0]
    assert not spilling, f"{len(spilling)} of {len(kernels)} kernels spill registers to the stack: {spilling}"


def test_decode_mma_kernels_use_tensor_cores_and_no_local_memory(sass: dict[str, str]) -> None:
    # cuda.decode.mma: 2 dtypes x 2 b orders x 1 or 2 groups of 8 rows of a, as sm_80 and sm_90 code. Its products
    # are mma.sync (HMMA), b is streamed in 16-byte loads that skip L1 (LDG.E.NA.128), and its fragments never
    # touch local memory (LDL/STL): a spill there would put the weight's bytes through memory twice.
    for arch in ("sm_80", "sm_90"):
        assert arch in sass, f"no {arch} code in the plugin; architectures: {sorted(sass)}"
        decode = _sass_functions(sass[arch], "decode_mma_kernel")
        assert len(decode) == 8, f"{arch}: expected 8 decode MMA kernels, found {sorted(decode)}"
        for name, body in decode.items():
            assert "HMMA.16816.F32" in body, f"{arch} {name} issues no m16n8k16 mma.sync (HMMA.16816.F32)"
            assert "LDG.E.NA.128" in body, f"{arch} {name} reads b in no 16-byte load that skips L1"
            assert not re.search(r"\b(LDL|STL)\b", body), f"{arch} {name} uses local memory"


def test_sm80_code_uses_mma_sync(sass: dict[str, str]) -> None:
    assert "sm_80" in sass, f"no sm_80 code in the plugin; architectures: {sorted(sass)}"
    assert "HMMA" in sass["sm_80"] and "LDGSTS" in sass["sm_80"], "expected mma.sync fed by cp.async"


def test_a_build_with_cuda_disabled_says_what_it_lacks(tmp_path: Path) -> None:
    cmake = _cmake.require_cmake()
    result = subprocess.run(
        [cmake, "-S", str(_cmake.REPOSITORY), "-B", str(tmp_path / "build"), "-DKABI_ENABLE_CUDA=OFF",
         "-DKABI_BUILD_PYTHON=OFF", "-DKABI_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the CUDA plugin (CUTLASS and cuBLASLt kernels) is not built" in result.stdout
    targets = subprocess.run([cmake, "--build", str(tmp_path / "build"), "--target", "help"], capture_output=True,
                             text=True, timeout=120)
    assert "kabi_cpu" in targets.stdout and "kabi_cuda" not in targets.stdout


def test_a_prebuilt_plugin_is_installed_instead_of_compiled(tmp_path: Path) -> None:
    cmake = _cmake.require_cmake()

    def configure(build_dir: Path, prebuilt: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [cmake, "-S", str(_cmake.REPOSITORY), "-B", str(build_dir), "-DKABI_BUILD_PYTHON=OFF",
             "-DKABI_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}", f"-DKABI_CUDA_PLUGIN_PREBUILT={prebuilt}"],
            capture_output=True, text=True, timeout=300)

    prebuilt = tmp_path / "elsewhere" / "libkabi_cuda.so"
    prebuilt.parent.mkdir()
    prebuilt.write_bytes(os.urandom(4096))
    result = configure(tmp_path / "build", prebuilt)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA plugin prebuilt" in result.stdout
    assert (tmp_path / "build" / "lib" / "libkabi_cuda.so").read_bytes() == prebuilt.read_bytes()
    targets = subprocess.run([cmake, "--build", str(tmp_path / "build"), "--target", "help"], capture_output=True,
                             text=True, timeout=120)
    assert "kabi_cpu" in targets.stdout and "kabi_cuda" not in targets.stdout
    assert "libkabi_cuda.so" in (tmp_path / "build" / "cmake_install.cmake").read_text()

    missing = tmp_path / "nowhere" / "libkabi_cuda.so"
    result = configure(tmp_path / "build-missing", missing)
    assert result.returncode != 0
    assert "KABI_CUDA_PLUGIN_PREBUILT" in result.stderr and str(missing) in result.stderr
