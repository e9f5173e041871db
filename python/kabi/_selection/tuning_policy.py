"""When kabi may tune, and how long it may measure: ``KABI_TUNE`` and the ``kabi.tuning(...)`` context.

Modes:

- ``"first-call"`` (the default): the first call of a problem that no process has tuned before measures every
  eligible candidate and remembers the fastest correct one in the persistent tuning cache. Later calls, in this
  process and in every later process on the same device, reuse that decision without measuring.
- ``"off"``: never measure; use what the tuning cache remembers, else the heuristic.
- ``"graph"`` (a scope only, not ``KABI_TUNE``): as ``"first-call"``, for calls that will be captured in a CUDA
  graph and replayed: the tuner also times the candidates replayed in a graph, and the calls in the scope use the
  picks measured that way (where none exists, the eager pick). Warm a model up under ``kabi.tuning(mode="graph")``
  before capturing it, and capture it in the same scope.

Why first-call by default: the cost is paid once per (device, op, problem key, kernel versions) across all
processes and restarts, and it is bounded (each candidate gets a one-round screen; those near the fastest then get
``repeat`` interleaved rounds lasting ``min_time_s`` together, and a noisy one at most two measurements more), while
the heuristic alone is often wrong about which kernel is fastest. Latency-critical services can pre-fill the cache
offline (``kabi tune``, ``kabi cache export/import``) and run with ``KABI_TUNE=off``.

Whatever the mode, no tuning happens while a CUDA graph is being captured or while torch.compile traces: measuring
would record launches into the graph or run kernels on fake tensors. Those calls use the remembered or heuristic
decision.

Example::

    >>> import kabi
    >>> with kabi.tuning("off"):
    ...     pass  # calls here never benchmark
    >>> with kabi.tuning(repeat=5, min_time_s=0.0):
    ...     pass  # calls here tune with quick, noisier measurements
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .._base.errors import InvalidArgumentError
from ..ops import _scopes

__all__ = [
    "TuningSettings", "tuning", "current_settings", "inputs_are_fake", "measurement_blocked_reason",
    "tuning_blocked_reason",
]

MODES = ("off", "first-call", "graph")
_ENVIRONMENT_VARIABLES = {
    "mode": "KABI_TUNE",
    "warmup": "KABI_TUNE_WARMUP",
    "repeat": "KABI_TUNE_REPEAT",
    "min_time_s": "KABI_TUNE_MIN_TIME_S",
    "max_spread": "KABI_TUNE_MAX_SPREAD",
    "min_cpu_share": "KABI_TUNE_MIN_CPU_SHARE",
    "screen_margin": "KABI_TUNE_SCREEN_MARGIN",
    "condition_s": "KABI_TUNE_CONDITION_S",
}


@dataclass(frozen=True)
class TuningSettings:
    """The tuning mode and the measurement budget of each candidate: ``warmup`` calls, then ``repeat`` rounds
    interleaved with the other candidates', lasting at least ``min_time_s`` together (see
    :mod:`kabi._selection.measure`).

    ``max_spread`` bounds the relative spread of a measurement's rounds ((slowest - fastest) / median): a candidate
    above it is measured again, and if it stays above, its time is used in this process but never persisted.
    ``math.inf`` accepts every measurement.

    ``min_cpu_share`` catches the load that a spread cannot see: a machine so busy that every sample waits alike.
    On the CPU a candidate whose samples got less than this share of the process's wall time as CPU time (all its
    threads together) was starved while timed; it is treated like a noisy one. 0 turns the check off.

    ``screen_margin`` bounds the screen that precedes the full measurement: every candidate that passed the gate is
    first timed for one round, and only those whose screened time is within this fraction of the fastest screened
    time are measured in full; the others keep their screened time, which never wins. 0.25 (the default) equals the
    default ``max_spread``: the full measurement accepts rounds that lie 25% apart as clean, so a screen (one round)
    may be that far off without anything being wrong, and a narrower margin could cut the true winner on ordinary
    noise. ``math.inf`` turns the screen off (every candidate is measured in full).

    ``condition_s`` bounds the unmeasured run of a candidate's own calls before each of its samples on a GPU, which
    lasts as long as ``measure.CONDITION_CALLS`` of its calls, up to ``condition_s``: a power-limited GPU's clock follows the
    load of the last tens of milliseconds, so without it a candidate is timed partly at the clock its predecessor in
    the round left (on the H200 at 8192^3 bf16 the tuner picked a CUTLASS kernel that measured 1644 us there and 1803
    us in the benchmark, whose samples are conditioned alike, against 1539 us for cuBLASLt). The bound keeps the cost
    where it pays: long, compute-bound calls get the full ``condition_s``, microsecond-scale ones a few calls. 0
    turns it off."""

    mode: str = "first-call"
    warmup: int = 2
    repeat: int = 7
    min_time_s: float = 0.02
    max_spread: float = 0.25
    min_cpu_share: float = 0.5
    screen_margin: float = 0.25
    condition_s: float = 0.03

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidArgumentError(f"tuning mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")
        for name in ("warmup", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"tuning {name} must be an integer >= 1, got {value!r}")
        if isinstance(self.min_time_s, bool) or not isinstance(self.min_time_s, (int, float)) or not self.min_time_s >= 0:
            raise InvalidArgumentError(f"tuning min_time_s must be a number of seconds >= 0, got {self.min_time_s!r}")
        if isinstance(self.max_spread, bool) or not isinstance(self.max_spread, (int, float)) or not self.max_spread > 0:
            raise InvalidArgumentError(
                f"tuning max_spread must be a fraction > 0 (0.25 = 25%, inf = any), got {self.max_spread!r}")
        share = self.min_cpu_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < float("inf"):
            raise InvalidArgumentError(
                f"tuning min_cpu_share must be a finite fraction >= 0 (0.5 = half a core, 0 = off), got {share!r}")
        margin = self.screen_margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0:
            raise InvalidArgumentError(
                f"tuning screen_margin must be a fraction > 0 (0.25 = 25%, inf = no screen), got {margin!r}")
        condition = self.condition_s
        if isinstance(condition, bool) or not isinstance(condition, (int, float)) or not 0 <= condition < float("inf"):
            raise InvalidArgumentError(
                f"tuning condition_s must be a finite number of seconds >= 0 (0 = off), got {condition!r}")


_scoped_settings: contextvars.ContextVar[TuningSettings | None] = contextvars.ContextVar(
    "kabi_tuning_settings", default=None
)


def _settings_from_environment() -> TuningSettings:
    values: dict[str, object] = {}
    for field, variable in _ENVIRONMENT_VARIABLES.items():
        text = os.environ.get(variable, "").strip()
        if not text:
            continue
        if field == "mode":
            values[field] = text.lower()
            if values[field] == "graph":
                # Graph-mode picks serve the calls that will be captured, not every call of the process: eager calls
                # elsewhere would run kernels picked for replay.
                raise InvalidArgumentError(
                    f"{variable}=graph: graph-mode picks are asked for around the calls that will be captured, with "
                    f"the scope kabi.tuning(mode='graph'); {variable} takes 'off' or 'first-call'")
            continue
        try:
            values[field] = (float(text) if field in ("min_time_s", "max_spread", "min_cpu_share", "screen_margin",
                                                     "condition_s")
                             else int(text))
        except ValueError:
            raise InvalidArgumentError(f"{variable}={text!r} is not a number") from None
    try:
        return TuningSettings(**values)
    except ValueError as error:
        raise InvalidArgumentError(f"bad tuning environment ({', '.join(_ENVIRONMENT_VARIABLES.values())}): {error}") from None


def current_settings() -> TuningSettings:
    """The innermost ``kabi.tuning(...)`` scope's settings, else those of the environment, else the defaults."""
    scoped = _scoped_settings.get()
    return scoped if scoped is not None else _settings_from_environment()


