"""Two gloo ranks whose local timings disagree still agree on one kernel per problem."""

import datetime
import json
import math
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kabi._base.declarations import Tolerance
from kabi.ops._inputs import inputs_like
from kabi._selection.distributed import DecisionState, agree, agreement_active
from kabi._selection.measure import CandidateTimer, fastest
from kabi._selection.tuning_policy import TuningSettings

# The sleeping kernels below stand for slow kernels, not for a busy machine: no CPU-share check.
QUICK = TuningSettings(warmup=1, repeat=3, min_time_s=0.0, min_cpu_share=0.0)


def _run_ranks(body, directory, world_size=2) -> list:
    """Run ``body(rank, directory)`` on ``world_size`` gloo ranks, each in a fresh process with the process group
    initialized; return what each rank's body returned (JSON), by rank."""
    mp.spawn(_gloo_rank, args=(body, world_size, str(directory)), nprocs=world_size, join=True)
    return [json.loads((directory / f"rank{rank}.json").read_text()) for rank in range(world_size)]


def _gloo_rank(rank, body, world_size, directory):
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(directory, 'init')}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=120))
    try:
        result = body(rank, directory)
        with open(os.path.join(directory, f"rank{rank}.json"), "w") as out:
            json.dump(result, out)
    finally:
        dist.destroy_process_group()


def _delayed_on(slow_rank, delay_s):
    """A correct matmul that sleeps on one rank only: the injected disagreement."""

    def kernel(a, b):
        if dist.get_rank() == slow_rank:
            time.sleep(delay_s)
        return torch.matmul(a, b)

    return kernel


def _every_rank_agreement(rank, directory):
    assert agreement_active()
    candidates = [("slow-on-rank-0", _delayed_on(0, 0.004)), ("slow-on-rank-1", _delayed_on(1, 0.001)),
                  ("wrong-on-rank-1", lambda a, b: torch.matmul(a, b) + dist.get_rank())]
    names = tuple(name for name, _ in candidates)
    make_inputs = lambda: inputs_like("matmul", [torch.empty(16, 8), torch.empty(8, 4)])
    timer = CandidateTimer(candidates, make_inputs, QUICK, reference=torch.matmul, tolerance=Tolerance(2e-5, 1e-4))

    state = DecisionState("float32|CC|1|16|4|8", names, None, True)
    agreement = agree(state, timer, "every-rank")
    adopted = agree(DecisionState("float32|CC|1|16|4|8", names,
                                  tuple((m.kernel, m.time_us, m.note, m.screened) for m in agreement.measurements)
                                  if rank == 1 else None, True), None)
    # This rank's own times (screened ones included) pick what the rank alone would have picked.
    local = [result for result in timer.outcomes.values() if result.passed]
    return {
        "local_pick": min(local, key=lambda result: result.time_us).kernel,
        "agreed_pick": fastest(agreement.measurements).kernel,
        "records": [[m.kernel, m.time_us, m.note] for m in agreement.measurements],
        "adopted_source": adopted.source,
        "adopted": [[m.kernel, m.time_us] for m in adopted.measurements],
    }


@pytest.mark.slow
def test_two_gloo_ranks_agree_although_their_local_timings_disagree(tmp_path):
    ranks = _run_ranks(_every_rank_agreement, tmp_path)
    assert [r["local_pick"] for r in ranks] == ["slow-on-rank-1", "slow-on-rank-0"], "injected delays make local picks differ"
    assert ranks[0]["records"] == ranks[1]["records"], "every rank records the same reduced times"
    assert ranks[0]["agreed_pick"] == ranks[1]["agreed_pick"]
    finite = {name: time_us for name, time_us, _ in ranks[0]["records"] if math.isfinite(time_us)}
    assert ranks[0]["agreed_pick"] == min(finite, key=finite.get)
    [wrong] = [record for record in ranks[0]["records"] if record[0] == "wrong-on-rank-1"]
    assert math.isinf(wrong[1]) and wrong[2].startswith("rank 1: wrong result")
    assert ranks[0]["adopted_source"] == ranks[1]["adopted_source"] == "adopted the records of rank 1"
    assert ranks[0]["adopted"] == ranks[1]["adopted"] == [record[:2] for record in ranks[0]["records"]]


