"""Shared fixtures: the real snapshots in tests/data and their allocator counters."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from tests import shared_data

# Tests (and the subprocesses they start) never touch the user's cache.
os.environ["VRAMSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="vramscope-test-cache-")

DATA = Path(__file__).parent / "data"
ASSETS = Path(__file__).resolve().parents[1] / "assets"

# Whole files marked ``slow`` (``make test-fast`` runs ``-m "not slow"`` and does not even
# import them); single slow tests elsewhere carry the mark themselves.
SLOW_FILES = {
    # a real sshd, ssh and the remote side's processes
    "remote/test_remote_attach.py": "sshd",
    "remote/test_remote_files.py": "sshd",
    "remote/test_remote_wire.py": "sshd",
    # headless Chromium lays pages out
    "cli/test_report_cli.py": "Chromium",
    "gui/test_report_agrees.py": "Chromium, every ../shared snapshot",
    "api/test_notebook.py": "a Jupyter kernel and Chromium",
    # every snapshot of tests/data or ../shared through the CLI or the whole model
    "api/test_api_equals_cli.py": "every snapshot, CLI subprocesses",
    "model/test_external.py": "every ../shared/external snapshot",
    "model/test_limit_at_oom.py": "every snapshot with an OOM (loaded when collected)",
    "test_plurals.py": "every snapshot through the CLI",
    "model/test_ranks_dask.py": "a Dask cluster",
    # the window rendered to PNGs, view by view and pair by pair
    "gui/test_screenshot_views.py": "screenshots of every view",
    "gui/test_compare_aligned.py": "screenshots of every pair",
    # wheels and installers built and installed
    "test_wheel.py": "builds and installs wheels",
    "packaging/test_frozen_app.py": "the frozen app",
    "capture/test_capture_runner.py": "training scripts run under the recorder",
    # the heaviest of the rest, by their summed durations in a run of all the others
    # (CLI subprocesses on many files, the pure-Python parser over every encoding, the
    # live window, the main window's and the Diagnosis panel's whole sessions)
    "model/test_cache.py": "every cache entry parsed again by the Python parser",
    "model/test_formats.py": "every encoding through both parsers",
    "cli/test_summary_cli.py": "CLI subprocesses",
    "cli/test_gpu_verdict.py": "CLI subprocesses",
    "cli/test_device_focus_cli.py": "CLI subprocesses",
    "cli/test_mcp.py": "an MCP server subprocess",
    "cli/test_advise_cli.py": "CLI subprocesses",
    "cli/test_whatif_cli.py": "CLI subprocesses",
    "live/test_live_view_state.py": "a live training process",
    "live/test_live_gui.py": "a live training process",
    "model/test_remedies_workspaces.py": "every truth sweep",
    "model/test_whatif.py": "simulations of every recording",
    "model/test_replay.py": "both replays of every recording",
    "model/test_one_vocabulary.py": "advise on every recording",
    "model/test_near_limit.py": "batch searches on the truth sweeps",
    "model/test_sharded.py": "every FSDP recording",
    "model/test_aligned_diff.py": "aligned diffs of recording pairs",
    "gui/test_main_window.py": "whole window sessions",
    "gui/test_diagnosis_panel.py": "the Diagnosis panel's simulations",
    "cli/test_advise_names_each_peak.py": "CLI subprocesses on the OOM recordings",
    "cli/test_gpu_holder_advice.py": "CLI subprocesses on the GPU-holder recordings",
    "model/test_whatif_native.py": "the C and Python what-if models on random streams",
    "api/test_python_doc.py": "PYTHON.md's examples run",
    "gui/test_keys_legends_and_contrast.py": "real windows on real recordings",
    "model/test_fuzz_loader.py": "property-based fuzzing through both parsers",
    "gui/test_categories_window.py": "the main window's categories on the truth recordings",
    "gui/test_report_export.py": "reports exported from real windows",
    "gui/test_labels_and_units.py": "real windows on real recordings",
    "gui/test_timeline.py": "time travel through the real loader",
    "model/test_replay_out_of_memory.py": "compiled replays under address-space limits",
    "cli/test_whatif_seq_cli.py": "CLI and MCP subprocesses",
    "cli/test_whatif_pair.py": "CLI and MCP subprocesses",
    "cli/test_summary_ranks_split.py": "CLI and MCP subprocesses on rank directories",
    "model/test_ddp_bucket_view_remedy.py": "advise's simulations on every DDP recording",
}
_TESTS = Path(__file__).parent


def _slow_file(path: Path) -> bool:
    try:
        return path.resolve().relative_to(_TESTS).as_posix() in SLOW_FILES
    except ValueError:
        return False


def pytest_ignore_collect(collection_path: Path, config):
    """``-m "not slow"`` (make test-fast) does not import the slow files at all."""
    if config.getoption("markexpr", "") == "not slow" and _slow_file(collection_path):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow_file(item.path):
            item.add_marker(pytest.mark.slow)


def snapshot_files() -> list[Path]:
    """Every real snapshot bundled with the tests (pickle or compressed pickle)."""
    files = sorted(DATA.glob("*.pickle")) + sorted(DATA.glob("*.pickle.xz"))
    return files + sorted(ASSETS.glob("*.pickle"))  # the bundled example, written by capture


def expected_for(path: Path) -> dict:
    """NAME.json beside NAME.pickle[.xz]: the workload and its memory_stats."""
    name = path.name.split(".pickle")[0]
    return json.loads((path.parent / f"{name}.json").read_text())


def snapshot_id(path: Path) -> str:
    return path.name.split(".pickle")[0]


@pytest.fixture(autouse=True)
def _shared_files_required(request):
    """The files a test's ``shared`` marks name (shared_data.needs) are there: else the test
    skips, or fails under CI, before it runs."""
    for mark in request.node.iter_markers("shared"):
        for path in mark.args:
            shared_data.require(path)


@pytest.fixture(scope="session")
def loaded_snapshots():
    """Load every bundled snapshot once per session (the 1M-event one takes seconds)."""
    from vramscope.viewer.model import load_snapshot

    cache: dict[str, object] = {}

    def get(path: Path):
        key = os.fspath(path)
        if key not in cache:
            cache[key] = load_snapshot(path)
        return cache[key]

    return get


@pytest.fixture
def isolated_qt_settings(tmp_path, monkeypatch):
    """A private settings file for a GUI test: real user settings are never touched."""
    from PySide6.QtCore import QSettings

    path = tmp_path / "settings" / "vramscope.ini"
    path.parent.mkdir()
    monkeypatch.setenv("VRAMSCOPE_SETTINGS_FILE", os.fspath(path))
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.fspath(path.parent))
    return path
