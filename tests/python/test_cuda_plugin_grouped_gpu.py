"""The CUDA plugin's CUTLASS grouped GEMMs for grouped_mm (sm_90a ptr-array kernels, TMA + wgmma, CUTLASS's group tile
scheduler, the groups' rows prepared on the device) on an sm_90 GPU, each forced in turn with kabi.use (so each is also
gated): against the op's float64 reference with its tolerances on fresh random inputs with balanced and Zipf routings,
empty groups, every row in one group, a T that is a multiple of nothing, rows past the last offset (zeroed), offsets that
need clamping, more groups than one chunk of the setup kernel's scan, both weight layouts, bfloat16 and float16 and the
3-D form, each output inside poisoned guard regions; inside a CUDA-graph capture replayed on new routings written into
the same offsets; and K or N off 16 bytes declined, not computed wrong."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core

from _cuda_plugin_declarations import PLUGIN
from _grouped_checks import assert_matches
from _guarded_outputs import POISON, assert_guards_intact, guarded_output

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm_90 GPU (the kernels are sm_90a code)"),
]

DTYPES = [torch.bfloat16, torch.float16]
LAYOUTS = ["linear_weight", "row_major_weight"]
PREFIX = "cuda.cutlass.sm90.grouped."
# More groups than the setup kernel scans at once (its blocks have 256 threads), so the clamped ends carry over chunks.
MANY_GROUPS = 300


def _kernels() -> list[str]:
    _core.plugin_load_builtin()
    return sorted(kernel["name"] for kernel in _core.kernel_list()
                  if kernel["plugin"] == PLUGIN and kernel["op"] == "grouped_mm" and kernel["name"].startswith(PREFIX))


@pytest.fixture(scope="module")
def kernels() -> list[str]:
    names = _kernels()
    assert len(names) == 3, f"expected the 3 CUTLASS grouped GEMMs on sm_90, found {names}"
    return names


def _balanced(groups: int, rows: int, generator: torch.Generator) -> list[int]:
    """Each row's group drawn uniformly."""
    return torch.bincount(torch.randint(0, groups, (rows,), generator=generator), minlength=groups).tolist()


def _zipf(groups: int, rows: int, generator: torch.Generator) -> list[int]:
    """Each row's group drawn with probability proportional to 1 / rank: a few hot groups, many cold or empty."""
    weights = 1.0 / torch.arange(1, groups + 1, dtype=torch.float64)
    drawn = torch.multinomial(weights, rows, replacement=True, generator=generator)
    return torch.bincount(drawn, minlength=groups).tolist()


# name -> (rows of each group, or a routing of (groups, rows); rows past the last offset; N; K). N and K are multiples
# of 8 (16 bytes) but of no tile; T is odd everywhere.
ROUTINGS = {
    "balanced": ((_balanced, 16, 1009), 0, 264, 200),
    "zipf": ((_zipf, 32, 2011), 0, 520, 328),
    "empty-groups": ((37, 0, 0, 120, 0, 5, 0, 301), 0, 136, 72),
    "every-row-in-one-group": ((0, 0, 999, 0), 0, 264, 136),
    "rows-past-the-last-offset": ((50, 13, 0, 77), 61, 136, 264),
    "single-row": ((0, 1, 0), 0, 8, 8),
    "many-groups": ((_balanced, MANY_GROUPS, 4001), 17, 128, 64),
}


def _weight(groups: int, k: int, n: int, dtype: torch.dtype, layout: str, generator: torch.Generator) -> torch.Tensor:
    """w [E, K, N]: the transposed view of an nn.Linear [E, N, K] weight, or row-major."""
    if layout == "linear_weight":
        return torch.randn(groups, n, k, device="cuda", generator=generator).to(dtype).mT
    return torch.randn(groups, k, n, device="cuda", generator=generator).to(dtype)


