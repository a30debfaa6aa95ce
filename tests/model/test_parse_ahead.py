"""The parse started ahead of the imports gives exactly what an in-process parse gives.

Each check runs in a fresh interpreter (as the CLI does: ``parse_ahead`` starts
before numpy is imported): the file is parsed on the parse-ahead thread (its
device traces in parallel sections even when small: ``SECTION_MIN_EVENTS = 1``)
and claimed by ``load_snapshot``, then loaded again in-process on one thread;
both snapshots must be identical, and errors must match word for word.  Also:
the thread's answer is really used (not quietly handed back), a cancelled wait
stops the parse, a file replaced after the start is parsed anew, and the modules
the CLI imports before numpy never import numpy themselves.
"""

from __future__ import annotations

import json
import lzma
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from tests import native_gate
from tests.bad_inputs import cases
from tests.conftest import DATA
from vramscope.viewer.model.io import fast_pickle

ROOT = DATA.parent.parent
SNAPSHOTS = (
    sorted(DATA.glob("*.pickle"))
    + sorted((DATA / "ddp_2ranks").glob("*.pickle"))
    + sorted((ROOT / "assets").glob("*.pickle"))
)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parse-ahead is Linux-only"),
    native_gate.needs(fast_pickle.available(), "compiled parser not built"),
]

# Runs in a fresh interpreter: argv = JSON list of files; prints one JSON line per file.
COMPARE = textwrap.dedent("""
    import json, os, sys
    from vramscope.viewer.startup import parse_ahead
    parse_ahead.handover.MIN_BYTES = 0  # the bundled files are small
    parse_ahead.handover.SECTION_MIN_EVENTS = 1  # and their traces short: parallel sections anyway
    os.environ["VRAMSCOPE_PARSE_THREADS"] = "4"
    files = json.loads(sys.argv[1])
    started = {f: parse_ahead.start(f, use_cache=False) for f in files}
    assert "numpy" not in sys.modules and "vramscope.viewer.model" not in sys.modules
    answers = {}
    original = parse_ahead.Ahead.answer
    def answer(self, *a, **k):
        got = original(self, *a, **k)
        answers[self.path] = got is not None
        return got
    parse_ahead.Ahead.answer = answer
    from tests.parser_paths import assert_identical
    from vramscope.viewer.model import SnapshotError, load_snapshot
    for f in files:
        def load():
            try:
                return load_snapshot(f, use_cache=False), None
            except SnapshotError as exc:
                return None, f"{type(exc).__name__}: {exc}"
        ahead_snap, ahead_error = load()
        os.environ["VRAMSCOPE_PARSE_THREADS"] = "1"
        here, here_error = load()  # nothing pending any more: parsed here, on one thread
        os.environ["VRAMSCOPE_PARSE_THREADS"] = "4"
        same = ahead_error == here_error
        if same and ahead_snap is not None:
            assert_identical(ahead_snap, here)
        used = answers.get(os.path.abspath(f), False)
        print(json.dumps({"file": f, "started": started[f], "used": used, "same": same,
                          "error": here_error, "ahead_error": ahead_error}))
""")


