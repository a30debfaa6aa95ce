"""Fixtures of the capture tests: a clean capture state per test, a fake GPU."""

from __future__ import annotations

import pytest
from capture_fakes import FakeBackend

import vramscope.capture as capture
from vramscope.capture import backend


@pytest.fixture(autouse=True)
def _clean_capture_state():
    capture._reset_for_tests()
    yield
    capture._reset_for_tests()


@pytest.fixture
def fake() -> FakeBackend:
    """A fake CUDA (initialised, empty) installed as the capture backend."""
    fb = FakeBackend()
    backend.set_backend(fb)
    return fb
