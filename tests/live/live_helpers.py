"""Helpers of the live-attach tests: a fake training process driven line by line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Target:
    """A fake training process driven line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fake_target.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "READY", (line, self.proc.stderr.read())
        self.pid = int(line[1])
        self.endpoint = line[2]

    def cmd(self, text: str) -> str:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stats(self) -> dict:
        return json.loads(self.cmd("stats"))

    def exit(self, code: int = 0) -> int:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(f"exit {code}\n")
                self.proc.stdin.flush()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stderr(self) -> str:
        return self.proc.stderr.read()
