"""The tuner's pure parts: tuning inputs, the correctness gate, measuring candidates, and the tuning policy."""

import math

import pytest
import torch

from kabi._correctness import Tolerance, check_output, make_input_like, make_inputs_like, reference_output
from kabi._measure import fastest, measure_candidates
from kabi._tuning_policy import TuningSettings, current_settings, tuning, tuning_blocked_reason

FLOAT32 = Tolerance(norm=2e-5, extreme=1e-4)
QUICK = TuningSettings(warmup=1, repeat=3, min_time_s=0.0)


# --- tuning inputs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(6, 5),
        lambda: torch.randn(5, 6).t(),
        lambda: torch.randn(6, 9)[:, :5],
        lambda: torch.randn(3, 1, 4).expand(3, 7, 4),
        lambda: torch.randn(2, 6, 5, dtype=torch.float64).transpose(0, 1),
        lambda: torch.randn(8, 8, dtype=torch.bfloat16)[1:, 1:],
        lambda: torch.randint(-5, 5, (4, 4), dtype=torch.int32),
    ],
)
def test_tuning_inputs_copy_shape_dtype_strides_and_alignment_never_data(make):
    original = make()
    before = original.clone()
    fresh = make_input_like(original)
    assert (fresh.shape, fresh.dtype, fresh.device, fresh.stride()) == (
        original.shape,
        original.dtype,
        original.device,
        original.stride(),
    )
    assert fresh.data_ptr() % 256 == original.data_ptr() % 256
    assert fresh.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    assert not torch.equal(fresh, original)
    assert bool((fresh != 0).any())
    assert torch.equal(original, before)


def test_tuning_inputs_are_reproducible_and_pass_non_tensors_through():
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    first, second = make_inputs_like([a, b, 7]), make_inputs_like([a, b, 7])
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]) and first[2] == 7
    assert not torch.equal(first[0][:3, :2], first[1])


def test_tuning_input_of_a_non_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        make_input_like([1.0, 2.0])


# --- the correctness gate ---------------------------------------------------------------------------------------


def _reference(a, b):
    return reference_output(torch.matmul, [a, b])


def test_gate_accepts_float32_products_and_rejects_wrong_ones():
    a, b = torch.randn(33, 17), torch.randn(17, 9)
    reference = _reference(a, b)
    assert check_output(a @ b, reference, FLOAT32, torch.float32) is None
    note = check_output((a @ b) * 1.01, reference, FLOAT32)
    assert note.startswith("wrong result: norm error 1.0e-02 > 2e-05")


def test_gate_catches_one_wrong_element_that_the_norm_hides():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    output = a @ b
    output[3, 5] += 0.01 * float(output.abs().max())
    note = check_output(output, _reference(a, b), Tolerance(norm=1e-3, extreme=1e-4))
    assert note.startswith("wrong result: max error") and "relative to max |ref|" in note


def test_gate_rejects_tf32_like_rounding_in_float32():
    a, b = torch.randn(128, 256), torch.randn(256, 64)
    rounded_to_tf32 = lambda x: (x.view(torch.int32) & ~0x1FFF).view(torch.float32)  # 10 mantissa bits
    output = rounded_to_tf32(a) @ rounded_to_tf32(b)
    assert check_output(output, _reference(a, b), FLOAT32) is not None