def run_compare(files) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps([os.fspath(f) for f in files])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=dict(os.environ, VRAMSCOPE_NO_CACHE="1"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_every_snapshot_identical_through_the_parse_ahead():
    rows = run_compare(SNAPSHOTS)
    assert len(rows) == len(SNAPSHOTS)
    for row in rows:
        assert row["started"] and row["used"], f"{row['file']}: the parse ahead was not used"
        assert row["same"] and row["error"] is None, row


def test_bad_inputs_give_the_same_errors(tmp_path):
    files = []
    for name, data, _ in cases():
        if data[:1] == b"\x80":  # what parse-ahead takes (binary pickles)
            p = tmp_path / f"{name}.pickle"
            p.write_bytes(data)
            files.append(p)
    assert len(files) >= 5
    rows = run_compare(files)
    for row in rows:
        assert row["started"], row
        assert row["same"], f"{row['file']}: {row['ahead_error']} != {row['error']}"
    assert any(r["error"] for r in rows)  # errors really were compared


def test_small_compressed_and_text_files_are_not_parsed_ahead(tmp_path):
    script = textwrap.dedent("""
        import sys, lzma
        from vramscope.viewer.startup import parse_ahead
        data = open(sys.argv[1], "rb").read()
        small, xz, text = sys.argv[2:5]
        open(xz, "wb").write(lzma.compress(data, preset=0))
        open(text, "wb").write(b"(dp0\\n" + b" " * (5 << 20))
        print(parse_ahead.start(small, use_cache=False), parse_ahead.handover.MIN_BYTES > 1 << 20)
        parse_ahead.handover.MIN_BYTES = 0
        print(parse_ahead.start(xz, use_cache=False), parse_ahead.start(text, use_cache=False))
    """)
    src = DATA / "fragmentation_oom.pickle"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            os.fspath(src),
            os.fspath(src),
            os.fspath(tmp_path / "a.pickle.xz"),
            os.fspath(tmp_path / "t.pickle"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "False", "False"]


CANCEL = textwrap.dedent("""
    import os, sys, time
    from vramscope.viewer.startup import parse_ahead
    path = sys.argv[1]
    os.environ["VRAMSCOPE_PARSE_THREADS"] = "1"  # the serial parse: progress all along
    assert parse_ahead.start(path, use_cache=False)
    ahead = parse_ahead.claim(path)
    class Stop(Exception):
        pass
    def update(fraction):
        raise Stop()
    t = time.perf_counter()
    try:
        ahead.answer(update, path)
    except Stop:
        pass
    stopped = ahead.done.wait(30)
    print("stopped" if stopped and ahead.result is None else "still parsing",
          type(ahead.error).__name__)
""")


def test_a_cancelled_wait_stops_the_parse(tmp_path):
    path = tmp_path / "big.pickle"
    path.write_bytes(
        lzma.decompress((DATA / "transformer_long_python_1000k.pickle.xz").read_bytes())
    )
    out = subprocess.run(
        [sys.executable, "-c", CANCEL, os.fspath(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["stopped", "_Cancelled"]


REPLACED = textwrap.dedent("""
    import os, shutil, sys
    from vramscope.viewer.startup import parse_ahead
    parse_ahead.handover.MIN_BYTES = 0
    path, other = sys.argv[1:3]
    assert parse_ahead.start(path, use_cache=False)
    assert parse_ahead.handover.pending(path)
    os.replace(other, path)  # a new file (inode) at the same path
    from vramscope.viewer.model import load_snapshot
    snap = load_snapshot(path, use_cache=False)
    print(len(snap.trace.action), len(snap.segments.address))
""")


def test_a_file_replaced_after_the_start_is_parsed_anew(tmp_path):
    first, second = tmp_path / "snap.pickle", tmp_path / "other.pickle"
    first.write_bytes((DATA / "fragmentation_oom.pickle").read_bytes())
    second.write_bytes((DATA / "gpt2_oom.pickle").read_bytes())
    from vramscope.viewer.model import load_snapshot

    want = load_snapshot(second, use_cache=False)
    out = subprocess.run(
        [sys.executable, "-c", REPLACED, os.fspath(first), os.fspath(second)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(want.trace.action)), str(len(want.segments.address))]


def test_modules_run_before_numpy_import_no_numpy():
    code = (
        "import sys; import vramscope.viewer.startup.parse_ahead, "
        "vramscope.viewer.startup.preload, vramscope.viewer.commands.result_cache, "
        "vramscope.viewer.cli; "
        "print(sorted(m for m in ('numpy', 'PySide6', 'vramscope.viewer.model') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_early_helpers_are_stdlib_only():
    """What start-up imports before numpy must need nothing but the standard library."""
    import ast

    early = ROOT / "viewer" / "early"
    modules = sorted(early.glob("*.py"))
    assert len(modules) >= 3  # __init__, file_identity, parse_handover
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: a package-relative import"
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names, f"{path.name} imports {name}"


SAME_MODULES = textwrap.dedent("""
    import sys
    from vramscope.viewer.commands import result_cache
    from vramscope.viewer.startup import parse_ahead
    assert "numpy" not in sys.modules
    from vramscope.viewer.model.io import cache, load
    print(load.parse_handover is parse_ahead.handover,
          cache.file_identity is result_cache.file_identity)
""")


def test_the_model_uses_the_helpers_start_up_loaded():
    """One module object each: the model's loader claims what start-up offered."""
    out = subprocess.run(
        [sys.executable, "-c", SAME_MODULES], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_the_cache_key_is_the_column_cache_key(tmp_path):
    from vramscope.viewer.early import file_identity
    from vramscope.viewer.model.io import cache

    p = tmp_path / "x.pickle"
    p.write_bytes(pickle.dumps({"segments": []}) + b"\0" * (2 << 20))
    assert file_identity.column_key(p) == cache.file_key(p) is not None
    assert file_identity.column_entry("k") == os.fspath(cache.entry_path("k"))


CACHED = textwrap.dedent("""
    import sys
    from vramscope.viewer.startup import parse_ahead
    path = sys.argv[1]
    print(parse_ahead.start(path), parse_ahead.start(path, use_cache=False))
""")


def test_cached_columns_are_mapped_not_parsed_again(tmp_path):
    src = max(SNAPSHOTS, key=lambda p: p.stat().st_size)
    path = tmp_path / "snap.pickle"
    path.write_bytes(src.read_bytes() + b"\0" * (5 << 20))  # after STOP: ignored, but big
    env = dict(os.environ, VRAMSCOPE_CACHE_DIR=os.fspath(tmp_path / "cache"))
    env.pop("VRAMSCOPE_NO_CACHE", None)
    prime = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from vramscope.viewer.model "
            "import load_snapshot; load_snapshot(sys.argv[1])",
            os.fspath(path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=env,
    )
    assert prime.returncode == 0, prime.stderr
    assert list((tmp_path / "cache").glob("*.cols"))
    out = subprocess.run(
        [sys.executable, "-c", CACHED, os.fspath(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]  # cached: no parse; --no-cache: a parse


@pytest.mark.parametrize(
    ("cores", "alone", "beside"), [(1, 1, 1), (2, 2, 2), (4, 4, 3), (16, 16, 15)]
)
def test_a_parse_ahead_leaves_a_core_to_the_main_thread(monkeypatch, cores, alone, beside):
    from vramscope.viewer.early import parse_handover

    monkeypatch.delenv(parse_handover.THREADS_ENV, raising=False)
    monkeypatch.setattr(parse_handover.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert parse_handover.parse_threads() == alone
    assert parse_handover.parse_threads(beside_work=True) == beside
    monkeypatch.setenv(parse_handover.THREADS_ENV, "16")  # asked for: as asked
    assert parse_handover.parse_threads(beside_work=True) == 16
