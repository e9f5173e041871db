"""Measuring one problem: kabi's tuning through the public call, then kabi's automatic choice, every eligible
candidate forced with ``kabi.use``, and every applicable peer, gated against the op's float64 reference and timed
interleaved (:mod:`._timing`). Returns the problem's record for the results document.

Every implementation's output is checked before it is timed, so a figure is never that of a wrong result. A peer
that cannot be built, raises, or returns a wrong result is recorded as failed with the reason; one whose package is
not installed as skipped. Nothing a peer does stops the run.

Example::

    >>> record = measure_problem(MATMUL, problem, torch.device("cpu"), MATMUL.peers, TimingSettings(), roof)  # doctest: +SKIP
    >>> record["ratios"]["cpu"]["auto/oracle"]                                                          # doctest: +SKIP
    0.99
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch

from .._base.declarations import op_spec, resolve_callable
from .._selection.correctness import check_output, reference_output
from .._selection.explain import explain
from .._selection.tuning_policy import tuning
from ..ops._front import front_of
from ..ops._scopes import use
from ..ops._stats import stats
from ._peers import Peer, missing_requirement
from ._problems import BenchProblem, OpBenchmark
from ._results import problem_ratios
from ._roof import Roof
from ._timing import Subject, TimingSettings, describe_error, measure_interleaved, synchronize

__all__ = ["measure_problem", "modes_of"]


def modes_of(benchmark: OpBenchmark, problem: BenchProblem, device: torch.device) -> tuple[tuple[str, ...], str]:
    """The timing modes of a problem and the primary one (the figure that is compared)."""
    if device.type == "cpu":
        return ("cpu",), "cpu"
    if benchmark.host_bound(problem):
        return ("cuda-events", "cuda-graph"), "cuda-graph"
    return ("cuda-events",), "cuda-events"


def _record(name: str, kind: str, status: str = "ok", error: str = "", setup_s: float | None = None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "status": status, "error": error, "setup_s": setup_s, "times": {}}


def _gate(subject: Subject, reference: torch.Tensor, tolerance: Any, dtype: torch.dtype,
          device: torch.device) -> tuple[str, list[int] | None]:
    """"" if the subject's output matches the reference, else why not; and the output's strides (None where it is
    not one tensor). The strides tell a peer that returns a strided view of a padded buffer (Inductor's padded
    products) from one that pays for a contiguous result, as torch.matmul and kabi do."""
    try:
        with subject.scope():
            output = subject.fn()
        synchronize(device)
    except Exception as error:
        return f"raised {describe_error(error)}", None
    strides = list(output.stride()) if isinstance(output, torch.Tensor) else None
    return check_output(output, reference, tolerance, dtype) or "", strides


def _kabi_subjects(benchmark: OpBenchmark, inputs: tuple[Any, ...], attributes: dict[str, Any],
                   device: torch.device) -> tuple[list[Subject], dict[str, Any], str]:
    """Tune through the public call (timing it), then the automatic choice and each eligible candidate forced; and
    why the public call failed ("" when it did not). A failing call is a finding of the run, recorded as the
    automatic choice's failure, not the end of the suite: its candidates and the peers are still measured."""
    function = front_of(benchmark.op).function
    before = stats().tuning_seconds
    failure = ""
    try:
        with tuning("first-call"):
            function(*inputs, **attributes)
            synchronize(device)
    except Exception as error:
        failure = f"raised {describe_error(error)}"
    tuning_s = stats().tuning_seconds - before
    explanation = explain(function, *inputs, **attributes)
    call = lambda: function(*inputs, **attributes)
    subjects = [] if failure else [Subject("auto", "auto", call)]
    subjects += [Subject(candidate.name, "candidate", call, scope=lambda name=candidate.name: use(**{benchmark.op: name}))
                 for candidate in explanation.candidates if candidate.eligible]
    kabi = {"pick": None, "reason": f"the automatic call {failure}", "tuning_s": tuning_s} if failure else \
        {"pick": explanation.pick, "reason": explanation.reason, "tuning_s": tuning_s}
    return subjects, kabi, failure


def _peer_subject(peer: Peer, inputs: tuple[Any, ...], device: torch.device) -> tuple[Subject | None, dict[str, Any]]:
    """Build the peer and make its first call (for Inductor: compile and tune), timed as its setup."""
    missing = missing_requirement(peer)
    if missing is not None:
        return None, _record(peer.name, "peer", "skipped", missing)
    start = time.perf_counter()
    try:
        fn = peer.build(inputs)
        with peer.scope():
            fn()
        synchronize(device)
    except Exception as error:
        return None, _record(peer.name, "peer", "failed", f"raised {describe_error(error)}")
    return Subject(peer.name, "peer", fn, peer.scope), _record(peer.name, "peer", setup_s=time.perf_counter() - start)


def measure_problem(benchmark: OpBenchmark, problem: BenchProblem, device: torch.device, peers: Sequence[Peer],
                    settings: TimingSettings, roof: Roof) -> dict[str, Any]:
    """Measure one problem and return its record (see ``result.schema.json``, ``$defs.problem``)."""
    spec = op_spec(benchmark.op)
    inputs = benchmark.make_inputs(problem, device)
    reference = reference_output(resolve_callable(spec.reference), inputs)
    output_dtype = benchmark.output_dtype(problem)
    dtype, tolerance = getattr(torch, output_dtype), spec.tolerance[output_dtype]
    subjects, kabi, failure = _kabi_subjects(benchmark, inputs, benchmark.attributes(problem), device)
    records = {"auto": _record("auto", "auto", "failed", failure)} if failure else {}
    records.update((subject.name, _record(subject.name, subject.kind)) for subject in subjects)
    for peer in peers:
        if peer.applies(problem, device):
            subject, records[peer.name] = _peer_subject(peer, inputs, device)
            subjects += [subject] if subject is not None else []
    timed = []
    for subject in subjects:
        note, records[subject.name]["output_strides"] = _gate(subject, reference, tolerance, dtype, device)
        if note:
            records[subject.name].update(status="failed", error=note)
        else:
            timed.append(subject)
    del reference
    modes, primary = modes_of(benchmark, problem, device)
    timings = measure_interleaved(timed, modes, device, settings)
    flops, bytes_moved = benchmark.flops(problem), benchmark.bytes_moved(problem)
    roof_us = roof.time_us(problem.dtype, flops, bytes_moved)
    for subject in timed:
        record = records[subject.name]
        for mode, timing in timings[subject.name].items():
            record["times"][mode] = {
                "median_us": timing.median_us, "round_medians_us": list(timing.round_medians_us),
                "min_us": timing.min_us, "calls_per_sample": timing.calls_per_sample,
                "tflops": flops / (timing.median_us * 1e6), "gbps": bytes_moved / (timing.median_us * 1e3),
                "roof_fraction": roof_us / timing.median_us,
            }
        if subject.errors:
            record["error"] = "; ".join(f"{mode}: {error}" for mode, error in subject.errors.items())
            record["status"] = "ok" if record["times"] else "failed"
    implementations = list(records.values())
    oracles, ratios = {}, {}
    for mode in modes:
        oracles[mode], ratios[mode] = problem_ratios(implementations, mode, kabi["pick"])
    return {
        "key": problem.key, "shape": list(problem.shape), "dtype": problem.dtype, "layout": problem.layout,
        "flops": flops, "bytes": bytes_moved, "roof_us": roof_us, "modes": list(modes), "primary_mode": primary,
        "kabi": kabi, "oracle": oracles, "ratios": ratios, "implementations": implementations,
    }
