"""A fixture for the op-front tests: no tuning hook and an empty tuning cache, so picks are the heuristic's and
call counts are the caller's own, whatever other tests or earlier runs recorded."""

from __future__ import annotations

import pytest

import kabi
from kabi import _core
from kabi._decision_cache import invalidate_all


@pytest.fixture
def untuned(monkeypatch, tmp_path):
    monkeypatch.setattr(kabi._dispatch, "_on_selection_miss", None)
    _core.cache_set_directory(str(tmp_path / "tuning-cache"))
    invalidate_all()
    yield
    _core.cache_set_directory(None)
    invalidate_all()
