"""The environment guard of tests/conftest.py fires: a leaked variable fails the leaker and is put back
(a leaked FAKE_PLAN once made later tests verify the real reference packs on stand-in stages)."""
from __future__ import annotations

import os

import pytest
from conftest import _environ, _put_back


def test_a_leaked_variable_fails_and_is_removed(monkeypatch):
    monkeypatch.delenv("EVPACK_GUARD_PROBE", raising=False)
    before = _environ()
    os.environ["EVPACK_GUARD_PROBE"] = "leaked"
    with pytest.raises(pytest.fail.Exception, match="leaker left os.environ changed: EVPACK_GUARD_PROBE"):
        _put_back(before, "leaker")
    assert "EVPACK_GUARD_PROBE" not in os.environ


def test_a_changed_variable_is_put_back(monkeypatch):
    monkeypatch.setenv("EVPACK_GUARD_PROBE", "first")
    before = _environ()
    os.environ["EVPACK_GUARD_PROBE"] = "second"
    with pytest.raises(pytest.fail.Exception, match="EVPACK_GUARD_PROBE"):
        _put_back(before, "leaker")
    assert os.environ["EVPACK_GUARD_PROBE"] == "first"


def test_library_owned_variables_are_not_a_leak():
    before = _environ()
    os.environ["TRITON_GUARD_PROBE"] = "set by a library"
    try:
        _put_back(before, "leaker")  # no failure
    finally:
        del os.environ["TRITON_GUARD_PROBE"]
