"""The window's start: what it leaves for later so that the first paint of a file comes
sooner, and that the window is complete after it.

- Qt's types are built when first used, not all at pyqtgraph's import, and pyqtgraph's
  Qt names are PySide6's own objects;
- the Diagnosis panel (and the model's remedies) is imported when it opens, not with
  the window's "What would fix it?" button;
- what the memory is is built after the window's first paint of the document, and
  the window then shows it as before (the header's split, the tab)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import FRAG
from PySide6.QtCore import QEvent, QObject

# A fresh interpreter: what a window start imports and builds.
START = r"""
import json, sys
import PySide6.QtCore, PySide6.QtGui, PySide6.QtWidgets
from vramscope.viewer._qt.app import application
from vramscope.viewer._qt.main_window import MainWindow
import pyqtgraph as pg

application()
window = MainWindow(persist=False)
out = {"diagnosis_panel": "vramscope.viewer._qt.diagnosis.panel" in sys.modules,
       "remedies": "vramscope.viewer.model.remedies.advise" in sys.modules,
       "breakdown": "vramscope.viewer.model.categories.breakdown" in sys.modules}
for name in ("QtCore", "QtGui", "QtWidgets"):
    src, mirror = getattr(PySide6, name), getattr(pg.Qt, name)
    listed = [n for n in dir(src) if not n.startswith("__")]
    out[name] = {
        "built": len([n for n in vars(src) if not n.startswith("__")]),
        "listed": len(listed),
        # every name read through pyqtgraph's mirror is PySide6's own object
        "same": all(getattr(mirror, n) is getattr(src, n) for n in listed),
    }
print(json.dumps(out))
"""


def start(**env: str) -> dict:
    return fresh_interpreter(START, **env)


def fresh_interpreter(script: str, *args: str, **env: str) -> dict:
    """The JSON that ``script`` prints last, run offscreen in a new interpreter (``args``:
    its ``sys.argv[1:]``)."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen", **env},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_window_start_builds_only_the_qt_types_it_uses():
    out = start()
    for name in ("QtCore", "QtGui", "QtWidgets"):
        got = out[name]
        assert got["same"], name
        # Built: what the window used; pyqtgraph's copy of every name would build all.
        assert got["built"] < got["listed"] * 0.8, (name, got)


def test_the_eager_import_is_still_there_to_compare():
    out = start(VRAMSCOPE_EAGER_QT="1")
    for name in ("QtCore", "QtGui", "QtWidgets"):
        assert out[name]["same"]
        assert out[name]["built"] >= out[name]["listed"] * 0.95, (name, out[name])


def test_the_diagnosis_panel_is_imported_when_it_opens_not_with_the_window():
    out = start()
    assert not out["diagnosis_panel"]
    assert not out["remedies"]


class PaintLog(QObject):
    """The window's paint events, counted."""

    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def test_what_the_memory_is_is_built_after_the_first_paint_of_the_file(
    qtbot, window, load, monkeypatch
):
    wiring = window.categories_wiring
    log = PaintLog()
    window.installEventFilter(log)
    starts = []
    real_start = wiring.panel.start

    def start_logged(doc, device):
        starts.append((doc is window.vs.doc, log.paints))
        real_start(doc, device)

    monkeypatch.setattr(wiring.panel, "start", start_logged)
    shown = []
    window.documentChanged.connect(lambda doc: shown.append(log.paints))
    assert load(window, FRAG) == "loaded"
    qtbot.waitUntil(wiring.settled, timeout=30000)
    # Started once, for this document, after a paint that came after it was shown.
    assert len(starts) == 1 and starts[0][0]
    assert starts[0][1] > shown[-1]
    # ... and the window is complete: the header's split and the tab show the breakdown.
    assert window.categories.bd is not None
    assert wiring.header_split.text.text()
    assert wiring.panel.bd is window.categories.bd


def test_a_window_never_painted_builds_it_anyway(qtbot, window, load):
    window.setUpdatesEnabled(False)  # (shown, but no paint reaches it)
    assert load(window, FRAG) == "loaded"
    qtbot.waitUntil(window.categories_wiring.settled, timeout=30000)
    assert window.categories.bd is not None
    window.setUpdatesEnabled(True)


def test_a_hidden_window_builds_it_at_once(qtbot, window, load):
    window.hide()
    assert load(window, FRAG) == "loaded"
    assert window.categories_wiring.panel.thread is not None  # started with the document
    qtbot.waitUntil(window.categories_wiring.settled, timeout=30000)
    assert window.categories.bd is not None


