"""The launch parameters of a device binary, as a manifest's ``param`` lines list them (docs/manifest.md): the
vocabulary every kernel family builds its parameter list with. Apart from ``_manifest`` (which reads and writes whole
manifests) so that declaring the families, which a process's first CUDA dispatch does, does not build the manifest's
types too.

Example::

    ManifestParam.stride(0, -2, divisible_by=16).text()     # 'stride index=0 dim=-2 size=4 divisible_by=16'
"""

from __future__ import annotations

from typing import NamedTuple

# The kinds whose value is bytes of device memory per program.
SCRATCH_KINDS = ("scratch", "zeroed_scratch")


class ManifestParam(NamedTuple):
    """One ``param`` line: a kind and its ``field=value`` items, e.g. ``stride index=0 dim=-2 size=4``."""

    kind: str
    fields: tuple

    def text(self) -> str:
        return " ".join([self.kind] + [f"{key}={value}" for key, value in self.fields])

    def get(self, key: str, default=None):
        return dict(self.fields).get(key, default)

    @property
    def size_bytes(self) -> int:
        """Width of the argument: 8 for pointers (tensor, scratch, zeroed_scratch, workspace), else its ``size``."""
        return 8 if self.kind in ("tensor", "workspace") + SCRATCH_KINDS else self.get("size")

    @classmethod
    def tensor(cls, index: int) -> ManifestParam:
        return cls("tensor", (("index", index),))

    @property
    def divisible_by(self) -> int:
        """The power of two the image assumes the value is a multiple of (dim and stride); 0 for none."""
        return self.get("divisible_by", 0)

    @classmethod
    def dim(cls, name: str, size: int = 4, divisible_by: int = 0) -> ManifestParam:
        """A problem dimension; ``divisible_by`` (> 1) says the image assumes it is a multiple of that."""
        return cls("dim", (("name", name), ("size", size)) + _divisor_field(divisible_by))

    @classmethod
    def stride(cls, index: int, dim: int, size: int = 4, divisible_by: int = 0) -> ManifestParam:
        """A tensor's stride; ``divisible_by`` (> 1) says the image assumes it is a multiple of that, as Triton's
        ``tt.divisibility=16`` does."""
        return cls("stride", (("index", index), ("dim", dim), ("size", size)) + _divisor_field(divisible_by))

    @classmethod
    def constant(cls, value: int, size: int = 4) -> ManifestParam:
        return cls("constant", (("value", value), ("size", size)))

    @classmethod
    def attribute(cls, index: int, size: int = 4) -> ManifestParam:
        """Attribute ``index`` of the op, in schema order: an enum as its value's index, an integer, or a float (4
        bytes: a float; 8: a double)."""
        return cls("attribute", (("index", index), ("size", size)))

    @classmethod
    def scratch(cls, bytes_per_program: int) -> ManifestParam:
        return cls("scratch", (("value", bytes_per_program),))

    @classmethod
    def zeroed_scratch(cls, bytes_per_program: int) -> ManifestParam:
        """Device memory of ``bytes_per_program`` per program that is zero when the kernel starts and that the
        kernel must leave zero (format 3): serial split-K's tile counters."""
        return cls("zeroed_scratch", (("value", bytes_per_program),))


def _divisor_field(divisible_by: int) -> tuple:
    """The ``divisible_by`` item, written only where it assumes something, so other params read as before 2.4."""
    if not isinstance(divisible_by, int) or divisible_by < 0 or divisible_by & (divisible_by - 1):
        raise ValueError(f"divisible_by must be 0 (no assumption) or a power of two, got {divisible_by!r}")
    return (("divisible_by", divisible_by),) if divisible_by > 1 else ()
