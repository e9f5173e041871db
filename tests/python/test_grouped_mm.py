"""The grouped_mm op end to end on the CPU: ``kabi.ops.grouped_mm(x, w, offs=None)`` against its float64 reference
with every CPU kernel forced in turn (torch's F.grouped_mm, the per-group torch.mm loop, the CPU plugin's gemm per
group), on empty groups, one group, every row in one group, E=1, T=0, rows past the last offset, both weight
layouts and the 3-D form; then the op's validation (each bad input named), autograd (gradcheck in float64),
torch.ops.kabi, torch.compile(fullgraph=True), explain and tune. The Triton kernel's interpreter run is in
backends/test_triton_grouped_interpreter.py.
"""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi._selection.correctness import check_output
from kabi.ops._front import front_of

from _grouped_checks import GROUPED_CASES, SIZES, TOLERANCE, assert_matches, expected, make_inputs

# (kernel forced, dtypes it serves on the CPU)
CPU_KERNELS = (
    ("torch.grouped_mm.cpu", (torch.bfloat16, torch.float32)),
    ("torch.grouped_mm_loop.cpu", (torch.float16, torch.bfloat16, torch.float32, torch.float64)),
    ("cpu.openblas.grouped_mm", (torch.float32, torch.float64)),
)
CPU_CASES = [
    pytest.param(kernel, dtype, id=f"{kernel}-{str(dtype).removeprefix('torch.')}")
    for kernel, dtypes in CPU_KERNELS for dtype in dtypes
]


@pytest.mark.parametrize(("kernel", "dtype"), CPU_CASES)
def test_every_cpu_kernel_matches_the_reference(kernel: str, dtype: torch.dtype) -> None:
    for case in GROUPED_CASES:
        for transposed_weight, (k, n) in ((True, SIZES[0]), (False, SIZES[0]), (True, SIZES[1])):
            x, w, offs = make_inputs(case, dtype, transposed_weight=transposed_weight, k=k, n=n)
            with kabi.use(grouped_mm=kernel):
                out = kabi.ops.grouped_mm(x, w, offs)
            expected_shape = (x.shape[0], w.shape[-1]) if offs is not None else (*x.shape[:-1], w.shape[-1])
            assert out.shape == expected_shape, (case.name, out.shape)
            assert_matches(out, x, w, offs)
            if case.tail:
                assert bool((out[-case.tail:] == 0).all()), f"{kernel} {case.name}: rows past the last offset"
            # A caller's out holding NaN: every element, the rows past the last offset too, is written.
            given = torch.full(expected_shape, float("nan"), dtype=dtype)
            with kabi.use(grouped_mm=kernel):
                written = kabi.ops.grouped_mm(x, w, offs, out=given)
            assert written is given and torch.equal(given, out), (kernel, case.name)


def test_a_second_routing_of_the_same_sizes_reuses_the_decision_and_is_right() -> None:
    x, w, offs = make_inputs(GROUPED_CASES[0], torch.float32, transposed_weight=True)
    assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)
    rerouted = torch.tensor([0, 10, 10, 10, 10, 10], dtype=torch.int32)
    first = kabi.explain(kabi.ops.grouped_mm, x, w, offs)
    second = kabi.explain(kabi.ops.grouped_mm, x, w, rerouted)
    assert first.problem_key == second.problem_key
    assert_matches(kabi.ops.grouped_mm(x, w, rerouted), x, w, rerouted)


