"""Peers: what a user would run instead of kabi, measured beside it in the same process and run.

A :class:`Peer` is data: a name, a predicate saying where it applies, and a function that builds a zero-argument
callable on one problem's inputs. A peer that needs a package names it in ``requires``; where that package is not
installed the peer is recorded as skipped, with the reason, instead of being measured. Building or calling a peer
may raise: the runner records the error and goes on.

The builders here are shared by ops: :func:`inductor` compiles the same computation with ``torch.compile`` in
``max-autotune-no-cudagraphs`` mode (Inductor's measured choice among its Triton templates and cuBLAS), and
:func:`preferred_blas` scopes torch's BLAS library (cuBLAS or cuBLASLt) around a peer's measurement.

Example::

    >>> peer = Peer("torch.matmul", applies=lambda problem, device: True,
    ...             build=lambda inputs: (lambda: torch.matmul(*inputs)))
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator

import torch

__all__ = ["Peer", "inductor", "missing_requirement", "preferred_blas"]


@dataclass(frozen=True)
class Peer:
    """One alternative to kabi for an op.

    ``applies(problem, device)`` says whether the peer can run the problem at all (a 2-D-only library on a batched
    problem cannot); ``build(inputs)`` returns the callable that is timed; ``scope()``, when given, is entered
    around every measurement of the peer (a library setting); ``requires`` names the module the peer imports.
    """

    name: str
    applies: Callable[[Any, torch.device], bool]
    build: Callable[[tuple[Any, ...]], Callable[[], Any]]
    scope: Callable[[], ContextManager[Any]] = contextlib.nullcontext
    requires: str = ""
    description: str = ""


def missing_requirement(peer: Peer) -> str | None:
    """Why the peer cannot be measured in this environment (its module is not installed), or None."""
    if peer.requires and importlib.util.find_spec(peer.requires) is None:
        return f"skipped: the {peer.requires} package is not installed"
    return None


@contextlib.contextmanager
def preferred_blas(library: str) -> Iterator[None]:
    """torch's BLAS library for CUDA matrix products is ``library`` ("cublas" or "cublaslt") inside the scope."""
    previous = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


def inductor(function: Callable[..., Any]) -> Callable[[tuple[Any, ...]], Callable[[], Any]]:
    """A peer builder: ``function`` compiled by torch.compile with ``mode="max-autotune-no-cudagraphs"``.

    Dynamo's caches are reset first so that every problem compiles and tunes afresh (a cache grown across
    problems would reach its recompile limit and fall back to eager silently). The first call compiles and tunes;
    the runner times it as the peer's setup.
    """

    def build(inputs: tuple[Any, ...]) -> Callable[[], Any]:
        torch._dynamo.reset()
        compiled = torch.compile(function, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)
        return lambda: compiled(*inputs)

    return build