@contextlib.contextmanager
def tuning(
    mode: str | None = None,
    *,
    warmup: int | None = None,
    repeat: int | None = None,
    min_time_s: float | None = None,
    max_spread: float | None = None,
    min_cpu_share: float | None = None,
    screen_margin: float | None = None,
    condition_s: float | None = None,
) -> Iterator[TuningSettings]:
    """Scope the tuning policy: ``mode`` is ``"off"``, ``"first-call"`` or ``"graph"`` (first-call, and the calls
    in the scope are selected for CUDA-graph replay; see the module docstring); ``warmup``, ``repeat`` and
    ``min_time_s`` set how long each candidate is measured, ``max_spread`` how noisy a measurement may be and still
    be persisted, ``min_cpu_share`` how starved of CPU time, ``screen_margin`` how far behind the fastest a
    candidate's screen may be and still be measured in full, ``condition_s`` how long a candidate may run unmeasured
    before each sample on a GPU (see :class:`TuningSettings`). Unset arguments keep the enclosing scope's (or the
    environment's) values.

    Example::

        with kabi.tuning("first-call", repeat=5):
            kabi.ops.matmul(a, b)
    """
    changes = {
        name: value
        for name, value in (("mode", mode), ("warmup", warmup), ("repeat", repeat), ("min_time_s", min_time_s),
                            ("max_spread", max_spread), ("min_cpu_share", min_cpu_share),
                            ("screen_margin", screen_margin), ("condition_s", condition_s))
        if value is not None
    }
    settings = dataclasses.replace(current_settings(), **changes)
    token = _scoped_settings.set(settings)
    try:
        with _scopes.execution("graph" if settings.mode == "graph" else "eager"):
            yield settings
    finally:
        _scoped_settings.reset(token)


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    return bool(torch._dynamo.is_compiling())


def _is_capturing_cuda_graph(inputs: Sequence[torch.Tensor]) -> bool:
    devices = {tensor.device for tensor in inputs if isinstance(tensor, torch.Tensor)} or {torch.device("cuda")}
    return any(_scopes.cuda_graph_capturing(device) for device in devices)


def inputs_are_fake(inputs: Sequence[torch.Tensor]) -> bool:
    """Whether any input is a fake or meta tensor: a call on them runs no kernel on data."""
    return any(
        isinstance(tensor, FakeTensor) or tensor.device.type == "meta"
        for tensor in inputs
        if isinstance(tensor, torch.Tensor)
    )


def measurement_blocked_reason(inputs: Sequence[torch.Tensor] = ()) -> str | None:
    """Why no candidate may be run for measuring or gating right now, whatever the tuning mode, or None."""
    if _is_compiling():
        return "torch.compile is tracing"
    if _is_capturing_cuda_graph(inputs):
        return "a CUDA graph is being captured"
    if inputs_are_fake(inputs):
        return "the inputs are fake or meta tensors (tracing)"
    return None


def tuning_blocked_reason(inputs: Sequence[torch.Tensor] = (), settings: TuningSettings | None = None) -> str | None:
    """Why tuning may not run for a call with these inputs right now, or None when it may."""
    settings = settings if settings is not None else current_settings()
    if settings.mode == "off":
        return "tuning is off (KABI_TUNE=off or kabi.tuning('off'))"
    return measurement_blocked_reason(inputs)