def _inputs(routing: str, dtype: torch.dtype, layout: str, seed: int):
    """Fresh standard-normal x and w and the routing's int32 offsets, on the GPU."""
    rows_of_groups, tail, n, k = ROUTINGS[routing]
    host = torch.Generator().manual_seed(seed)
    device = torch.Generator(device="cuda").manual_seed(seed)
    if callable(rows_of_groups[0]):
        route, groups, rows = rows_of_groups
        rows_of_groups = route(groups, rows, host)
    offs = torch.tensor(rows_of_groups, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    x = torch.randn(sum(rows_of_groups) + tail, k, device="cuda", generator=device).to(dtype)
    return x, _weight(len(rows_of_groups), k, n, dtype, layout, device), offs


def _run_forced(kernel: str, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None):
    """kabi.ops.grouped_mm forced to ``kernel``, writing into a guarded output; the output and its buffer."""
    out, buffer = guarded_output((*x.shape[:-1], w.shape[-1]), x.dtype)
    with kabi.use(grouped_mm=kernel):
        kabi.ops.grouped_mm(x, w, offs, out=out)
    torch.cuda.synchronize()
    return out, buffer


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("routing", list(ROUTINGS))
def test_every_grouped_kernel_matches_the_reference(kernels: list[str], routing: str, dtype: torch.dtype,
                                                    layout: str) -> None:
    for seed, kernel in enumerate(kernels):
        x, w, offs = _inputs(routing, dtype, layout, seed)
        out, buffer = _run_forced(kernel, x, w, offs)
        assert_matches(out, x, w, offs)
        assert_guards_intact(buffer, kernel)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_offsets_are_clamped_as_the_op_says(kernels: list[str], dtype: torch.dtype) -> None:
    # Offsets on the device are never checked: each kernel clamps them into [previous end, T], as the reference does.
    # Here they fall, go negative and leave rows past the largest one; then one passes T, which ends every later group.
    x, w, _ = _inputs("empty-groups", dtype, "linear_weight", seed=5)
    rows = x.shape[0]
    for values in ([40, 12, 200, -3, 250, rows - 60, 300, rows - 20], [40, 12, rows + 50, -3, 7, rows - 9, 30, 1]):
        offs = torch.tensor(values, dtype=torch.int32, device="cuda")
        for kernel in kernels:
            out, buffer = _run_forced(kernel, x, w, offs)
            assert_matches(out, x, w, offs)
            assert_guards_intact(buffer, kernel)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_3d_form(kernels: list[str], dtype: torch.dtype, layout: str) -> None:
    generator = torch.Generator(device="cuda").manual_seed(11)
    groups, rows, n, k = 5, 77, 264, 200
    for kernel in kernels:
        x = torch.randn(groups, rows, k, device="cuda", generator=generator).to(dtype)
        w = _weight(groups, k, n, dtype, layout, generator)
        out, buffer = _run_forced(kernel, x, w, None)
        assert_matches(out, x, w, None)
        assert_guards_intact(buffer, kernel)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_moe_prefill_layer(kernels: list[str], dtype: torch.dtype) -> None:
    # Qwen3-30B-A3B's down projection (E=128, K=768, N=2048) on 8192 routed rows, Zipf routing, nn.Linear weights.
    generator = torch.Generator().manual_seed(3)
    device = torch.Generator(device="cuda").manual_seed(3)
    rows_of_groups = _zipf(128, 8192, generator)
    offs = torch.tensor(rows_of_groups).cumsum(0).to(torch.int32).cuda()
    x = torch.randn(8192, 768, device="cuda", generator=device).to(dtype)
    w = _weight(128, 768, 2048, dtype, "linear_weight", device)
    for kernel in kernels:
        out, buffer = _run_forced(kernel, x, w, offs)
        assert_matches(out, x, w, offs)
        assert_guards_intact(buffer, kernel)


def test_a_captured_call_serves_new_routings_on_replay(kernels: list[str]) -> None:
    # The setup kernel reads the offsets on the device, so a graph captured once computes each new routing written
    # into the same offsets, rows past the last offset zeroed on every replay.
    dtype = torch.bfloat16
    generator = torch.Generator().manual_seed(17)
    for kernel in kernels:
        x, w, offs = _inputs("balanced", dtype, "linear_weight", seed=23)
        groups, rows = w.shape[0], x.shape[0]
        out = torch.empty(rows, w.shape[-1], device="cuda", dtype=dtype)
        with kabi.use(grouped_mm=kernel):
            # Outside the capture first: the gate's verdict and the workspace exist before it.
            kabi.ops.grouped_mm(x, w, offs, out=out)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                kabi.ops.grouped_mm(x, w, offs, out=out)
        for routed in (rows, rows - 100, rows // 3):
            counts = _zipf(groups, routed, generator)
            offs.copy_(torch.tensor(counts).cumsum(0).to(torch.int32))
            x.copy_(torch.randn(x.shape, generator=generator).to(dtype))
            out.fill_(POISON)
            graph.replay()
            torch.cuda.synchronize()
            assert_matches(out, x, w, offs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_k_or_n_off_16_bytes_is_declined_not_computed_wrong(kernels: list[str], dtype: torch.dtype) -> None:
    generator = torch.Generator(device="cuda").manual_seed(29)
    offs = torch.tensor([30, 30, 77], dtype=torch.int32, device="cuda")
    for k, n, dimension in ((100, 136, "K is 100"), (136, 100, "N is 100")):
        for layout in LAYOUTS:
            x = torch.randn(77, k, device="cuda", generator=generator).to(dtype)
            w = _weight(3, k, n, dtype, layout, generator)
            candidates = {candidate.name: candidate
                          for candidate in kabi.explain(kabi.ops.grouped_mm, x, w, offs).candidates}
            out, buffer = guarded_output((77, n), dtype)
            for kernel in kernels:
                what = f"{kernel}, {layout}, K={k} N={n}"
                assert not candidates[kernel].eligible, f"{what}: offered"
                assert dimension in candidates[kernel].reason, f"{what}: {candidates[kernel].reason}"
                with pytest.raises(kabi.KabiError), kabi.use(grouped_mm=kernel):
                    kabi.ops.grouped_mm(x, w, offs, out=out)
                torch.cuda.synchronize()
                assert bool((buffer == POISON).all()), f"{what}: declined but wrote"
