"""How to install vramscope, or vramscope with one of its optional extras.

No package index has vramscope yet: a hint that installs it by its name would fail
everywhere.  Every hint the program prints (``vramscope mcp`` without its SDK,
``vramscope record`` in the viewer-only installers, a Dask scheduler without
``distributed``, Help > How to record) is made here, and installs from a clone of
the repository, run in its directory.  Stdlib only (the model uses it too).
"""

from __future__ import annotations

WHERE = "in a clone of vramscope (its directory; no package index has it yet)"


def pip_install(extra: str | None = None) -> str:
    """The command itself: ``pip install '.[mcp]'`` (``extra`` None: ``pip install .``)."""
    return f"pip install '.[{extra}]'" if extra else "pip install ."


def install_hint(extra: str | None = None) -> str:
    """The command and where to run it: ``pip install '.[mcp]' in a clone of vramscope
    (...)``."""
    return f"{pip_install(extra)} {WHERE}"
