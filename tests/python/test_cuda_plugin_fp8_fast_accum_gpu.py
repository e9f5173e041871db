"""scaled_mm's use_fast_accum in the CUDA plugin, on a GPU: the CUTLASS fast-accumulation kernels (sm_90a) and
cuBLASLt's FP8 slot with its FAST_ACCUM set, each forced in turn with kabi.use (so each is also gated) on a call
that allows fast accumulation, against the op's float64 reference within its tolerance, inside poisoned guard
regions; the fast-accumulation kernels declined, with the reason, for a call that does not allow it and for a
float32 output; the accurate kernels serving both kinds of call."""

from __future__ import annotations

import pytest
import torch

import kabi

from _guarded_outputs import POISON, assert_guards_intact, guarded_output
from _scaled_mm_checks import cuda_plugin_candidates, cuda_plugin_kernels, make_inputs, run_forced, verdict

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                       reason="needs a CUDA GPU with FP8 tensor cores (sm_89 or later)"),
]

IS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
FAST_ACCUM_PREFIX = "cuda.cutlass.sm90.fp8_fast_accum."
NOT_ALLOWED = "the call did not allow it (use_fast_accum)"
# (M, N, K): a K long enough for the fast accumulator to matter, tiles of every configuration partly filled.
SHAPE = (256, 512, 1024)


FAST_ACCUM = [name for name in cuda_plugin_kernels() if name.startswith(FAST_ACCUM_PREFIX)] \
    if torch.cuda.is_available() else []
ACCURATE = [name for name in cuda_plugin_kernels() if name.startswith("cuda.cutlass.sm90.fp8.")] \
    if torch.cuda.is_available() else []


@pytest.fixture(scope="module", autouse=True)
def plugin_kernels() -> None:
    names = cuda_plugin_kernels()
    assert "cuda.cublaslt.fp8.algo0" in names, f"cuBLASLt's FP8 slots are not registered: {names}"
    if IS_SM90:
        assert FAST_ACCUM == [FAST_ACCUM_PREFIX + "ws_cooperative.128x256x128.c2x1.persistent",
                              FAST_ACCUM_PREFIX + "ws_pingpong.128x128x128.c2x1.persistent"], names


@pytest.mark.parametrize("scales", [("tensor", "tensor"), ("row", "row")], ids="-".join)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_fast_accum_kernels_match_the_reference(scales: tuple, with_bias: bool) -> None:
    inputs = make_inputs(*SHAPE, scales=scales, bias_dtype="bfloat16" if with_bias else None, seed=11,
                         device="cuda")
    candidates = cuda_plugin_candidates(inputs, "bfloat16", use_fast_accum=True)
    slot = candidates["cuda.cublaslt.fp8.algo0"]
    kernels = list(FAST_ACCUM)
    # cuBLASLt before 12.9 has no row-wise FP8 scales, and says so.
    if slot.eligible:
        kernels.append(slot.name)
    else:
        assert scales == ("row", "row") and "row-wise" in slot.reason, slot.reason
    for name in kernels:
        assert candidates[name].eligible, f"{name} declines a call with use_fast_accum: {candidates[name].reason}"
        out, buffer = run_forced(name, inputs, "bfloat16", use_fast_accum=True)
        note = verdict(out, *inputs, "bfloat16")
        assert note is None, f"{name} {SHAPE} scales={scales} bias={with_bias} use_fast_accum: {note}"
        assert_guards_intact(buffer, name)


@pytest.mark.skipif(not IS_SM90, reason="the fast-accumulation CUTLASS kernels are sm_90a code")
@pytest.mark.parametrize("scales", [("tensor", "tensor"), ("row", "row")], ids="-".join)
def test_fast_accum_kernels_are_declined_without_use_fast_accum(scales: tuple) -> None:
    inputs = make_inputs(*SHAPE, scales=scales, seed=12, device="cuda")
    candidates = cuda_plugin_candidates(inputs, "bfloat16", use_fast_accum=False)
    for name in FAST_ACCUM:
        assert not candidates[name].eligible, f"{name} is offered a call without use_fast_accum"
        assert NOT_ALLOWED in candidates[name].reason, candidates[name].reason
        out, buffer = guarded_output(SHAPE[:2], torch.bfloat16)
        with pytest.raises(kabi.KabiError, match="use_fast_accum"), kabi.use(scaled_mm=name):
            kabi.ops.scaled_mm(*inputs, out_dtype="bfloat16", out=out)
        torch.cuda.synchronize()
        assert bool((buffer == POISON).all()), f"{name} declined the call but wrote"
    # The accurate kernels serve it, as they serve a call with use_fast_accum.
    for use_fast_accum in (False, True):
        allowed = cuda_plugin_candidates(inputs, "bfloat16", use_fast_accum=use_fast_accum)
        for name in ACCURATE:
            assert allowed[name].eligible, f"{name} use_fast_accum={use_fast_accum}: {allowed[name].reason}"


@pytest.mark.skipif(not IS_SM90, reason="the fast-accumulation CUTLASS kernels are sm_90a code")
def test_fast_accum_kernels_have_no_float32_output() -> None:
    inputs = make_inputs(*SHAPE, seed=13, device="cuda")
    candidates = cuda_plugin_candidates(inputs, "float32", use_fast_accum=True)
    for name in FAST_ACCUM:
        candidate = candidates.get(name)
        assert candidate is None or not candidate.eligible, f"{name} is offered a float32 output"