def test_the_tuning_key_buckets_the_rows_and_leaves_out_the_offsets() -> None:
    w = torch.randn(4, 8, 6)
    keys = set()
    for rows in (17, 30, 32):
        x = torch.randn(rows, 8)
        offs = torch.tensor([rows // 4, rows // 2, rows // 2, rows], dtype=torch.int32)
        keys.add(kabi.explain(kabi.ops.grouped_mm, x, w, offs).problem_key)
    assert len(keys) == 1, keys
    three_d = kabi.explain(kabi.ops.grouped_mm, torch.randn(4, 32, 8), w).problem_key
    assert three_d not in keys and "absent" in three_d


def _bad_inputs() -> list:
    x = torch.randn(10, 8)
    w = torch.randn(3, 8, 5)
    offs = torch.tensor([3, 3, 10], dtype=torch.int32)
    return [
        pytest.param((x, w, torch.tensor([3, 2, 10], dtype=torch.int32)), r"offs\[1\] is 2.*sorted", id="unsorted"),
        pytest.param((x, w, torch.tensor([-1, 2, 10], dtype=torch.int32)), r"offs\[0\] is -1", id="negative"),
        pytest.param((x, w, torch.tensor([3, 3, 11], dtype=torch.int32)), r"offs\[2\] is 11, past the end of R",
                     id="past-T"),
        pytest.param((x, w, offs.long()), "offs is int64; expected int32", id="offset-dtype"),
        pytest.param((x, w, offs.float()), "offs is float32; expected int32", id="offset-float"),
        pytest.param((x, w, torch.tensor([3, 10], dtype=torch.int32)), "offs has shape .*dimension E", id="E-offs"),
        pytest.param((torch.randn(4, 10, 8), w, None), "w has shape .*dimension E", id="E-3d"),
        pytest.param((x, w, None), "offs is required when x has rank 2", id="offs-missing"),
        pytest.param((torch.randn(3, 10, 8), w, offs), "offs must be absent unless x has rank 2", id="offs-3d"),
        pytest.param((x, torch.randn(3, 7, 5), offs), "w has shape .*dimension K", id="K"),
        pytest.param((torch.randn(10), w, offs), r"x has shape \[10\] \(rank 1\); expected \[E\?, R, K\]",
                     id="x-rank"),
        pytest.param((x, w.double(), offs), "x is float32 but w is float64", id="dtype-mix"),
        pytest.param((x.to(torch.int32), w.to(torch.int32), offs), "x is int32", id="integer-x"),
    ]


@pytest.mark.parametrize(("inputs", "message"), _bad_inputs())
def test_every_bad_input_is_refused_naming_the_argument(inputs: tuple, message: str) -> None:
    with pytest.raises(kabi.KabiError, match=message):
        kabi.ops.grouped_mm(*inputs)
    # The process survives and the op still serves a good call.
    x, w, offs = make_inputs(GROUPED_CASES[0], torch.float32, transposed_weight=False)
    assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)


@pytest.mark.parametrize("kernel", ["torch.grouped_mm.cpu", "torch.grouped_mm_loop.cpu", "cpu.openblas.grouped_mm"])
def test_host_offsets_are_checked_on_every_call_not_only_the_first(kernel: str) -> None:
    """A decision serves every routing of its sizes; the op still checks each call's host offsets, on the C hit
    path too (the bad calls below are hits of the first call's decision, not misses the core validates)."""
    x, w = torch.randn(6, 4), torch.randn(2, 4, 3)
    table = front_of(kabi.ops.grouped_mm).cache
    with kabi.use(grouped_mm=kernel):
        kabi.ops.grouped_mm(x, w, torch.tensor([4, 6], dtype=torch.int32))
        hits, misses = table.hits, table.misses
        with pytest.raises(kabi.KabiError, match=r"offs\[1\] is 100, past the end of R \(6\)"):
            kabi.ops.grouped_mm(x, w, torch.tensor([4, 100], dtype=torch.int32))
        with pytest.raises(kabi.KabiError, match=r"offs\[1\] is 3, below offs\[0\] = 4"):
            kabi.ops.grouped_mm(x, w, torch.tensor([4, 3], dtype=torch.int32))
        assert (table.hits, table.misses) == (hits + 2, misses)
        offs = torch.tensor([1, 6], dtype=torch.int32)
        assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)


@pytest.mark.parametrize("function", ["grouped_mm", "grouped_mm_loop"])
def test_torch_kernels_clamp_offsets_the_op_does_not_read(function: str) -> None:
    """Device offsets are never read back by the op; a kernel given bad ones (called here directly) clamps them
    into [previous end, T], so it stays inside x and out."""
    from kabi.backends import torch_native

    x, w = torch.randn(6, 4), torch.randn(2, 4, 3)
    out = getattr(torch_native, function)(x, w, torch.tensor([4, 100], dtype=torch.int32))
    assert_matches(out, x, w, torch.tensor([4, 6], dtype=torch.int32))
    out = getattr(torch_native, function)(x, w, torch.tensor([5, -3], dtype=torch.int32))
    assert_matches(out, x, w, torch.tensor([5, 5], dtype=torch.int32))


def test_gradcheck_in_float64() -> None:
    x = torch.randn(9, 5, dtype=torch.float64, requires_grad=True)
    w_linear = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    offs = torch.tensor([2, 2, 7, 9], dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda x, w: kabi.ops.grouped_mm(x, w.mT, offs), (x, w_linear))
    w = torch.randn(4, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: kabi.ops.grouped_mm(x, w, offs), (x, w))
    x3 = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: kabi.ops.grouped_mm(x, w), (x3, w))


