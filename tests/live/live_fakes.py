"""The capture tests' fake allocator, plus what live attach asks of it.

Adds to ``FakeBackend`` (tests/capture/capture_fakes.py) the two things the
live agent reads that the recorder does not: ``time_us`` on trace entries
(coarse, so several entries share a time, as on a real GPU), a ring buffer
of ``max_entries`` (old entries overwritten), and the segments-only snapshot.
Only the allocator calls are fake; the agent, the socket and the viewer's
client are the real ones.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))

from capture_fakes import FakeBackend


class LiveFakeBackend(FakeBackend):
    def __init__(self, *args: Any, time_step_us: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._t = int(time.time() * 1e6)
        self.time_step_us = time_step_us  # 0: real clock at 1 ms resolution

    def _now_us(self) -> int:
        if self.time_step_us:
            self._t += self.time_step_us
            return self._t
        return int(time.time() * 1000) * 1000

    def _trace(self, action: str, addr: int, size: int) -> None:
        if self.history is None:
            return
        self.trace.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": self._now_us(),
                "frames": [{"filename": "train.py", "line": 7, "name": "step"}],
            }
        )
        limit = getattr(self.history, "max_entries", None)
        if isinstance(limit, int) and len(self.trace) > limit:
            del self.trace[: len(self.trace) - limit]

    def segments_snapshot(self) -> list[dict[str, Any]]:
        return self.snapshot()["segments"]
