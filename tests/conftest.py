"""Fixtures every test gets.

A tuning cache of its own: the suite tunes test-only kernels (``fake.python_matmul`` and friends) and records
timings of a busy machine; none of that may reach the user's cache, and no test may read what an earlier test or
an earlier run recorded.
"""

from __future__ import annotations

import pytest

import kabi


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """The test's own, empty tuning cache directory, used by this process and inherited by its children.

    ``XDG_CACHE_HOME`` moves too, so a child started with ``KABI_CACHE_DIR`` removed from its environment still
    falls back to a temporary place rather than the user's ``~/.cache/kabi``.
    """
    directory = tmp_path_factory.mktemp("kabi-cache")
    monkeypatch.setenv("KABI_CACHE_DIR", str(directory))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    kabi.cache.set_directory(directory)
    yield directory
    kabi.cache.set_directory(None)


@pytest.fixture
def registered():
    """``register(fn, name, **declaration)``: a float32 matmul test kernel, unregistered when the test ends."""
    names = []

    def register(fn, name, **declaration):
        kabi.register_kernel("matmul", fn, name=name, dtypes=["float32"], **declaration)
        names.append(name)

    yield register
    for name in names:
        kabi.unregister_kernel("matmul", name)