def _split_agreement(rank, directory):
    # Seconds of sleep a candidate costs on (rank 0, rank 1). "fast" is fast on rank 0, which measures it first,
    # but slow on rank 1: once both ranks measured it, "slow" (which only rank 0 measured) is ahead and must be
    # measured on both ranks too before it can be picked.
    delays = {"fast": (0.001, 0.005), "near": (0.006, 0.006), "slow": (0.003, 0.003), "slower": (0.008, 0.008),
              "wrong": (0.0, 0.0)}

    def candidate(name):
        def kernel(a, b):
            time.sleep(delays[name][dist.get_rank()])
            return torch.matmul(a, b) + (1 if name == "wrong" else 0)
        return kernel

    names = tuple(delays)
    make_inputs = lambda: inputs_like("matmul", [torch.empty(16, 8), torch.empty(8, 4)])
    measured = []

    class RecordingTimer(CandidateTimer):
        def screen(self, kernels):
            measured.append(["screen", *kernels])
            return super().screen(kernels)

        def measure(self, kernels, cut_clear_losers=True):
            measured.append(list(kernels))
            return super().measure(kernels, cut_clear_losers=cut_clear_losers)

    timer = RecordingTimer([(name, candidate(name)) for name in names], make_inputs, QUICK,
                           reference=torch.matmul, tolerance=Tolerance(2e-5, 1e-4))
    agreement = agree(DecisionState("float32|CC|1|16|4|8", names, None, True), timer, "split")
    return {"measured": measured, "source": agreement.source,
            "records": [[m.kernel, m.time_us, m.note] for m in agreement.measurements]}


@pytest.mark.slow
def test_split_tuning_shares_the_candidates_and_measures_the_finalists_everywhere(tmp_path):
    ranks = _run_ranks(_split_agreement, tmp_path)
    assert ranks[0]["records"] == ranks[1]["records"], "every rank records the same times"
    # Candidate i goes to rank i % 2 for the screen; then the finalists are measured by both ranks alike: "fast"
    # (the best screen), then those within the margin of its slowest-rank time.
    assert ranks[0]["measured"][0] == ["screen", "fast", "slow", "wrong"]
    assert ranks[1]["measured"][0] == ["screen", "near", "slower"]
    assert ranks[0]["measured"][1:] == ranks[1]["measured"][1:]
    assert ranks[0]["measured"][1:] == [["fast"], ["near", "slow"]]
    records = {name: (time_us, note) for name, time_us, note in ranks[0]["records"]}
    assert math.isinf(records["wrong"][0]) and records["wrong"][1].startswith("rank 0: wrong result")
    # Both finalists carry their slowest rank's time; the others, measured once, are slower than the pick anyway.
    assert records["fast"][0] >= 5000 and 3000 <= records["slow"][0] < records["fast"][0]
    finite = {name: time_us for name, (time_us, _) in records.items() if math.isfinite(time_us)}
    assert min(finite, key=finite.get) == "slow"
    in_full = sum(len(batch) for rank in ranks for batch in rank["measured"] if batch[0] != "screen")
    assert in_full < 2 * len(records), "splitting measured fewer candidates in full than every rank measuring all"
    assert "split among 2 ranks" in ranks[0]["source"]


def test_agreement_is_off_without_an_initialized_process_group():
    assert not dist.is_initialized()
    assert not agreement_active()


def _sleepy_matmul(slow_rank, delay_s):
    def kernel(a, b, out=None):
        if dist.get_rank() == slow_rank:
            time.sleep(delay_s)
        return torch.matmul(a, b)

    return kernel


def _kabi_calls(rank, directory):
    import kabi
    from kabi._base import decision_cache as _decision_cache
    from kabi.ops import _stats

    kabi.cache.set_directory(os.path.join(directory, f"cache-rank{rank}"))  # one cache per node
    for built_in in [k.name for k in kabi.kernels("matmul") if k.device == "cpu"]:
        kabi.unregister_kernel("matmul", built_in)
    kabi.register_kernel("matmul", _sleepy_matmul(0, 0.004), name="slow-on-rank-0", dtypes=["float32"])
    kabi.register_kernel("matmul", _sleepy_matmul(1, 0.001), name="slow-on-rank-1", dtypes=["float32"])
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    with kabi.tuning("first-call", warmup=1, repeat=3, min_time_s=0.0):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
        tuned = kabi.explain(kabi.ops.matmul, a, b)
        runs_after_tuning = _stats.stats().tuning_runs
        # A node that lost its cache adopts the records of a rank that kept them, measuring nothing.
        if rank == 0:
            kabi.cache.clear()
        _decision_cache.invalidate_all()
        kabi.ops.matmul(a, b)
        adopted = kabi.explain(kabi.ops.matmul, a, b)
    return {
        "pick": tuned.pick,
        "reason": tuned.pick_reason,
        "times": {c.name: c.tuned_time_us for c in tuned.candidates if c.eligible},
        "runs_after_tuning": runs_after_tuning,
        "runs_at_end": _stats.stats().tuning_runs,
        "adopted_pick": adopted.pick,
        "adopted_times": {c.name: c.tuned_time_us for c in adopted.candidates if c.eligible},
    }


