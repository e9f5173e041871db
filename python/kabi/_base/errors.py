"""The exceptions kabi raises, and the one table that maps the C ABI's status codes onto them.

Every failure of a libkabi call reaches Python through ``STATUS_EXCEPTIONS``: the binding (``kabi._core``) reads
this table when it loads and raises the class registered for the status, with libkabi's message. Python-only
checks raise the same classes, so ``except kabi.KabiError`` catches everything kabi raises on purpose, while
``except ValueError`` / ``TypeError`` keep working for callers who do not know kabi.

Example::

    try:
        kabi.ops.matmul(a, b)
    except kabi.InvalidArgumentError as error:  # also a ValueError
        print(error.status, error)
"""

from __future__ import annotations

from typing import Iterable

__all__ = [
    "AbiMismatchError",
    "AlreadyExistsError",
    "ArgumentTypeError",
    "ConstraintViolatedError",
    "InternalError",
    "InvalidArgumentError",
    "KabiError",
    "KabiIOError",
    "KernelError",
    "KernelFailedError",
    "NoEligibleKernelError",
    "NotFoundError",
    "STATUS_EXCEPTIONS",
    "StaleDecisionError",
    "UnavailableError",
    "UnsupportedDtypeError",
    "unknown_op",
]


class KabiError(Exception):
    """Base class of every error kabi raises. ``status`` names the C ABI status it stands for."""

    status: str = "KABI_STATUS_INTERNAL"


class InvalidArgumentError(KabiError, ValueError):
    """Bad input: a shape the op does not accept, an `out` of the wrong shape, an unknown option."""

    status = "KABI_STATUS_INVALID_ARGUMENT"


class ConstraintViolatedError(KabiError, ValueError):
    """The arguments do not meet a kernel's declared constraints (e.g. a misaligned data pointer)."""

    status = "KABI_STATUS_CONSTRAINT_VIOLATED"


class UnsupportedDtypeError(KabiError, TypeError):
    """A dtype the op or kernel does not accept, or inputs whose dtypes disagree."""

    status = "KABI_STATUS_UNSUPPORTED_DTYPE"


class ArgumentTypeError(KabiError, TypeError):
    """An argument of the wrong Python type (e.g. a list where a tensor is expected)."""

    status = "KABI_STATUS_INVALID_ARGUMENT"


class NotFoundError(KabiError, LookupError):
    """An unknown op, kernel, device or plugin."""

    status = "KABI_STATUS_NOT_FOUND"


def unknown_op(name: object, known: Iterable[str]) -> NotFoundError:
    """The one wording of an unknown op, for the Python API and the command line alike."""
    return NotFoundError(f"unknown op {name!r}; kabi has {', '.join(known) or 'none'}")


class NoEligibleKernelError(KabiError, LookupError):
    """No registered kernel can run the problem (or the forced choice); the message gives each rejection."""

    status = "KABI_STATUS_NO_ELIGIBLE_KERNEL"


class AlreadyExistsError(KabiError, ValueError):
    """A name that must be unique (a kernel of an op, an op) is already registered."""

    status = "KABI_STATUS_ALREADY_EXISTS"


class KernelFailedError(KabiError, RuntimeError):
    """A kernel failed: a native one reported failure or its launch failed, or a Python one raised something that
    is not a kabi error (then chained as ``__cause__``). The message names the op and the kernel."""

    status = "KABI_STATUS_KERNEL_FAILED"


# The earlier name of KernelFailedError, kept because it is public API.
KernelError = KernelFailedError


class AbiMismatchError(KabiError, RuntimeError):
    """A plugin, manifest or struct was built for an incompatible ABI version."""

    status = "KABI_STATUS_ABI_MISMATCH"


class UnavailableError(KabiError, RuntimeError):
    """A needed system component is missing (e.g. no CUDA driver)."""

    status = "KABI_STATUS_UNAVAILABLE"


class KabiIOError(KabiError, OSError):
    """Reading or writing a file (tuning cache, manifest, plugin) failed."""

    status = "KABI_STATUS_IO_ERROR"


class InternalError(KabiError, RuntimeError):
    """A bug in kabi: please report it with the message."""

    status = "KABI_STATUS_INTERNAL"


class StaleDecisionError(KabiError):
    """Raised by a prepared native launch whose kernel table changed since it was prepared.

    Never reaches users: the op front catches it and selects again.
    """

    status = "KABI_STATUS_INTERNAL"


STATUS_EXCEPTIONS: dict[str, type[KabiError]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        UnsupportedDtypeError,
        NotFoundError,
        NoEligibleKernelError,
        AlreadyExistsError,
        KernelFailedError,
        AbiMismatchError,
        UnavailableError,
        ConstraintViolatedError,
        KabiIOError,
        InternalError,
    )
}

# Tracebacks name the public spelling (kabi.InvalidArgumentError), not this private module.
for _public in (KabiError, *STATUS_EXCEPTIONS.values(), ArgumentTypeError):
    _public.__module__ = "kabi"
del _public
