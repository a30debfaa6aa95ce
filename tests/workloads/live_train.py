"""A real training loop to attach to (live-attach GPU tests, overhead benchmark, screenshots).

Trains the transformer of ``train_small.py`` and, with ``--grow-mib``, keeps
a growing list of extra buffers so that memory visibly climbs while a viewer
watches.  Opt-in to live attach is the usual one: run it under
``python -m vramscope.capture --live`` or pass ``--serve``.

Handshake for "same step" checks (``--pause-at N --handshake-dir D``): after
step N the loop synchronises, writes ``D/stats.json`` (``memory_stats()`` of
its device, the same instant a snapshot taken now shows, since nothing
allocates while it waits) and waits for ``D/go`` before going on.

Benchmark (``--bench-phases K``): alternates phases without and with the
agent (``stop_serving()`` / ``serve()``; recording stays on in both), times
every step, and writes ``D/bench.json``.  A poller in another process (the
benchmark script) attaches whenever the agent is there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_small


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--serve", action="store_true", help="call vramscope.capture.serve()")
    p.add_argument("--grow-mib", type=int, default=0, help="keep N MiB more after every step")
    p.add_argument("--grow-max", type=int, default=200, help="most extra buffers kept")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step")
    p.add_argument("--pause-at", type=int, default=None)
    p.add_argument("--handshake-dir", default=None)
    p.add_argument("--until-file", default=None)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--bench-phases", type=int, default=0)
    p.add_argument("--phase-steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args(argv)

    import torch

    import vramscope.capture as capture

    hs = Path(args.handshake_dir) if args.handshake_dir else None
    if args.serve:
        capture.serve(
            max_entries=int(os.environ.get("LIVE_MAX_ENTRIES", "100000")),
            budget=float(os.environ.get("LIVE_BUDGET", "0.01")),
        )
    torch.manual_seed(0)
    device = train_small.pick_device()
    model, opt = train_small.build(args.width, args.layers, device)
    step = train_small.make_step(model, opt, args.batch, args.seq, args.width, device)
    if args.bench_phases:
        return _bench(args, torch, capture, step, hs)
    extra: list = []
    deadline = time.monotonic() + args.max_seconds
    i = 0
    while True:
        loss = step()
        i += 1
        if args.grow_mib and len(extra) < args.grow_max:
            extra.append(torch.empty(args.grow_mib << 20, dtype=torch.uint8, device=device))
        if i == 1 and hs is not None:
            _write_json(hs / "ready.json", {"pid": os.getpid(), "device": device})
        if args.pause_at is not None and i == args.pause_at and hs is not None:
            torch.cuda.synchronize()
            gc.collect()
            gc.disable()  # nothing may be freed while the snapshot is taken
            stats = torch.cuda.memory_stats(torch.cuda.current_device())
            _write_json(
                hs / "stats.json",
                {"step": i, "device": torch.cuda.current_device(), "memory_stats": dict(stats)},
            )
            t0 = time.monotonic()
            while not (hs / "go").exists() and time.monotonic() - t0 < 120:
                time.sleep(0.05)
            gc.enable()
        if args.sleep:
            time.sleep(args.sleep)
        print(f"step {i} loss {loss:.4f} extra {len(extra)}", flush=True)
        if args.until_file:
            if os.path.exists(args.until_file) or time.monotonic() > deadline:
                break
        elif i >= args.steps:
            break
    if device != "cpu":
        torch.cuda.synchronize()
    print(f"done {i} steps", flush=True)
    return 0


def _bench(args, torch, capture, step, hs: Path) -> int:
    from vramscope.capture.live import agent as live_agent

    # Recording is on in every phase: what is measured is the agent and its clients.
    capture.start(max_entries=int(os.environ.get("LIVE_MAX_ENTRIES", "100000")), dump_signal=None)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    phases = []
    for k in range(args.bench_phases):
        on = k % 2 == 1
        if on:
            agent = capture.serve()
            _write_json(hs / "agent.json", {"pid": os.getpid(), "endpoint": agent.endpoint})
            time.sleep(1.5)  # the poller attaches
        times = []
        for _ in range(args.phase_steps):
            t0 = time.perf_counter()
            step()  # ends in float(loss): one synchronisation per step, as usual
            times.append(time.perf_counter() - t0)
        served = 0
        gov = {}
        if on:
            a = live_agent.current_agent()
            served = a.server.served if a else 0
            gov = {k2: {"cost_s": g.cost} for k2, g in (a.governors.items() if a else [])}
            capture.stop_serving()
            (hs / "agent.json").unlink(missing_ok=True)
        phases.append({"agent": on, "times": times, "served": served, "governors": gov})
        print(
            f"phase {k} agent={on} median {sorted(times)[len(times) // 2] * 1e3:.2f} ms "
            f"served {served}",
            flush=True,
        )
    _write_json(hs / "bench.json", {"phases": phases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
