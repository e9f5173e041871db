"""Split tuning that pays (issue 14, item 5): with the screen, each of two gloo ranks gates and screens only its
share of the candidates; the finalists are measured on both and MAX-reduced; both ranks record the same times and
pick alike, as one rank alone would, while each does less work than the one rank alone."""

import datetime
import json
import math
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Milliseconds each candidate sleeps per call: two close leaders (long enough that a sleep's overshoot on a busy
# machine stays well inside the screen's margin), four clearly slower ones.
DELAYS_MS = {"fast": 4.0, "near": 4.2, "slow1": 20.0, "slow2": 24.0, "slow3": 28.0, "slow4": 32.0}


def _tune_once(rank, world, init_file, result_dir):
    import kabi
    from kabi.ops import _stats

    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
    try:
        kabi.cache.set_directory(os.path.join(result_dir, f"cache-{world}-{rank}"))
        for built_in in [kernel.name for kernel in kabi.kernels("matmul") if kernel.device == "cpu"]:
            kabi.unregister_kernel("matmul", built_in)
        calls = dict.fromkeys(DELAYS_MS, 0)

        def sleeper(name):
            def kernel(a, b, out=None):
                calls[name] += 1
                time.sleep(DELAYS_MS[name] / 1000)
                return torch.matmul(a, b)
            return kernel

        for name in DELAYS_MS:
            kabi.register_kernel("matmul", sleeper(name), name=name, dtypes=["float32"])
        a, b = torch.randn(16, 8), torch.randn(8, 4)
        # Sleeping kernels stand for slow ones, not for a busy machine: no noise bounds.
        with kabi.tuning("first-call", warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
            torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
        explanation = kabi.explain(kabi.ops.matmul, a, b)
        records = {record.kernel: [record.time_us, record.screened] for record in kabi.cache.show("matmul")}
        stats = _stats.stats()
        with open(os.path.join(result_dir, f"world{world}-rank{rank}.json"), "w") as out:
            json.dump({"pick": explanation.pick, "records": records, "calls": calls,
                       "benchmarked": stats.candidates_benchmarked, "screened_out": stats.candidates_screened_out},
                      out)
    finally:
        if world > 1:
            dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_share_the_screen_and_agree_with_less_work_each_than_one_rank(tmp_path):
    mp.spawn(_tune_once, args=(1, str(tmp_path / "init-1"), str(tmp_path)), nprocs=1, join=True)
    mp.spawn(_tune_once, args=(2, str(tmp_path / "init-2"), str(tmp_path)), nprocs=2, join=True)
    alone = json.loads((tmp_path / "world1-rank0.json").read_text())
    ranks = [json.loads((tmp_path / f"world2-rank{rank}.json").read_text()) for rank in range(2)]

    assert alone["pick"] in ("fast", "near") and alone["screened_out"] == 4
    assert ranks[0]["records"] == ranks[1]["records"], "both ranks record the same times"
    assert ranks[0]["pick"] == ranks[1]["pick"] in ("fast", "near")
    records = ranks[0]["records"]
    assert {name for name, (_, screened) in records.items() if screened} == {"slow1", "slow2", "slow3", "slow4"}
    assert all(time_us >= DELAYS_MS[name] * 1000 for name, (time_us, _) in records.items())

    # Candidate i is screened by rank i % 2 only; a slow candidate is never run by the other rank.
    shares = [["fast", "slow1", "slow3"], ["near", "slow2", "slow4"]]
    for rank, share in enumerate(shares):
        never_run = [name for name in DELAYS_MS if name not in share and name not in ("fast", "near")]
        assert all(ranks[rank]["calls"][name] == 0 for name in never_run), ranks[rank]["calls"]
        assert ranks[rank]["benchmarked"] == 4, "its share of 3, and the finalist it did not screen"
    assert all(sum(rank["calls"].values()) < sum(alone["calls"].values()) for rank in ranks)
    assert alone["benchmarked"] == 6
