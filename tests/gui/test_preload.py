"""The document built ahead of the window (viewer/startup/preload.py) is the one the window shows.

``vramscope FILE`` starts loading FILE on a thread before Qt is imported; the
window's loader claims that load instead of starting its own: the same
document, its progress relayed, Cancel passed on, a failure reported as its own.
"""

from __future__ import annotations

import lzma
import os

import numpy as np

from tests.gui.conftest import BIG_XZ, FRAG
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.startup import preload


def test_the_window_shows_the_preloaded_document(qtbot, window, load, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")
    pre = preload.start(FRAG)
    assert pre is not None
    assert load(window, FRAG) == "loaded"
    assert preload.claim(FRAG) is None  # claimed by the window's loader
    assert pre.done.is_set() and pre.document is None  # handed over, not kept twice
    doc, want = window.vs.doc, load_snapshot(FRAG, use_cache=False)
    assert np.array_equal(doc.snap.trace.addr, want.trace.addr)
    assert np.array_equal(doc.snap.blocks.size, want.blocks.size)
    assert window.header.isVisible()


def test_a_preload_failure_is_the_windows_one_line_error(qtbot, window, load, tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04not a pickle at all")
    assert preload.start(bad) is not None
    assert load(window, bad) == "failed"
    assert window.last_error.startswith(f"{bad}: ") and "\n" not in window.last_error


def test_cancel_reaches_the_preload(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")
    big = tmp_path / "big.pickle"
    big.write_bytes(lzma.decompress(BIG_XZ.read_bytes()))
    pre = preload.start(big)
    with qtbot.waitSignal(window.loadFinished, timeout=60000) as blocker:
        window.open_file(os.fspath(big))
        window.cancel_load()
    assert blocker.args == ["cancelled"]
    assert pre.cancel_event.is_set()
    qtbot.waitUntil(pre.done.is_set, timeout=60000)
    assert pre.document is None


def test_a_file_changed_after_the_preload_is_loaded_anew(qtbot, window, load, tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(FRAG.read_bytes())
    pre = preload.start(path)
    pre.done.wait(30)
    other = tmp_path / "other.pickle"
    other.write_bytes((FRAG.parent / "gpt2_oom.pickle").read_bytes())
    os.replace(other, path)
    assert load(window, path) == "loaded"
    want = load_snapshot(path, use_cache=False)
    assert len(window.vs.doc.snap.trace.action) == len(want.trace.action)
    assert np.array_equal(window.vs.doc.snap.segments.address, want.segments.address)
