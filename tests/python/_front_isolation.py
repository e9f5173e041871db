"""A fixture for the op-front tests: no tuning hook and no decision made before the test, so picks are the
heuristic's and call counts are the caller's own, whatever other tests decided (the tuning cache is already the
test's own, empty one: tests/conftest.py)."""

from __future__ import annotations

import pytest

import kabi
from kabi._base.decision_cache import invalidate_all


@pytest.fixture
def untuned(monkeypatch):
    monkeypatch.setattr(kabi.ops._front, "_on_selection_miss", None)
    invalidate_all()
    yield
    invalidate_all()
