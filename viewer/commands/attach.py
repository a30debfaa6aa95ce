"""``vramscope attach``: list live processes, grab a snapshot from a running one.

::

    vramscope attach --list [--json]          # exit 0, also when nothing is attachable
    vramscope attach PID|ENDPOINT --save FILE  # the full snapshot, a standard pickle
    vramscope attach PID|ENDPOINT              # the allocator's figures now
    vramscope attach PID|ENDPOINT --gui        # the live window
    vramscope attach ssh://[user@]host[:port] --list        # the agents on a server
    vramscope attach ssh://[user@]host[:port] PID [--save FILE] [--gui]

On a server, everything goes through the user's own ``ssh`` (keys, agent,
``~/.ssh/config``; never a password prompt): discovery is a shell script run there,
the agent's socket is forwarded to a private socket here
(:mod:`vramscope.viewer.model.live.remote`), and ``--save`` writes the snapshot here.

A process is attachable once it runs ``vramscope.capture.serve()`` (or
``python -m vramscope.capture --live``).  On Python >= 3.14, ``vramscope attach
PID`` on a process without an agent injects one with ``sys.remote_exec``
(PEP 768) when it can: same interpreter version and permission to trace the
process.  Otherwise, and on older Pythons, it explains the opt-in.  A target
that cannot be attached exits 2 with one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .. import live_protocol as proto
from ..model.analysis.figures import Selection, memory_stats
from ..model.core.units import format_bytes, plural
from ..model.io.remote import RemoteError, is_remote, split_url
from ..model.live import nvml, remote
from ..model.live.client import AttachError
from ..model.live.session import LiveSession
from ..model.live.targets import Target, can_inject, list_targets

EXIT_OK, EXIT_FAILURE, EXIT_NOT_ATTACHABLE = 0, 1, 2
INJECT_WAIT_S = 10.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope attach",
        description="Watch a running PyTorch process's GPU memory or save a snapshot from it, "
        "without restarting it. The process opts in with "
        "`python -m vramscope.capture --live train.py` or "
        "`vramscope.capture.serve()`.",
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="PID|ENDPOINT|ssh://HOST",
        help="process id (from --list) or an endpoint (unix:/path, "
        "tcp:127.0.0.1:PORT); or ssh://[user@]host[:port] for a process on "
        "another machine (then its PID follows, or --list)",
    )
    p.add_argument("pid", nargs="?", metavar="PID", help="with ssh://HOST: the process id there")
    p.add_argument(
        "--list",
        action="store_true",
        help="list attachable processes and every GPU process NVML sees",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--save",
        metavar="FILE",
        help="write the process's full snapshot here (a standard snapshot pickle, "
        "with a .json sidecar holding memory_stats of the same instant)",
    )
    p.add_argument("--gui", action="store_true", help="open the live window")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.target and is_remote(args.target):
        return _remote(args)
    if args.pid is not None:
        parser().print_usage(sys.stderr)
        print("vramscope attach: error: a second PID only follows ssh://HOST", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    if args.list:
        return _list(args.json)
    if not args.target:
        parser().print_usage(sys.stderr)
        print("vramscope attach: error: a PID or endpoint (or --list) is required", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    target = args.target
    if target.isdigit() and proto.find_entry(int(target)) is None:
        code = _no_agent(int(target))
        if code is not None:
            return code
    return _attach(target, args)


def _attach(target: str, args: argparse.Namespace) -> int:
    if args.gui:
        from ..startup.display import window_error  # (Qt would abort: one line instead)

        error = window_error(
            instead="without a window: vramscope attach TARGET (its figures now) or --save FILE"
        )
        if error:
            print(f"vramscope: error: {error}", file=sys.stderr)
            return 2
        from .._qt.app import run_live

        return run_live(target)
    session = LiveSession(target)
    try:
        session.connect()
    except AttachError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    try:
        if args.save:
            return _save(session, args.save, args.json)
        return _figures(session, args.json)
    except AttachError as exc:  # e.g. no CUDA in the target yet: like every attach error, 2
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    finally:
        session.close()


def _remote(args: argparse.Namespace) -> int:
    """``ssh://HOST --list`` / ``ssh://HOST PID`` / ``ssh://HOST/PID``."""
    try:
        host, rest = split_url(args.target)
    except ValueError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    pid = args.pid if args.pid is not None else rest
    if args.list:
        if pid:
            print("vramscope attach: error: --list takes ssh://HOST alone", file=sys.stderr)
            return EXIT_NOT_ATTACHABLE
        try:
            listing = remote.list_remote(host)
        except RemoteError as exc:
            print(f"vramscope: error: {exc}", file=sys.stderr)
            return EXIT_NOT_ATTACHABLE
        return _list(args.json, remote_targets(listing), listing.nvml, host.destination)
    if not pid or not pid.isdigit():
        parser().print_usage(sys.stderr)
        print("vramscope attach: error: ssh://HOST needs a PID there (or --list)", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    return _attach(remote.make_target(host, int(pid)), args)


def remote_targets(listing: remote.RemoteListing) -> list[Target]:
    """The remote agents, then the GPU processes nvidia-smi shows without one."""
    found: dict[int, Target] = {}
    for e in listing.entries:
        pid = int(e["pid"])
        argv = e.get("argv") or []
        found[pid] = Target(
            pid,
            " ".join(str(a) for a in argv)[:300],
            str(e.get("endpoint")),
            e.get("rank"),
            e.get("device"),
            None,
            e.get("start_time"),
            e,
        )
    for dev in listing.nvml.devices:
        for p in dev.processes:
            t = found.get(p.pid)
            if t is None:
                t = found[p.pid] = Target(p.pid, "", None, None, dev.index)
            if p.used_bytes is not None:
                t.gpu_bytes = (t.gpu_bytes or 0) + p.used_bytes
    return sorted(found.values(), key=lambda t: (not t.attachable, t.pid))


def listing_dict(targets: list[Target], info: nvml.NvmlInfo, where: str | None = None) -> dict:
    """``attach --list --json`` (and the MCP tool ``live_agents``): each process, NVML's
    state, and the server it is on (an ssh:// listing only)."""
    return {
        "processes": [
            {
                "pid": t.pid,
                "attachable": t.attachable,
                "endpoint": t.endpoint,
                "rank": t.rank,
                "device": t.device,
                "gpu_bytes": t.gpu_bytes,
                "command": t.command,
            }
            for t in targets
        ],
        "nvml": info.error or "ok",
        **({"host": where} if where else {}),
    }


def _list(
    as_json: bool,
    targets: list[Target] | None = None,
    info: nvml.NvmlInfo | None = None,
    where: str | None = None,
) -> int:
    if targets is None or info is None:
        targets, info = list_targets()
    if as_json:
        print(json.dumps(listing_dict(targets, info, where), indent=1))
        return EXIT_OK
    if not targets:
        print(
            "no attachable processes"
            + (f" on {where}" if where else "")
            + " (opt in: "
            + proto.OPT_IN
            + ")"
        )
    for t in targets:
        mem = f" {format_bytes(t.gpu_bytes)} on GPU" if t.gpu_bytes is not None else ""
        mark = "attachable" if t.attachable else "no agent  "
        print(f"{t.pid:>8}  {mark}{mem}  {t.command}")
    if any(not t.attachable for t in targets):
        print(f"(no agent: opt in with {proto.OPT_IN})")
    if info.error:
        print(info.error)
    return EXIT_OK


def _no_agent(pid: int) -> int | None:
    """A PID without an agent: inject one (3.14+) or explain; None once attachable."""
    if not proto.pid_alive(pid):
        print(f"vramscope: error: no process {pid}", file=sys.stderr)
        return EXIT_NOT_ATTACHABLE
    if can_inject():
        problem = inject_agent(pid)
        if problem is None:
            return None
        print(
            f"vramscope: error: process {pid} has no vramscope agent and it could not be "
            f"injected ({problem}); opt in with: {proto.OPT_IN}",
            file=sys.stderr,
        )
        return EXIT_NOT_ATTACHABLE
    version = ".".join(map(str, sys.version_info[:2]))
    print(
        f"vramscope: error: process {pid} has no vramscope agent; opt in with: {proto.OPT_IN} "
        f"(injecting one needs Python 3.14+, this is {version})",
        file=sys.stderr,
    )
    return EXIT_NOT_ATTACHABLE


def inject_agent(pid: int) -> str | None:
    """Run ``serve()`` inside ``pid`` with sys.remote_exec (PEP 768); None on success.

    The target executes a small script at its next safe point; it finds
    vramscope on its own path or on ours (the same interpreter version only,
    checked by the script itself).  Then we wait for its registry entry.
    """
    remote_exec = getattr(sys, "remote_exec", None)
    if remote_exec is None:
        return "sys.remote_exec is not available"
    package_root = str(Path(__file__).resolve().parents[2].parent)
    script = (
        "import sys\n"
        f"if sys.version_info[:2] == {tuple(sys.version_info[:2])!r}:\n"
        "    try:\n"
        "        import vramscope.capture\n"
        "    except ImportError:\n"
        f"        sys.path.append({package_root!r})\n"
        "    import vramscope.capture\n"
        "    vramscope.capture.serve()\n"
    )
    fd, path = tempfile.mkstemp(prefix="vramscope-inject-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(path, 0o644)
        try:
            remote_exec(pid, path)
        except PermissionError:
            return "no permission to trace it (ptrace); same user and ptrace_scope 0 are needed"
        except Exception as exc:  # RuntimeError for a different interpreter, ...
            return f"{type(exc).__name__}: {exc}"
        deadline = time.monotonic() + INJECT_WAIT_S
        while time.monotonic() < deadline:
            if proto.find_entry(pid) is not None:
                return None
            time.sleep(0.2)
        return (
            "it did not start an agent within "
            f"{INJECT_WAIT_S:.0f} s (busy in native code, or another Python version)"
        )
    finally:
        time.sleep(0.5)  # the target reads the script asynchronously
        try:
            os.unlink(path)
        except OSError:
            pass


def save_snapshot(session: LiveSession, out: str):
    """The process's snapshot written to ``out`` and, beside it, the ``.json`` sidecar
    (``memory_stats()`` of the same instant: what the figures are checked against;
    none where ``out`` is itself a .json): (the path written, the snapshot).  Used by
    ``--save`` and the MCP tool ``live_snapshot``."""
    path, snap, header = session.save_snapshot(out)
    device = session.hello.get("device")
    stats = header.get("stats") or {}
    dev_stats = stats.get(str(device)) if device is not None else None
    side = {
        "name": path.stem,
        "reason": "live",
        "pid": session.hello.get("pid"),
        "rank": session.hello.get("rank"),
        "device": device,
        "torch": session.hello.get("torch"),
        "gpu": session.hello.get("gpu"),
        "unix_time": header.get("time"),
        "argv": session.hello.get("argv"),
        "memory_stats": dev_stats or {},
        "memory_stats_by_device": stats,
    }
    sidecar = path.with_suffix(".json") if path.suffix != ".json" else None
    if sidecar is not None:
        sidecar.write_text(json.dumps(side, indent=1, default=str) + "\n", encoding="utf-8")
    return path, snap


def _save(session: LiveSession, out: str, as_json: bool) -> int:
    path, snap = save_snapshot(session, out)
    figs = memory_stats(snap, Selection(device=session.hello.get("device")))
    if as_json:
        print(
            json.dumps(
                {
                    "file": str(path),
                    "bytes": path.stat().st_size,
                    "reserved_bytes": figs.reserved_bytes,
                    "allocated_bytes": figs.allocated_bytes,
                    "trace_events": int(len(snap.trace.action)),
                },
                indent=1,
            )
        )
    else:
        print(
            f"wrote {path} ({format_bytes(path.stat().st_size)}): reserved "
            f"{format_bytes(figs.reserved_bytes)}, "
            f"allocated {format_bytes(figs.allocated_bytes)}, "
            f"{plural(len(snap.trace.action), 'trace event')}"
        )
    return EXIT_OK


def _figures(session: LiveSession, as_json: bool) -> int:
    upd = session.poll_stats()
    info = session.query_nvml()
    if upd is None:
        print(session.status)
        return EXIT_OK
    if as_json:
        print(
            json.dumps(
                {
                    "pid": session.hello.get("pid"),
                    "stats": upd.figures.to_dict(),
                    "nvml": info.error or "ok",
                },
                indent=1,
                default=str,
            )
        )
        return EXIT_OK
    f = upd.figures
    print(
        f"{session.describe()}\n  reserved {format_bytes(f.reserved_bytes)}, allocated "
        f"{format_bytes(f.allocated_bytes)}, free in segments {format_bytes(f.free_bytes)}, "
        f"largest free block {format_bytes(f.largest_free_block_bytes)}, "
        f"{plural(f.segment_count, 'segment')}"
    )
    pid = session.hello.get("pid")
    used = info.process_bytes(pid) if isinstance(pid, int) else None
    if used is not None:
        print(
            f"  NVML: the process uses {format_bytes(used)} on the GPU "
            f"({format_bytes(max(0, used - f.reserved_bytes))} outside PyTorch's allocator)"
        )
    return EXIT_OK