def test_the_what_it_is_tab_is_made_when_first_shown_with_what_it_would_show(
    qtbot, make_window, load
):
    leak = FRAG.parent / "truth" / "gpt2_leak.pickle.xz"
    # A window whose tab shows from the start: what the panel shows, made at once.
    shown = make_window()
    shown.tabs.setCurrentWidget(shown.categories_wiring.panel)
    assert load(shown, leak) == "loaded"
    qtbot.waitUntil(shown.categories_wiring.settled, timeout=60000)
    window = make_window()
    wiring = window.categories_wiring
    assert load(window, leak) == "loaded"
    qtbot.waitUntil(wiring.settled, timeout=60000)
    panel, bd = wiring.panel, window.categories.bd
    assert bd is not None and bd.leaks
    assert not panel.made()  # (the Blocks tab shows: the chart and Leaks view wait)
    stacks = []
    window.stack.show_stack = lambda stack, facts="": stacks.append(stack)
    window.tabs.setCurrentWidget(panel)  # View > What the memory is, or a click on the tab
    assert panel.made()
    other = shown.categories_wiring.panel
    assert panel.timeline.bd is bd
    assert panel.timeline.cursor.value() == other.timeline.cursor.value()
    assert panel.timeline.cursor.isVisible() == other.timeline.cursor.isVisible()
    assert [lk.frame for lk in panel.leaks.leaks] == [lk.frame for lk in other.leaks.leaks]
    assert panel.leaks.caption.text() == other.leaks.caption.text()
    assert panel.split.toolTip() == other.split.toolTip()
    assert panel.body.orientation() == other.body.orientation()
    assert panel.body.count() == other.body.count() == 2
    # The first row is selected as it always was; that is not the user's pick: no
    # highlight, no stack shown for it.
    assert panel.leaks.selected_leak() is bd.leaks[0]
    assert window.vs.category_mask is None and not stacks


# What PySide6's feature switch asks of each module imported after it, in a fresh
# interpreter: which modules got their source read, and what every answer was.
FEATURE_SCAN = r"""
import inspect, json, os, sys, tempfile
reads = []
real_getsource = inspect.getsource
def counting(obj):
    reads.append(getattr(obj, "__name__", "?"))
    return real_getsource(obj)
inspect.getsource = counting
from vramscope.viewer._qt.app import application
from vramscope.viewer._qt.main_window import MainWindow
before = len(reads)
# two modules imported after PySide6, by anyone: one that uses Qt, one that does not
where = tempfile.mkdtemp()
for name, text in (("uses_qt_here", "from PySide6.QtCore import QObject\n"),
                   ("plain_here", "import json\n")):
    with open(os.path.join(where, name + ".py"), "w") as f:
        f.write(text)
sys.path.insert(0, where)
import uses_qt_here, plain_here
feature = sys.modules["shibokensupport.feature"]
answers = feature.pyside_feature_dict
print(json.dumps({"reads": reads, "after_window": reads[before:],
                  "uses_qt": answers.get("uses_qt_here"), "plain": answers.get("plain_here"),
                  "check": feature._mod_uses_pyside.__name__}))
"""


def feature_scan(**env: str) -> dict:
    return fresh_interpreter(FEATURE_SCAN, **env)


def test_modules_imported_after_pyside6_are_not_read_as_text():
    got = feature_scan()
    assert got["check"] == "_holds_pyside"
    # Before the switch is told (PySide6's own first imports) a few at most; after: none.
    assert len(got["reads"]) < 30, got["reads"]
    assert got["after_window"] == []
    # The answers the text search gives them (0 = "uses PySide", -1 = "ignore it").
    assert got["uses_qt"] == 0
    assert got["plain"] == -1


# Where the window's start is when PySide6's own modules begin to load: the model (numpy
# and its ~150 modules) is imported on the preload thread at that very time, so the
# switch must read globals, not source, from shiboken6's import on.
SWITCH_AT_QTCORE = r"""
import json, sys
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "PySide6.QtCore":
            feature = sys.modules.get("shibokensupport.feature")
            check = getattr(feature, "_mod_uses_pyside", None)
            seen.append(getattr(check, "__name__", None))
        return None
sys.meta_path.insert(0, Spy())
import vramscope.viewer._qt
print(json.dumps({"at_qtcore": seen}))
"""


