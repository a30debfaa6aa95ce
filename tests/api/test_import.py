"""``import vramscope`` is a real, tiny package: a version, the API's names, and nothing
heavy imported until a name is used (no numpy, Qt, torch or IPython)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

HEAVY = (
    "numpy",
    "PySide6",
    "pyqtgraph",
    "shiboken6",
    "torch",
    "IPython",
    "vramscope.viewer.model",
    "vramscope.capture",
)

PROBE = """
import json, sys
before = set(sys.modules)
import vramscope
names = sorted(m for m in set(sys.modules) - before)
print(json.dumps({"new": names, "file": vramscope.__file__, "all": vramscope.__all__}))
"""


def run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


def test_import_vramscope_imports_nothing_heavy():
    got = run(PROBE)
    heavy = [m for m in got["new"] if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == []
    # A real package (not a namespace), whose source is the repository's viewer/api/.
    assert got["file"].replace("\\", "/").endswith("viewer/api/__init__.py")
    assert {"open", "record", "Recording", "__version__"} <= set(got["all"])


def test_names_resolve_on_first_use():
    code = PROBE.replace("import vramscope\n", "import vramscope\nvramscope.open\n")
    got = run(code)
    assert "vramscope.recording" in got["new"] and "torch" not in got["new"]


def test_version_record_and_errors():
    import vramscope
    import vramscope.capture

    assert vramscope.__version__ == metadata.version("vramscope")
    assert vramscope.record is vramscope.capture.record
    assert "open" in dir(vramscope)
    try:
        vramscope.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