@pytest.mark.parametrize(("bad_value", "kind"), [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_gate_rejects_nonfinite_values_where_the_reference_is_finite(bad_value, kind):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    output = a @ b
    output[2, 2] = bad_value
    assert check_output(output, _reference(a, b), Tolerance(norm=1.0, extreme=1.0)) == f"{kind} in output (1 elements)"


def test_gate_accepts_nonfinite_values_the_reference_has_too():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    a[1, 1] = float("nan")
    assert check_output(a @ b, _reference(a, b), FLOAT32) is None
    assert "differ where the reference is NaN" in check_output(torch.nan_to_num(a @ b), _reference(a, b), FLOAT32)


@pytest.mark.parametrize(
    ("output", "expected_note"),
    [
        ([[1.0]], "returned list, expected a tensor"),
        (torch.ones(3, 4), "wrong shape [3, 4], expected [4, 3]"),
        (torch.ones(4, 3, dtype=torch.float64), "wrong dtype float64, expected float32"),
    ],
)
def test_gate_names_the_wrong_kind_of_output(output, expected_note):
    reference = _reference(torch.randn(4, 2), torch.randn(2, 3))
    assert check_output(output, reference, FLOAT32, torch.float32) == expected_note


def test_gate_of_an_empty_product_passes():
    a, b = torch.randn(0, 3), torch.randn(3, 5)
    assert check_output(a @ b, _reference(a, b), FLOAT32) is None


@pytest.mark.parametrize("bad", [{"norm": -1.0, "extreme": 1.0}, {"norm": 1.0, "extreme": float("inf")}])
def test_tolerance_must_be_finite_and_non_negative(bad):
    with pytest.raises(ValueError, match="tolerance"):
        Tolerance(**bad)


# --- measuring candidates ---------------------------------------------------------------------------------------


def _matmul_inputs():
    return make_inputs_like([torch.empty(24, 16), torch.empty(16, 8)])


def _raises(a, b):
    raise RuntimeError("launch failed:\n  out of registers")


def _writes_into_input(a, b):
    a.mul_(2)
    return torch.matmul(a / 2, b)


def test_measure_gates_times_and_records_why_candidates_failed():
    candidates = [
        ("torch.mm", torch.mm),
        ("wrong", lambda a, b: a @ b + 1.0),
        ("raises", _raises),
        ("nan", lambda a, b: torch.full((24, 8), float("nan"))),
        ("mutates", _writes_into_input),
        ("torch.matmul", torch.matmul),
    ]
    results = measure_candidates(candidates, _matmul_inputs, torch.matmul, FLOAT32, QUICK, expected_dtype=torch.float32)
    by_name = {result.kernel: result for result in results}
    assert [result.kernel for result in results] == [name for name, _ in candidates]
    for name in ("torch.mm", "torch.matmul"):
        assert by_name[name].passed and by_name[name].note == ""
        assert by_name[name].bench.count == 3 and by_name[name].time_us == by_name[name].bench.median_us
    assert by_name["wrong"].note.startswith("wrong result: norm error")
    assert by_name["raises"].note == "raised RuntimeError: launch failed: out of registers"
    assert by_name["nan"].note == "NaN in output (192 elements)"
    assert by_name["mutates"].note.startswith("wrote into its inputs")
    for name in ("wrong", "raises", "nan", "mutates"):
        assert math.isinf(by_name[name].time_us) and by_name[name].bench is None
    assert fastest(results).kernel in ("torch.mm", "torch.matmul")
    assert fastest(results).time_us == min(by_name["torch.mm"].time_us, by_name["torch.matmul"].time_us)


def test_fastest_is_none_when_every_candidate_fails():
    results = measure_candidates([("raises", _raises)], _matmul_inputs, torch.matmul, FLOAT32, QUICK)
    assert fastest(results) is None


def test_a_candidate_that_fails_only_while_timed_is_rejected():
    calls = []

    def flaky(a, b):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("second call breaks")
        return a @ b

    [result] = measure_candidates([("flaky", flaky)], _matmul_inputs, torch.matmul, FLOAT32, QUICK)
    assert result.note == "raised ValueError while being timed: second call breaks"


# --- the policy -------------------------------------------------------------------------------------------------


def test_default_policy_is_first_call(monkeypatch):
    monkeypatch.delenv("KABI_TUNE", raising=False)
    assert current_settings().mode == "first-call"
    assert tuning_blocked_reason([torch.ones(1)]) is None


def test_environment_and_context_set_the_policy(monkeypatch):
    monkeypatch.setenv("KABI_TUNE", "off")
    monkeypatch.setenv("KABI_TUNE_REPEAT", "4")
    assert current_settings() == TuningSettings(mode="off", repeat=4)
    assert "tuning is off" in tuning_blocked_reason()
    with tuning("first-call", warmup=2) as settings:
        assert settings == current_settings() == TuningSettings(mode="first-call", warmup=2, repeat=4)
        with tuning("off"):
            assert current_settings().mode == "off"
        assert current_settings().mode == "first-call"
    assert current_settings().mode == "off"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KABI_TUNE", "always", "tuning mode must be one of 'off', 'first-call'"),
        ("KABI_TUNE_REPEAT", "many", "KABI_TUNE_REPEAT='many' is not a number"),
        ("KABI_TUNE_WARMUP", "0", "warmup must be an integer >= 1"),
        ("KABI_TUNE_MIN_TIME_S", "-1", "min_time_s must be a number of seconds >= 0"),
    ],
)
def test_bad_environment_is_named(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        current_settings()


def test_bad_context_arguments_are_named():
    with pytest.raises(ValueError, match="tuning mode must be one of"):
        with tuning("sometimes"):
            pass
    with pytest.raises(ValueError, match="repeat must be an integer >= 1"):
        with tuning(repeat=0):
            pass


def test_no_tuning_on_fake_or_meta_tensors_or_while_compiling():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with tuning("first-call"):
        assert "fake or meta" in tuning_blocked_reason([torch.empty(2, 2, device="meta")])
        with FakeTensorMode():
            fake = torch.empty(2, 2)
        assert "fake or meta" in tuning_blocked_reason([fake])

        reasons = []

        @torch.compile(backend="eager", fullgraph=False)
        def traced(x):
            reasons.append(tuning_blocked_reason())
            return x + 1

        torch._dynamo.reset()
        traced(torch.ones(2))
        assert "torch.compile is tracing" in reasons
