"""GUI fixtures: a real QApplication (pytest-qt), offscreen, isolated settings."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
FRAG = DATA / "fragmentation_oom.pickle"
BIG_XZ = DATA / "transformer_long_python_1000k.pickle.xz"


@pytest.fixture(autouse=True)
def isolated_settings(isolated_qt_settings):
    """Every test gets its own settings file; real user settings are never touched."""
    return isolated_qt_settings


@pytest.fixture
def make_window(qtbot, monkeypatch):
    """Build main windows at 1440x900; closing them (cancelling loads) at teardown."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.main_window import MainWindow
    from vramscope.viewer._qt.widgets.stack_panel import StackPanel

    application()
    monkeypatch.setattr(StackPanel, "open_externally", False)
    windows = []

    def make(persist: bool = True) -> MainWindow:
        w = MainWindow(persist=persist)
        qtbot.addWidget(w)
        w.resize(1440, 900)
        w.show()
        qtbot.waitExposed(w)
        windows.append(w)
        return w

    yield make
    for w in windows:
        w.close()


@pytest.fixture
def window(make_window):
    return make_window()


@pytest.fixture
def load(qtbot):
    """``load(window, path)``: open ``path`` through the real worker thread; the outcome."""

    def go(window, path, timeout: int = 30000) -> str:
        with qtbot.waitSignal(window.loadFinished, timeout=timeout) as blocker:
            window.open_file(os.fspath(path))
        qtbot.waitUntil(lambda: not window.is_loading())
        return blocker.args[0]

    return go


@pytest.fixture
def loaded(window, load):
    """``loaded(path)``: the window with ``path`` open."""

    def go(path=FRAG):
        assert load(window, path) == "loaded"
        return window

    return go


def synthetic_snapshot(n_segments: int = 500, blocks_per_segment: int = 200, seed: int = 0):
    """A snapshot with ``n_segments * blocks_per_segment`` blocks (100k by default)."""
    import numpy as np

    from vramscope.viewer.model.core import snapshot as S

    rng = np.random.default_rng(seed)
    n = n_segments * blocks_per_segment
    sizes = rng.integers(1, 64, size=n).astype(np.int64) * 512
    seg_of = np.repeat(np.arange(n_segments, dtype=np.int32), blocks_per_segment)
    seg_total = np.add.reduceat(sizes, np.arange(0, n, blocks_per_segment))
    seg_addr = (np.int64(1) << 40) + np.concatenate([[0], np.cumsum(seg_total)[:-1]]).astype(
        np.int64
    )
    within = sizes.cumsum() - sizes
    within -= np.repeat(within[::blocks_per_segment], blocks_per_segment)
    address = seg_addr[seg_of] + within
    state = rng.choice([0, 0, 2, 1], size=n).astype(np.int8)
    requested = np.where(state == 2, sizes, sizes - rng.integers(0, 512, size=n))
    strings = ["train.py", "step", "model.py", "forward", "/torch/nn/linear.py", "linear"]
    frames = S.Frames(
        filename=np.array([0, 2, 4], np.int32),
        line=np.array([10, 20, 30], np.int32),
        name=np.array([1, 3, 5], np.int32),
        strings=strings,
    )
    stacks = S.Stacks(
        offsets=np.array([0, 2, 4], np.int64), frames=np.array([2, 0, 2, 1], np.int32)
    )
    stack = rng.integers(-1, 2, size=n).astype(np.int32)
    segments = S.Segments(
        device=np.zeros(n_segments, np.int32),
        address=seg_addr,
        total_size=seg_total,
        stream=np.zeros(n_segments, np.int64),
        is_small=np.zeros(n_segments, bool),
        pool=np.zeros(n_segments, np.int32),
        is_expandable=np.zeros(n_segments, bool),
        stack=np.full(n_segments, -1, np.int32),
        block_start=np.arange(0, n, blocks_per_segment, dtype=np.int64),
        block_count=np.full(n_segments, blocks_per_segment, np.int64),
    )
    blocks = S.Blocks(
        segment=seg_of,
        address=address,
        size=sizes,
        requested_size=requested,
        state=state,
        stack=stack,
    )
    z64, z32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
    trace = S.Trace(
        device=z32,
        action=np.zeros(0, np.int8),
        addr=z64,
        size=z64,
        stream=z64,
        time_us=z64,
        stack=z32,
        device_free=z64,
        compile_context=z32,
        user_metadata=z32,
    )
    ann = S.Annotations(device=z32, is_start=np.zeros(0, bool), name=z32, time_us=z64)
    return S.Snapshot(
        segments=segments,
        blocks=blocks,
        trace=trace,
        annotations=ann,
        frames=frames,
        stacks=stacks,
        pools=[(0, 0)],
        allocator_settings={},
        source_format="synthetic",
        path="/synthetic/big.pickle",
    )
