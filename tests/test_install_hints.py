"""Install hints that work: no package index has vramscope, so every hint the program
prints and every README installs from a clone (``pip install '.[mcp]'``), with an
extra the project really declares."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

from vramscope.viewer.early.install_hint import install_hint, pip_install

ROOT = Path(__file__).resolve().parents[1]
# `pip install vramscope`, `pip install 'vramscope[mcp]'`, `pip install "vramscope[capture]"`
FROM_AN_INDEX = re.compile(r"pip install\s+['\"]?vramscope\b")
HINT_EXTRA = re.compile(r"pip install '\.\[(\w+)\]'")


def shipped_text() -> dict[Path, str]:
    """What users read: the READMEs and the code of everything installed or packaged."""
    files = [ROOT / "README.md", ROOT / "viewer" / "README.md", ROOT / "packaging" / "README.md"]
    for folder in ("viewer", "capture", "packaging"):
        files.extend(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return {p: p.read_text(encoding="utf-8") for p in files}


def test_no_hint_installs_from_a_package_index():
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for path, text in shipped_text().items()
        for m in FROM_AN_INDEX.finditer(text)
    ]
    assert not found, "hints that no package index can answer:\n" + "\n".join(found)


def test_every_hinted_extra_is_declared():
    declared = set(metadata("vramscope").get_all("Provides-Extra") or [])
    hinted = {m.group(1) for text in shipped_text().values() for m in HINT_EXTRA.finditer(text)}
    hinted |= {m.group(1) for m in HINT_EXTRA.finditer(install_hint("mcp"))}
    assert hinted and hinted <= declared, hinted - declared
    assert pip_install() == "pip install ." and "clone" in install_hint("mcp")


def _cli(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_the_printed_hints_are_the_one_hint():
    """`vramscope mcp` without its SDK and `vramscope record` without the capture side
    print install_hint's words, one line each."""
    mcp = _cli(
        "import sys; sys.modules['mcp'] = None; "
        "from vramscope.viewer.cli import main; sys.exit(main(['mcp']))"
    )
    record = _cli(
        "import sys; sys.modules['vramscope.capture.runner'] = None; "
        "from vramscope.viewer.cli import main; sys.exit(main(['record', 'x.py']))"
    )
    for run, extra in ((mcp, "mcp"), (record, "capture")):
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert install_hint(extra) in run.stderr, run.stderr
