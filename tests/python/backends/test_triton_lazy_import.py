"""Registering the Triton backend imports no Triton: a process whose picks are other kernels never pays for
``import triton`` (issue 14, item 4); a Triton kernel imports it at its first call and still gives the right answer.

Each check runs in a fresh process under Triton's interpreter (TRITON_INTERPRET=1), since what matters is what that
process imported, and the interpreter must be chosen before Triton is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kabi.backends.triton._kernel_modules import KERNEL_MODULES  # noqa: E402 - imports no Triton

# The modules of @triton.jit kernels; none may be imported before a Triton kernel runs.
_KERNEL_MODULES = tuple(module.stem for module in KERNEL_MODULES)

_PRELUDE = r"""
import json, sys
import torch
import kabi
from kabi.backends.triton import register_triton_kernels

KERNEL_MODULES = %r


def triton_imports():
    names = ["triton"] + ["kabi.backends.triton." + stem for stem in KERNEL_MODULES]
    return sorted(name for name in names if name in sys.modules)


report = {}
""" % (_KERNEL_MODULES,)

_REGISTER_AND_EXPLAIN = _PRELUDE + r"""
names = register_triton_kernels(device="cpu")
report["families"] = sorted({name.split(".")[1] for name in names})
report["after_registration"] = triton_imports()
a, b = torch.randn(96, 40), torch.randn(40, 72)
explanation = kabi.explain(kabi.ops.matmul, a, b)
triton_candidates = [c for c in explanation.candidates if c.kernel.backend == "triton"]
report["triton_candidates"] = len(triton_candidates)
report["triton_eligible"] = sum(c.eligible for c in triton_candidates)
report["triton_declined"] = [c.reason for c in triton_candidates if not c.eligible][:1]
report["after_explain"] = triton_imports()

from kabi.backends.triton._names import kernels_fingerprint
fingerprint = kernels_fingerprint()
report["after_fingerprint"] = triton_imports()

name = "triton.matmul.tiled.bm64_bn64_bk64_w4_s3_g8.cpu"
with kabi.use(matmul=name):
    c = kabi.ops.matmul(a, b)
report["after_triton_call"] = triton_imports()
report["max_error"] = float((c - a @ b).abs().max())
import triton
report["fingerprint_matches_triton"] = fingerprint.startswith(f"triton-{triton.__version__}:")
print(json.dumps(report))
"""

_FIRST_CALL = _PRELUDE + r"""
register_triton_kernels(device="cpu")
a, b = torch.randn(8, 32), torch.randn(32, 24)
c = kabi.ops.matmul(a, b)
report["pick"] = kabi.explain(kabi.ops.matmul, a, b).pick
report["tuned_kernels"] = kabi.stats().candidates_benchmarked
report["imported"] = triton_imports()
report["max_error"] = float((c - a @ b).abs().max())
print(json.dumps(report))
"""


def _run(script: str, cache_dir, **settings: str) -> dict:
    environment = dict(os.environ, TRITON_INTERPRET="1", KABI_CACHE_DIR=str(cache_dir), **settings)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_registration_and_explain_import_no_triton_and_a_forced_kernel_imports_it(cache_dir):
    report = _run(_REGISTER_AND_EXPLAIN, cache_dir)
    assert report["families"] == ["grouped_mm", "linear", "matmul", "scaled_mm"]
    assert report["after_registration"] == [], "registering the Triton kernels imported Triton"
    # explain evaluates every Triton candidate's supports predicate: some take the problem, some decline it.
    assert report["triton_candidates"] > report["triton_eligible"] > 0, report
    assert report["triton_declined"] and report["triton_declined"][0].startswith("declined:"), report
    assert report["after_explain"] == []
    assert report["after_fingerprint"] == [], "the kernels' fingerprint imported Triton"
    assert "triton" in report["after_triton_call"]
    assert "kabi.backends.triton._jit_kernels" in report["after_triton_call"]
    assert report["max_error"] < 1e-3
    assert report["fingerprint_matches_triton"]


def test_a_warm_first_call_whose_pick_is_not_triton_imports_no_triton(cache_dir):
    # The cold process tunes (its gate runs the Triton candidates, so it imports Triton); the warm one, over the
    # same tuning cache, takes the recorded pick without running any other candidate. Every measurement is kept as
    # final, so that a busy machine's noise does not send the warm process measuring again.
    settings = {"KABI_TUNE_MAX_SPREAD": "inf", "KABI_TUNE_MIN_CPU_SHARE": "0"}
    cold = _run(_FIRST_CALL, cache_dir, **settings)
    assert cold["tuned_kernels"] > 0 and "triton" in cold["imported"], cold
    assert cold["max_error"] < 1e-3
    warm = _run(_FIRST_CALL, cache_dir, **settings)
    assert warm["tuned_kernels"] == 0, warm
    assert warm["pick"] == cold["pick"] and warm["max_error"] < 1e-3
    # The interpreter runs a Triton kernel orders of magnitude slower than torch's CPU matmul, so it cannot win.
    assert not warm["pick"].startswith("triton."), f"the interpreter's {warm['pick']} won the tuning"
    assert warm["imported"] == [], f"the warm first call imported {warm['imported']} to run {warm['pick']}"


_REGISTER_FOUND_BINARIES = r"""
import json, sys
import kabi
from kabi.backends.triton import TILED_CONFIGS, _native
from kabi.backends.triton._families import FAMILIES
from kabi.backends.triton._registration import _Supports

registered = _native.register_native_binaries(
    90, 132, lambda family, config, rows: _Supports(FAMILIES[family], config, rows=rows), families=["tiled"],
    dtypes=["float16"],
    tags=[TILED_CONFIGS[0].tag], workers=1)
print(json.dumps({"registered": sorted(registered.values()),
                  "kinds": sorted({kabi.kernel_info("matmul", name).kind for name in registered.values()}),
                  "triton_imported": "triton" in sys.modules}))
"""


def test_device_binaries_found_on_disk_register_without_importing_triton(cache_dir):
    from kabi.backends.triton import TILED_CONFIGS, _native

    # Compiling them (here, in the test's process) is the cold path, which imports Triton.
    variants = _native.binary_variants(90, ["tiled"], ["float16"], [TILED_CONFIGS[0].tag])
    directory = _native.ensure_binaries(variants, 90, 132, workers=1)
    assert len(list(directory.glob("*.cubin"))) == len(variants) == 3
    environment = dict(os.environ, KABI_CACHE_DIR=str(cache_dir))
    environment.pop("TRITON_INTERPRET", None)
    completed = subprocess.run([sys.executable, "-c", _REGISTER_FOUND_BINARIES], capture_output=True, text=True,
                               env=environment, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["registered"] == sorted(variant.name(90) for variant in variants)
    assert report["kinds"] == ["device_binary"]
    assert not report["triton_imported"], "registering device binaries found on disk imported Triton"


def test_every_module_of_jit_kernels_is_a_kernel_module() -> None:
    """Each module that defines an @triton.jit kernel is one of KERNEL_MODULES: imported only at a launch, and part
    of the kernels' fingerprint, so that a change to its source invalidates tuned decisions and device binaries."""
    package = KERNEL_MODULES[0].source.parent
    decorator = re.compile(r"^@triton\.jit\b", re.MULTILINE)
    with_kernels = {path.stem for path in package.glob("*.py") if decorator.search(path.read_text())}
    assert with_kernels == set(_KERNEL_MODULES)
