"""A "training process" on the fake allocator, serving live attach.

``python fake_target.py [--live-runner] [--no-serve] [--tcp]`` prints
``READY <pid> <endpoint>`` and then obeys one command per stdin line::

    alloc SIZE     allocate a block (prints ``OK``)
    free           free the oldest live block
    step N         N allocations of 1 MiB, each freed again
    stats          print memory_stats() as one JSON line
    wait SECONDS   sleep (the agent keeps answering meanwhile)
    exit [CODE]    exit

Only the allocator is fake; the agent runs for real in this process.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from live_fakes import LiveFakeBackend

from vramscope.capture import backend


def main() -> int:
    args = sys.argv[1:]
    fb = LiveFakeBackend(initialized=not os.environ.get("FAKE_UNINITIALISED"))
    backend.set_backend(fb)
    import vramscope.capture as capture
    from vramscope.capture.live import agent as live_agent
    from vramscope.capture.live import server as live_server

    # Short limits keep the hostile-client tests fast; the logic is the same.
    live_server.HELLO_TIMEOUT_S = float(os.environ.get("FAKE_HELLO_TIMEOUT", "5"))
    live_server.MESSAGE_DEADLINE_S = float(os.environ.get("FAKE_DEADLINE", "5"))

    if "--no-serve" in args:
        endpoint = "-"
    else:
        kwargs = {}
        if "--tcp" in args:
            # What a platform without AF_UNIX gets.
            a = live_agent.Agent(use_unix=False).start()
            live_agent._agent = a
            a.recorder = capture.start(
                max_entries=int(os.environ.get("FAKE_MAX_ENTRIES", "1000")), dump_signal=None
            )
            agent = a
        else:
            kwargs["max_entries"] = int(os.environ.get("FAKE_MAX_ENTRIES", "1000"))
            budget = float(os.environ.get("FAKE_BUDGET", "1.0"))
            agent = capture.serve(budget=budget, **kwargs)
        endpoint = agent.endpoint if agent is not None else "-"
    print(f"READY {os.getpid()} {endpoint}", flush=True)
    live: list[int] = []
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "alloc":
            live.append(fb.alloc(int(rest[0])))
        elif cmd == "free":
            fb.free(live.pop(0))
        elif cmd == "step":
            for _ in range(int(rest[0])):
                fb.free(fb.alloc(1 << 20))
        elif cmd == "stats":
            print(json.dumps(fb.memory_stats(0)), flush=True)
            continue
        elif cmd == "wait":
            time.sleep(float(rest[0]))
        elif cmd == "exit":
            return int(rest[0]) if rest else 0
        print("OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
