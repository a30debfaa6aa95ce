"""Screenshots of the live window attached to a real training process (GPU machine).

    QT_QPA_PLATFORM=offscreen python tests/live/screenshot_live.py OUT_DIR

Starts ``tests/workloads/live_train.py --serve --grow-mib 32`` (memory climbs
step by step), attaches a :class:`LiveController` (a main window fed live) to it and grabs the
window twice, some seconds apart, as OUT_DIR/live_1.png and live_2.png; prints the
reserved bytes the window showed at each grab.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    hs = Path(tempfile.mkdtemp(prefix="vsl-shot-"))
    rt = Path(tempfile.mkdtemp(prefix="vsl-", dir="/tmp"))
    os.chmod(rt, 0o700)
    os.environ["VRAMSCOPE_RUNTIME_DIR"] = str(rt)
    until = hs / "stop"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests/workloads/live_train.py"),
            "--serve",
            "--grow-mib",
            "48",
            "--grow-max",
            "400",
            "--sleep",
            "0.05",
            "--width",
            "512",
            "--layers",
            "4",
            "--batch",
            "16",
            "--seq",
            "256",
            "--handshake-dir",
            str(hs),
            "--until-file",
            str(until),
        ],
        env=dict(os.environ, LIVE_MAX_ENTRIES="20000"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.monotonic()
        while not (hs / "ready.json").exists():
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                print("workload did not start:", proc.stderr.read()[-2000:])
                return 2
            time.sleep(0.1)
        pid = json.loads((hs / "ready.json").read_text())["pid"]
        from vramscope.viewer._qt.app import application
        from vramscope.viewer._qt.live.controller import LiveController

        app = application()
        live = LiveController(str(pid))
        w = live.window
        w.resize(1600, 950)
        w.show()

        def spin(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                app.processEvents()
                time.sleep(0.02)

        shots = []
        for k, wait in enumerate((8.0, 8.0), 1):
            spin(wait)
            path = out / f"live_{k}.png"
            w.grab().save(str(path))
            shots.append(
                {
                    "png": path.name,
                    "state": live.state,
                    "stats_updates": live.stats_updates,
                    "trace_updates": live.trace_updates,
                    "reserved_curve": live.curves.last("reserved"),
                    "status": live.live_status.toolTip(),
                    "device_panel": live.device_panel.text(),
                }
            )
            print(json.dumps(shots[-1], indent=1), flush=True)
        w.close()
        (out / "shots.json").write_text(json.dumps(shots, indent=1))
        grew = shots[1]["reserved_curve"] > shots[0]["reserved_curve"]
        print("memory moved between the grabs:", grew)
        return 0 if grew else 1
    finally:
        until.touch()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
