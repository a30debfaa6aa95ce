"""The three ways to opt in: serve(), record(..., live=True) and the runner's --live."""

from __future__ import annotations

import json

from capture_helpers import child_env, run_python
from live_fakes import LiveFakeBackend

import vramscope.capture as capture
from vramscope.capture import backend
from vramscope.capture.live import current_agent
from vramscope.viewer import live_protocol as proto


def test_record_live_serves_while_recording(runtime_dir, tmp_path):
    fb = LiveFakeBackend()
    backend.set_backend(fb)
    try:
        with capture.record(out=tmp_path, live=True, dump_on_exit=False) as rec:
            agent = current_agent()
            assert agent is not None and agent.recorder is None  # recording is rec's
            assert proto.find_entry(agent.pid, runtime_dir)["endpoint"] == agent.endpoint
            assert rec.active
        assert current_agent() is None
        assert proto.read_registry(runtime_dir) == []
    finally:
        capture._reset_for_tests()


def test_serve_starts_recording_once_and_stop_serving_undoes_it(runtime_dir):
    fb = LiveFakeBackend()
    backend.set_backend(fb)
    try:
        a = capture.serve(max_entries=123)
        assert a is capture.serve()  # idempotent
        assert a.recorder is not None and fb.history.max_entries == 123
        capture.stop_serving()
        assert fb.history is None and current_agent() is None
    finally:
        capture._reset_for_tests()


SCRIPT = """
import json, os
from vramscope.capture.live import current_agent
from vramscope.viewer import live_protocol as proto
a = current_agent()
print(json.dumps({"endpoint": a.endpoint if a else None,
                  "listed": proto.find_entry(os.getpid()) is not None}))
"""


def test_runner_live_flag(runtime_dir, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    fakerun = tmp_path / "fakerun.py"
    fakerun.write_text(
        "import sys\n"
        "from live_fakes import LiveFakeBackend\n"
        "from vramscope.capture import backend, runner\n"
        "backend.set_backend(LiveFakeBackend(initialized=False))\n"
        "sys.exit(runner.main(sys.argv[1:]))\n"
    )
    env = child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir)})
    env["PYTHONPATH"] = str(__import__("pathlib").Path(__file__).parent) + ":" + env["PYTHONPATH"]
    r = run_python(
        [str(fakerun), "--live", "--out", str(tmp_path / "s"), str(script)], cwd=tmp_path, env=env
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["endpoint"].startswith("unix:") and out["listed"]
    assert "live attach: `vramscope attach" in r.stderr
    assert proto.read_registry(runtime_dir) == []  # removed at exit
    r = run_python([str(fakerun), "--out", str(tmp_path / "s"), str(script)], cwd=tmp_path, env=env)
    assert json.loads(r.stdout.strip().splitlines()[-1])["endpoint"] is None  # opt-in only