@pytest.mark.slow
def test_two_gloo_ranks_calling_kabi_ops_record_the_same_times_and_pick(tmp_path):
    ranks = _run_ranks(_kabi_calls, tmp_path)
    assert ranks[0]["times"] == ranks[1]["times"], "both ranks record the MAX-reduced times"
    times = ranks[0]["times"]
    assert ranks[0]["pick"] == ranks[1]["pick"] == min(times, key=times.get)
    assert ranks[0]["reason"] == ranks[1]["reason"] == "tuned"
    # Each kernel is charged its delay on every rank, also where it never slept.
    assert ranks[1]["times"]["slow-on-rank-0"] >= 4000 and ranks[0]["times"]["slow-on-rank-1"] >= 1000
    assert [r["runs_after_tuning"] for r in ranks] == [1, 1]
    assert [r["runs_at_end"] for r in ranks] == [1, 1], "adopting another rank's records measures nothing"
    assert ranks[0]["adopted_times"] == ranks[1]["adopted_times"] == ranks[1]["times"]
    assert ranks[0]["adopted_pick"] == ranks[1]["adopted_pick"] == ranks[0]["pick"]


def _graph_replay_times(rank, directory):
    import kabi
    from kabi._selection import tuner
    from kabi._selection.measure import CandidateMeasurement

    kabi.cache.set_directory(os.path.join(directory, f"graph-cache-rank{rank}"))
    # Replayed in a CUDA graph (faked: this machine has none), openblas wins on rank 0 and loses on rank 1.
    graph_us = {"cpu.openblas.gemm": (10.0, 30.0), "torch.matmul.cpu": (20.0, 20.0)}
    timed = []

    class GraphTimer:
        def __init__(self, settings):
            self.settings = settings

        def screen(self, names):
            timed.append(list(names))
            return [CandidateMeasurement(name, graph_us[name][rank], screened=True) for name in names]

        def measure(self, names, cut_clear_losers=True):
            timed.append(list(names))
            return [CandidateMeasurement(name, graph_us[name][rank]) for name in names]

    tuner._cuda_graph_timer = lambda candidates, make_inputs, settings, device, **gate: GraphTimer(settings)
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    with kabi.tuning("graph", warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf,
                     min_cpu_share=0.0):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
        explained = kabi.explain(kabi.ops.matmul, a, b)
    graph_records = {record.kernel: record.time_us for record in kabi.cache.show("matmul")
                     if record.execution_mode == "graph"}
    return {"pick": explained.pick, "mode": explained.execution_mode, "graph": graph_records, "timed": timed}


@pytest.mark.slow
def test_ranks_agree_on_graph_replay_times_too(tmp_path):
    ranks = _run_ranks(_graph_replay_times, tmp_path)
    assert ranks[0]["graph"] == ranks[1]["graph"] == {"cpu.openblas.gemm": 30.0, "torch.matmul.cpu": 20.0}
    assert ranks[0]["mode"] == ranks[1]["mode"] == "graph"
    assert ranks[0]["pick"] == ranks[1]["pick"] == "torch.matmul.cpu", "rank 0 alone would have picked openblas"
    assert all(ranks[rank]["timed"] for rank in range(2)), "both ranks timed replays"


def test_agreed_times_keep_the_widest_spread_and_any_ranks_noise():
    from kabi._selection.distributed import _reduce

    per_rank = [
        [("a", 10.0, "", 0.05, False), ("b", 12.0, "", 0.10, False)],
        [("a", 11.0, "noisy: spread 40%", 0.40, True), ("b", 13.0, "", 0.02, False)],
    ]
    a, b = _reduce(per_rank, ("a", "b"))
    assert (a.time_us, a.spread, a.noisy) == (11.0, 0.40, True) and a.note == "rank 1: noisy: spread 40%"
    assert (b.time_us, b.spread, b.noisy, b.note) == (13.0, 0.10, False, "")
