"""The native gate: C = Python equality tests must run where the C extensions must exist.

Every test that compares a compiled path with its pure-Python reference skips
when the extension is not built - fine on a machine without a compiler, but a
CI whose build silently failed would then pass without ever comparing them.
With ``VRAMSCOPE_REQUIRE_NATIVE=1`` (``.ci/run`` exports it; ``setup.py`` then
also fails the build instead of warning) a missing extension fails those
tests instead of skipping them.

Use :func:`needs` as a marker (``@needs(fast_pickle.available(), "...")``) or
:func:`skip_unless` inside a fixture or test.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_NATIVE_ENV = "VRAMSCOPE_REQUIRE_NATIVE"


def required() -> bool:
    """True when the environment demands the compiled extensions."""
    return os.environ.get(REQUIRE_NATIVE_ENV, "") not in ("", "0")


def skip_unless(available: bool, reason: str) -> None:
    """Skip the running test when ``available`` is false - or fail it under the gate."""
    if available:
        return
    if required():
        pytest.fail(
            f"{reason}, but {REQUIRE_NATIVE_ENV}=1 requires it "
            "(build it: python setup.py build_ext --inplace)",
            pytrace=False,
        )
    pytest.skip(reason)


def needs(available: bool, reason: str):
    """A marker (also in ``pytestmark`` lists): skip without the extension.  Under the
    gate a missing extension fails the collection of the module that asks for it."""
    if not available and required():
        raise RuntimeError(
            f"{reason}, but {REQUIRE_NATIVE_ENV}=1 requires it "
            "(build it: python setup.py build_ext --inplace)"
        )
    return pytest.mark.skipif(not available, reason=reason)