def test_the_switch_reads_globals_before_pyside6_modules_load():
    assert fresh_interpreter(SWITCH_AT_QTCORE)["at_qtcore"] == ["_holds_pyside"]


def test_the_source_scan_is_what_the_eager_start_still_does():
    got = feature_scan(VRAMSCOPE_EAGER_QT="1")
    assert got["check"] == "_mod_uses_pyside"
    assert len(got["reads"]) > 100
    assert "uses_qt_here" in got["after_window"]
    assert (got["uses_qt"], got["plain"]) == (0, -1)


def test_the_globals_check_never_raises():
    import types

    from vramscope.viewer._qt.widgets.qt_import import _holds_pyside

    class Hostile:
        def __getattribute__(self, name):
            raise RuntimeError(name)

    odd = types.ModuleType("odd")
    odd.thing = Hostile()
    assert _holds_pyside(odd) is False
    from PySide6 import QtCore

    holder = types.ModuleType("holder")
    holder.QObject = QtCore.QObject
    assert _holds_pyside(holder) is True


# pyqtgraph's namespace in a fresh interpreter: each public name as "module.qualname" (a
# class or function) or its type, after the window's import (or a plain one, eagerly).
NAMESPACE = r"""
import json, sys
from vramscope.viewer._qt.app import application
from vramscope.viewer._qt.widgets import qt_import
import pyqtgraph as pg

def where(obj):
    owner = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    return f"{owner}.{name}" if owner and name else type(obj).__name__

deferred = sorted(n for n, m in sys.modules.items() if isinstance(m, qt_import._Deferred))
# what the window's start executed of them: nothing (the parameter tree stays unloaded)
unloaded = all(isinstance(sys.modules[n], qt_import._Deferred) for n in deferred)
tree = "pyqtgraph.parametertree" in sys.modules
processes = "multiprocessing" in sys.modules  # (beneath pyqtgraph.multiprocess only)
public = [n for n in dir(pg) if not n.startswith("_")]
names = json.loads(sys.argv[1]) if len(sys.argv) > 1 else public
seen = {n: where(getattr(pg, n)) for n in names}
from pyqtgraph.widgets.ScatterPlotWidget import ScatterPlotWidget
import pyqtgraph.parametertree as ptree
import pyqtgraph.multiprocess.processes as mp_processes
from pyqtgraph.widgets import RemoteGraphicsView as remote_view
print(json.dumps({"deferred": deferred, "unloaded": unloaded, "tree_before": tree,
                  "processes_before": processes,
                  "submodule": mp_processes.QtProcess is remote_view.mp.QtProcess,
                  "names": seen, "same_class": ScatterPlotWidget is pg.ScatterPlotWidget,
                  "tree_after": hasattr(ptree, "Parameter"),
                  "missing": hasattr(pg, "NoSuchName")}))
"""


def namespace(names=None, **env: str) -> dict:
    args = [] if names is None else [json.dumps(names)]
    return fresh_interpreter(NAMESPACE, *args, **env)


def test_pyqtgraph_modules_the_window_never_uses_are_not_run_at_its_start():
    got = namespace()
    assert len(got["deferred"]) >= 10, got["deferred"]
    assert "pyqtgraph.widgets.ColorMapWidget" in got["deferred"]
    assert "pyqtgraph.multiprocess" in got["deferred"]  # a package
    assert got["unloaded"] and not got["tree_before"] and not got["processes_before"]
    assert got["submodule"]  # a submodule of a deferred package: the real one
    # ... yet each is there the moment it is asked for, under pyqtgraph's own names
    assert got["same_class"] and got["tree_after"]
    assert got["missing"] is False


def test_pyqtgraph_namespace_is_the_one_a_plain_import_gives():
    eager = namespace(VRAMSCOPE_EAGER_QT="1")
    assert eager["deferred"] == []  # the plain import: nothing stands in
    lazy = namespace(names=sorted(eager["names"]))
    # Every name pyqtgraph's own import binds reads as the same object (by where it is
    # defined) through the window's import: those of deferred modules as they are read.
    assert lazy["names"] == eager["names"]
    assert "TableWidget" in lazy["names"] and "ScatterPlotWidget" in lazy["names"]


def test_the_breakdowns_rules_are_imported_after_the_window_is_made():
    # The window names the categories (its header, tab, colours) but builds no breakdown
    # before its first paint: the rules load on the breakdown's own thread.
    assert not start()["breakdown"]