def test_backward_leaves_empty_groups_a_zero_weight_gradient() -> None:
    x = torch.randn(6, 4, requires_grad=True)
    w = torch.randn(3, 4, 2, requires_grad=True)
    offs = torch.tensor([3, 3, 6], dtype=torch.int32)
    kabi.ops.grouped_mm(x, w, offs).pow(2).sum().backward()
    reference_x = x.detach().double().requires_grad_()
    reference_w = w.detach().double().requires_grad_()
    expected(reference_x, reference_w, offs).pow(2).sum().backward()
    torch.testing.assert_close(x.grad.double(), reference_x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), reference_w.grad, rtol=1e-5, atol=1e-5)
    assert bool((w.grad[1] == 0).all())


def test_torch_ops_kabi_and_torch_compile_fullgraph() -> None:
    x, w, offs = make_inputs(GROUPED_CASES[0], torch.float32, transposed_weight=True)
    assert_matches(torch.ops.kabi.grouped_mm(x, w, offs), x, w, offs)

    def layer(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return kabi.ops.grouped_mm(x, w, offs) * 2

    compiled = torch.compile(layer, fullgraph=True, backend="inductor")
    out = compiled(x, w, offs)
    verdict = check_output(out, 2 * expected(x, w, offs), TOLERANCE["float32"], expected_dtype=torch.float32)
    assert verdict is None, verdict
    x3, w3, _ = make_inputs(GROUPED_CASES[-2], torch.float32, transposed_weight=False)
    compiled_3d = torch.compile(lambda x, w: kabi.ops.grouped_mm(x, w), fullgraph=True, backend="eager")
    assert_matches(compiled_3d(x3, w3), x3, w3, None)


def test_explain_and_tune_see_every_cpu_kernel() -> None:
    x, w, offs = make_inputs(GROUPED_CASES[0], torch.float32, transposed_weight=True)
    explanation = kabi.explain(kabi.ops.grouped_mm, x, w, offs)
    eligible = {candidate.kernel.name for candidate in explanation.candidates if candidate.eligible}
    assert {"torch.grouped_mm.cpu", "torch.grouped_mm_loop.cpu", "cpu.openblas.grouped_mm"} <= eligible
    result = kabi.tune(kabi.ops.grouped_mm, x, w, offs)
    assert result is not None
    assert kabi.explain(kabi.ops.grouped_mm, x, w, offs).pick in eligible


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_cli_runs_a_generated_routing(capsys, dtype: str) -> None:
    from kabi.cli import main

    status = main(["run", "grouped_mm", "--shape", "E=4,R=40,N=8,K=24", "--dtype", dtype, "--repeat", "3"])
    output = capsys.readouterr().out
    assert status == 0, output
    assert "PASS" in output and "E=4,R=40,N=8,K=24" in output
    status = main(["run", "grouped_mm", "--shape", "4x40x8x24", "--force", "torch.grouped_mm_loop.cpu",
                   "--repeat", "3"])
    output = capsys.readouterr().out
    assert status == 0 and "torch.grouped_mm_loop.cpu" in output and "PASS" in output, output


def test_the_input_generator_draws_routings_with_empty_groups() -> None:
    from kabi.ops._inputs import problem_inputs

    seen_empty = False
    for seed in range(8):
        x, w, offs = problem_inputs("grouped_mm", {"E": 8, "R": 12, "N": 4, "K": 4}, present={"offs"},
                                    generator=seed)
        assert x.shape == (12, 4) and w.shape == (8, 4, 4) and offs.dtype == torch.int32
        assert int(offs[-1]) == 12 and bool((offs.diff() >= 0).all())
        seen_empty |= bool((offs.diff() == 0).any()) or int(offs[0]) == 0
    assert seen_empty
    x, w, offs = problem_inputs("grouped_mm", {"E": 3, "R": 5, "N": 4, "K": 2})
    assert x.shape == (3, 5, 2) and offs is None


def test_a_problem_is_rebuilt_from_its_key_in_both_forms() -> None:
    """What `kabi cache retune` does: inputs whose problem key is the recorded one, offsets valid ones."""
    from kabi._selection.tuning_keys import representative_problem

    w = torch.randn(4, 8, 16).mT
    for x, offs in ((torch.randn(30, 16), torch.tensor([3, 3, 20, 30], dtype=torch.int32)),
                    (torch.randn(4, 5, 16), None)):
        key = kabi.explain(kabi.ops.grouped_mm, x, w, offs).problem_key
        inputs, _ = representative_problem("grouped_mm", key, torch.device("cpu"))
        assert kabi.explain(kabi.ops.grouped_mm, *inputs).problem_key == key
        assert (inputs[2] is None) == (offs is None) and inputs[0].dim() == x.dim()
