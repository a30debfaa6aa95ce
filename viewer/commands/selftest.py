"""``vramscope --self-test``: check that an installed (or frozen) app works.

Runs the same code a user's session runs, on the example snapshot shipped
inside the package (``vramscope.viewer.assets``), and compares it with the
allocator's own counters stored beside it (the ``.json`` sidecar written by the
capture module on the GPU):

1. the model loads the example with the safe unpickler, and its figures equal
   ``memory_stats()`` (reserved, allocated, active, requested bytes, segment
   and allocation counts, inactive split bytes);
2. the OOM verdict is ``fragmentation``;
3. the main window loads the example and renders offscreen to a PNG of the
   expected size that is not blank (Qt platform plugins, pyqtgraph and the icon
   all load);
4. Help > About names the versions of vramscope, Qt, PySide6, pyqtgraph and
   numpy (and, frozen, vramscope's own version is known: its metadata is in).

It never needs a display: ``QT_QPA_PLATFORM`` is forced to ``offscreen``.  On
success it prints a short report ending with ``self-test passed: ...`` and
returns 0; on any failure it prints one line on stderr and returns 1.  With
``--screenshot OUT.png`` the render is kept there (otherwise a temporary file
is used and removed).  Works from the source tree, an installed wheel and the
PyInstaller app alike.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from ..model.analysis.figures import ALLOCATOR_COUNTERS as COUNTERS

EXIT_OK = 0
EXIT_FAILED = 1

ASSETS = "vramscope.viewer.assets"
EXAMPLE = "example_fragmentation_oom.pickle"
SIDECAR = "example_fragmentation_oom.json"
EXPECTED_VERDICT = "fragmentation"


# The main window is rendered at this size (vramscope.viewer._qt.app.SCREENSHOT_SIZE).
MIN_COLOURS = 8  # a blank or failed render has one or two


class SelfTestError(Exception):
    """One failed check; its message is the one line printed."""


def expected_stats(sidecar: Path) -> dict:
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
        stats = data["memory_stats"]
        return {ours: int(stats[theirs]) for ours, theirs in COUNTERS.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SelfTestError(f"cannot read the expected figures from {sidecar.name}: {exc}") from exc


def check_model(example: Path, expected: dict) -> list[str]:
    """Load ``example``, compare its figures with ``expected``; report lines."""
    from vramscope.viewer.model import format_bytes, last_oom, load_snapshot, memory_stats
    from vramscope.viewer.model.core.units import plural

    start = time.perf_counter()
    snap = load_snapshot(example, use_cache=False)
    stats = memory_stats(snap).to_dict()
    wrong = [
        f"{name} {stats.get(name)} != {value}"
        for name, value in expected.items()
        if stats.get(name) != value
    ]
    if wrong:
        raise SelfTestError(f"{example.name}: figures differ from memory_stats: {'; '.join(wrong)}")
    oom = last_oom(snap)
    if oom is None:
        raise SelfTestError(f"{example.name}: no OOM found (expected a {EXPECTED_VERDICT} verdict)")
    if oom.kind != EXPECTED_VERDICT:
        raise SelfTestError(
            f"{example.name}: OOM verdict is {oom.kind!r}, expected "
            f"{EXPECTED_VERDICT!r}: {oom.verdict}"
        )
    seconds = time.perf_counter() - start
    return [
        f"  model:  {example.name}: {plural(stats['segment_count'], 'segment')}, reserved "
        f"{format_bytes(stats['reserved_bytes'])}, "
        f"allocated {format_bytes(stats['allocated_bytes'])}"
        f"; {plural(len(expected), 'figure')} equal memory_stats ({seconds:.2f} s)",
        f"  OOM:    verdict {oom.kind!r} as expected: {oom.verdict.removeprefix(oom.kind + ': ')}",
    ]


def check_window(example: Path, out: Path) -> list[str]:
    """Open ``example`` in the main window offscreen and render it to ``out``."""
    os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before the QApplication exists
    start = time.perf_counter()
    try:
        from PySide6.QtGui import QImage

        from vramscope.viewer._qt import app as qtapp
        from vramscope.viewer.model.core.units import plural
    except ImportError as exc:
        raise SelfTestError(f"the GUI cannot be imported: {exc}") from exc
    code, error = qtapp.screenshot(os.fspath(example), os.fspath(out))
    if code:
        raise SelfTestError(f"rendering the main window failed: {error}")
    image = QImage(os.fspath(out))
    want = qtapp.SCREENSHOT_SIZE
    if image.isNull():
        raise SelfTestError(f"{out}: the rendered PNG cannot be read back")
    if (image.width(), image.height()) != (want.width(), want.height()):
        raise SelfTestError(
            f"{out}: rendered {image.width()}x{image.height()}, "
            f"expected {want.width()}x{want.height()}"
        )
    colours = {
        image.pixel(x, y)
        for x in range(0, image.width(), max(1, image.width() // 96))
        for y in range(0, image.height(), max(1, image.height() // 60))
    }
    if len(colours) < MIN_COLOURS:
        raise SelfTestError(
            f"{out}: the rendered window looks blank ({plural(len(colours), 'colour')})"
        )
    about = about_versions()
    seconds = time.perf_counter() - start
    return [
        f"  window: main window rendered offscreen, {image.width()}x{image.height()}, "
        f"{plural(len(colours), 'colour')} sampled ({seconds:.2f} s)",
        f"  about:  Help > About names {about}",
    ]


def about_versions() -> str:
    """Help > About must name the versions of vramscope, Qt, PySide6, pyqtgraph, numpy."""
    from vramscope.viewer import __version__
    from vramscope.viewer._qt.main_window import about_text

    text = re.sub(r"<[^>]+>", " ", about_text())
    if __version__.startswith("0+unknown") and getattr(sys, "frozen", False):
        raise SelfTestError("vramscope's version is unknown (its package metadata is missing)")
    found = []
    for name in ("vramscope", "Qt", "PySide6", "pyqtgraph", "numpy"):
        m = re.search(rf"\b{name} (\d[\w.+-]*)", text)
        if not m:
            raise SelfTestError(f"Help > About does not show the version of {name}")
        found.append(f"{name} {m.group(1)}")
    if f"vramscope {__version__}" not in found:
        raise SelfTestError(f"Help > About shows {found[0]}, not vramscope {__version__}")
    return ", ".join(found)


def assets_dir():
    """The ``vramscope.viewer.assets`` package's files.

    An editable (``pip install -e``) install cannot import that package while
    ``assets/`` has no ``__init__.py`` (setuptools' editable finder skips
    namespace packages nested in a regular one), so in a source tree fall back
    to the ``assets/`` folder beside ``viewer/``.
    """
    try:
        return resources.files(ASSETS)
    except ModuleNotFoundError:
        import vramscope.viewer

        source = Path(vramscope.viewer.__file__).resolve().parents[1] / "assets"
        if (source / EXAMPLE).is_file():
            return source
        raise


def run(keep_png: str | None = None) -> list[str]:
    """All checks; the report lines.  Raises :class:`SelfTestError` on a failure."""
    start = time.perf_counter()
    kind = "frozen app" if getattr(sys, "frozen", False) else "Python package"
    with ExitStack() as stack:
        try:
            assets = assets_dir()
            example = stack.enter_context(resources.as_file(assets / EXAMPLE))
            sidecar = stack.enter_context(resources.as_file(assets / SIDECAR))
        except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
            raise SelfTestError(f"the bundled example is missing ({ASSETS}): {exc}") from exc
        for path in (example, sidecar):
            if not Path(path).is_file():
                raise SelfTestError(f"the bundled example is missing: {path}")
        expected = expected_stats(Path(sidecar))
        lines = check_model(Path(example), expected)
        if keep_png:
            out = Path(keep_png)
        else:
            out = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="vramscope-selftest-"))
            )
            out = out / "window.png"
        lines += check_window(Path(example), out)
        if keep_png:
            lines.append(f"  render kept in {out}")
    seconds = time.perf_counter() - start
    location = Path(sys.executable if kind == "frozen app" else __file__).resolve()
    where = location.parent if kind == "frozen app" else location.parents[1]
    header = f"vramscope self-test ({kind} in {where}, Python {sys.version.split()[0]})"
    return [
        header,
        *lines,
        f"self-test passed: figures, OOM verdict, offscreen window and About OK in {seconds:.1f} s",
    ]


def main(args) -> int:
    try:
        lines = run(getattr(args, "screenshot", None))
    except SelfTestError as exc:
        print(f"vramscope: self-test failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"vramscope: self-test failed: {type(exc).__name__}: {text}", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(lines))
    return EXIT_OK
