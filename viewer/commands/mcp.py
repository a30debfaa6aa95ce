"""``vramscope mcp``: vramscope's analyses for coding agents, over the Model Context Protocol.

An agent asked to debug an OOM calls ``summary``, ``advise``, ``whatif``, ``diff``,
``stack_at`` and the live tools and reads the JSON the CLI prints, instead of
scraping the command line.  The server speaks MCP over stdio (the client starts
``vramscope mcp`` and owns its stdin/stdout), built on the official SDK, an
optional extra: ``pip install '.[mcp]'`` in a clone of vramscope.

The analyses themselves are :mod:`.mcp_tools` (SDK-free); this module registers
them: argument schemas with descriptions, progress notifications, and every
failure as one line of a tool error, never a traceback (a crash is logged on
stderr, which clients keep as the server's log).  Tools run one at a time on a
worker thread: the event loop keeps answering (pings, cancellations) while a
replay runs, and two big snapshots are never held at once.
"""

# No ``from __future__ import annotations`` here: the SDK reads the tools' annotations
# (their JSON schemas, and which parameter takes the Context) from the functions built
# in build_server(), whose types are imported there, with the optional SDK.

import argparse
import logging
import sys
import threading
import time
from typing import Annotated, Any, Callable

from ..early.install_hint import install_hint
from . import mcp_tools

EXTRA_MISSING = "vramscope: error: `vramscope mcp` needs the MCP Python SDK: " + install_hint("mcp")
#: Progress notifications sent at most this often (a replay reports thousands of steps).
PROGRESS_EVERY_S = 0.1
RECORDING_GUIDE_URI = "vramscope://guide/record-a-snapshot"

INSTRUCTIONS = """\
vramscope analyses PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot
pickles, or what `python -m vramscope.capture` writes). To debug an OOM: `summary`
(the figures, the verdict: fragmentation or capacity, what the memory is, the top
allocation sites, leaks), then `advise` (the changes that would make it fit, ranked
by predicted peak), `whatif` (other PYTORCH_CUDA_ALLOC_CONF settings), `stack_at`
(the largest allocations alive at a moment, with their stacks: the code to change)
and `diff` (two runs). Running processes: `live_agents`, `live_snapshot`. No snapshot
yet: read the resource {uri}. Paths are absolute or relative to the server's
working directory.""".format(uri=RECORDING_GUIDE_URI)

logger = logging.getLogger("vramscope.mcp")


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="vramscope mcp",
        description="Serve vramscope's analyses (summary, advise, whatif, diff, stack_at, "
        "live attach) to coding agents over the Model Context Protocol, on stdin/stdout. "
        "Started by the agent's client, e.g. `claude mcp add vramscope -- vramscope mcp`. "
        "Needs the optional extra: " + install_hint("mcp") + ".",
    )


def main(argv: list[str]) -> int:
    parser().parse_args(argv)
    try:
        import mcp.server.mcpserver  # noqa: F401 - the SDK (2.x) is an optional extra
    except ImportError:
        print(EXTRA_MISSING, file=sys.stderr)
        return 2
    if sys.stdin.isatty():  # typed by a person: say why nothing seems to happen
        print(
            "vramscope mcp: serving MCP on stdin/stdout for an agent's client to start "
            "(see --help); Ctrl-C to stop",
            file=sys.stderr,
        )
    try:
        build_server().run("stdio")
    except KeyboardInterrupt:
        return 130
    return 0


def one_line(text: str) -> str:
    """A message as the one line a tool error is (the model's messages are one line;
    this keeps it so for any other)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip()) or "failed"


class _Tools:
    """Runs the analyses for the SDK: one at a time, with progress, errors as one line."""

    def __init__(self, tool_error: type[Exception]) -> None:
        self.tool_error = tool_error
        self.lock = threading.Lock()

    def run(self, ctx: Any, name: str, work: Callable[[mcp_tools.Report | None], Any]) -> Any:
        """``work(report)`` on this (worker) thread; failures become the SDK's tool error."""
        from ..model.core.errors import LoadCancelled

        report = _progress_to(ctx)
        with self.lock:
            try:
                return work(report)
            except mcp_tools.ToolFailure as exc:
                raise self.tool_error(one_line(str(exc))) from None
            except LoadCancelled:
                raise self.tool_error("cancelled") from None
            except MemoryError:
                raise self.tool_error("not enough memory for this snapshot") from None
            except Exception as exc:  # a bug, or an input no check foresaw: one line still
                logger.exception("vramscope mcp: tool %s failed", name)
                raise self.tool_error(
                    f"vramscope failed: {type(exc).__name__}: {one_line(str(exc))}"
                ) from None


def _progress_to(ctx: Any) -> mcp_tools.Report | None:
    """A report callback sending MCP progress notifications from the worker thread (a
    no-op in the SDK when the caller asked for none), at most every PROGRESS_EVERY_S."""
    import anyio.from_thread

    if ctx is None:
        return None
    last = [0.0]

    def report(fraction: float, message: str) -> None:
        now = time.monotonic()
        if fraction < 1.0 and now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        try:
            anyio.from_thread.run(ctx.report_progress, round(fraction * 100, 1), 100.0, message)
        except Exception:  # the client left: the answer goes nowhere either way
            logger.debug("progress not sent", exc_info=True)

    return report


def build_server():
    """The MCP server with vramscope's tools and the recording guide (needs the SDK)."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import Field, ValidationError

    from .. import __version__

    class Server(MCPServer):
        """Arguments of the wrong type or shape: one line naming them, not pydantic's
        multi-line report."""

        async def call_tool(self, name, arguments, context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if not isinstance(cause, ValidationError):
                    raise
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                    for e in cause.errors()
                )
                raise ToolError(f"Error executing tool {name}: {problems}") from cause

    server = Server(
        "vramscope", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    tools = _Tools(ToolError)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    File = Annotated[
        str,
        Field(
            description="snapshot file: a pickle (gzip/xz/bz2 compressed "
            "or not) or JSON, absolute or relative to the server's "
            "working directory"
        ),
    ]
    Device = Annotated[
        int | None,
        Field(
            description="device to answer for (default: the "
            "last OOM's, else the highest reserved peak's)"
        ),
    ]
    Limit = Annotated[
        int | str | None,
        Field(
            description="bytes the process may reserve: "
            "10000000000, '10GB' or '9.5GiB' (default: "
            "the recording's, else the GPU's total)"
        ),
    ]

    @server.tool(annotations=read_only, structured_output=False)
    def summary(
        ctx: Context,
        file: Annotated[
            str,
            Field(
                description="snapshot file, or a directory of per-rank "
                "snapshots (torchrun): one entry per rank, outliers "
                "flagged, with what each rank's memory is by category"
            ),
        ],
        device: Device = None,
        at: Annotated[
            int | None,
            Field(
                description="report the state after this trace "
                "event (0-based, of the device's events)"
            ),
        ] = None,
    ) -> str:
        """The memory figures (equal to torch.cuda.memory_stats() at the same instant), the
        OOM verdict (fragmentation or capacity), what the memory is at the peak
        (parameters, gradients, optimizer state, activations...), the top allocation
        sites and leaks: the JSON of `vramscope summary FILE --json`."""
        return tools.run(ctx, "summary", lambda report: mcp_tools.summary(file, device, at, report))

    @server.tool(annotations=read_only, structured_output=False)
    def advise(
        ctx: Context,
        file: File,
        batch: Annotated[
            int | None,
            Field(
                description="the batch size the recording ran "
                "with: the answer then names the largest batch "
                "that fits"
            ),
        ] = None,
        memory_limit: Limit = None,
        device: Device = None,
        seq: Annotated[
            int | None,
            Field(
                description="the sequence length the recording ran with: a sequence "
                "model's answer then names the longest sequence that fits in tokens"
            ),
        ] = None,
    ) -> list[str]:
        """The changes that would make the run fit (smaller batch, allocator settings,
        freeing what is kept, checkpointing, autocast, 8-bit optimizer), ranked by
        predicted peak reserved, each with its one-line change and where in the code:
        the JSON of `vramscope advise FILE --json` (then any warning)."""
        return tools.run(
            ctx,
            "advise",
            lambda report: mcp_tools.advise(file, batch, memory_limit, device, report, seq),
        )

    @server.tool(annotations=read_only, structured_output=False)
    def whatif(
        ctx: Context,
        file: File,
        settings: Annotated[
            list[str] | None,
            Field(
                description="PYTORCH_CUDA_ALLOC_CONF "
                "strings to simulate, e.g. "
                "'expandable_segments:True'; "
                "'recorded' = the snapshot's own"
            ),
        ] = None,
        recommend: Annotated[
            bool,
            Field(description="also try a standard set of settings and rank all by peak reserved"),
        ] = False,
        memory_limit: Limit = None,
        device: Device = None,
        seq_scale: Annotated[
            list[float] | None,
            Field(
                description="re-simulate with the sequence length scaled by each (2 = "
                "twice): a sequence model's allocations grow linearly or, for eager "
                "attention's scores, with the square; estimates with their range"
            ),
        ] = None,
        seq: Annotated[
            int | None, Field(description="the recorded sequence length (rows name lengths)")
        ] = None,
    ) -> list[str]:
        """The recorded run replayed through a model of PyTorch's caching allocator under
        other settings: per setting the peak reserved and allocated bytes, fragmentation,
        cudaMalloc/cudaFree counts and whether and where it would run out of memory. The
        JSON of `vramscope whatif FILE --conf S... --json` (then any warning)."""
        return tools.run(
            ctx,
            "whatif",
            lambda report: mcp_tools.whatif(
                file, settings, recommend, memory_limit, device, report, seq_scale, seq
            ),
        )

    @server.tool(annotations=read_only, structured_output=False)
    def whatif_pair(
        ctx: Context,
        file: File,
        with_file: Annotated[
            str,
            Field(
                description="a second snapshot of the same program at another batch size "
                "or sequence length"
            ),
        ],
        batch: Annotated[
            int | None, Field(description="the batch size to predict (needs sizes)")
        ] = None,
        seq: Annotated[
            int | None, Field(description="the sequence length to predict (needs sizes)")
        ] = None,
        batch_scale: Annotated[
            list[float] | None,
            Field(description="batch sizes to predict as multiples of FILE's (no sizes needed)"),
        ] = None,
        seq_scale: Annotated[
            list[float] | None,
            Field(
                description="sequence lengths to predict as multiples of FILE's (no sizes needed)"
            ),
        ] = None,
        sizes: Annotated[
            str | None,
            Field(description="'A,B': the batch (or sequence length) FILE and with_file have"),
        ] = None,
        settings: Annotated[
            list[str] | None,
            Field(description="PYTORCH_CUDA_ALLOC_CONF strings; 'recorded' = the snapshot's own"),
        ] = None,
        memory_limit: Limit = None,
        device: Device = None,
    ) -> list[str]:
        """The run at another batch size or sequence length predicted from two snapshots of
        the program at two sizes: their allocations matched, each sized affinely in the
        knob, the request stream at the asked size simulated; exact where every
        allocation matched and is affine, else an estimate with a range. The JSON of
        `vramscope whatif FILE --with B --batch N --sizes A,B --json` (then any warning)."""
        return tools.run(
            ctx,
            "whatif_pair",
            lambda report: mcp_tools.whatif_pair(
                file,
                with_file,
                batch,
                seq,
                batch_scale,
                seq_scale,
                sizes,
                settings,
                memory_limit,
                device,
                report,
            ),
        )

    @server.tool(annotations=read_only, structured_output=False)
    def diff(
        ctx: Context,
        a: Annotated[str, Field(description="the earlier (or baseline) snapshot file")],
        b: Annotated[str, Field(description="the later (or changed) snapshot file")],
        change: Annotated[
            str | None,
            Field(
                description="the change made between A and B, "
                "as advise names it (smaller_batch, free_kept, "
                "gradient_checkpointing, bf16_autocast, "
                "8bit_optimizer, set_to_none, "
                "allocator:SETTINGS): says how far advise's "
                "prediction on A was from B (default: the "
                "change the files show)"
            ),
        ] = None,
        top: Annotated[int, Field(description="stacks listed by growth and by shrink")] = 10,
    ) -> str:
        """What changed between two snapshots: the figures' differences, live bytes by
        allocation stack (added, removed, changed, sorted by growth, in `sites`), and
        iteration by iteration on one time axis with advise's `prediction_error`: the
        JSON of `vramscope diff A B --json`."""
        return tools.run(ctx, "diff", lambda report: mcp_tools.diff(a, b, change, top, report))

    @server.tool(annotations=read_only, structured_output=False)
    def stack_at(
        ctx: Context,
        file: File,
        event: Annotated[
            int | None,
            Field(
                description="trace event (0-based, of the "
                "device's events; summary's `oom.event` and "
                "`peak_*_event` are such numbers); default: the "
                "last OOM's, else the allocated peak's"
            ),
        ] = None,
        device: Device = None,
        limit: Annotated[
            int,
            Field(
                description="allocations and allocation sites listed, "
                f"largest first (1..{mcp_tools.STACK_AT_MAX})"
            ),
        ] = 20,
        all_frames: Annotated[
            bool, Field(description="also torch's own and C++ frames (default: your code's frames)")
        ] = False,
    ) -> str:
        """The allocations alive after one trace event, largest first, each with its
        call stack (your code's frames first, innermost first), the allocation sites
        holding the most bytes, and the exact figures at that moment: what vramscope's
        window shows in its table and stack panel."""
        return tools.run(
            ctx,
            "stack_at",
            lambda report: mcp_tools.stack_at(file, event, device, limit, all_frames, report),
        )

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        structured_output=False,
    )
    def live_agents(ctx: Context) -> str:
        """Running processes on this machine: those with a vramscope agent (started with
        `python -m vramscope.capture --live` or calling vramscope.capture.serve()), which
        live_snapshot can read, then every GPU process NVML sees: the JSON of
        `vramscope attach --list --json`."""
        return tools.run(ctx, "live_agents", lambda _report: mcp_tools.live_agents())

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, open_world_hint=False
        ),
        structured_output=False,
    )
    def live_snapshot(
        ctx: Context,
        pid: Annotated[
            int, Field(description="process id of a process with an agent (from live_agents)")
        ],
        path: Annotated[
            str,
            Field(
                description="file to write the snapshot to (a standard "
                "snapshot pickle, with a .json sidecar beside it); "
                "its directory must exist"
            ),
        ],
    ) -> str:
        """Save a running process's full snapshot without stopping it (as `vramscope
        attach PID --save PATH`), then return the saved file's summary (the JSON of
        `vramscope summary PATH --json`)."""
        return tools.run(
            ctx, "live_snapshot", lambda report: mcp_tools.live_snapshot(pid, path, report)
        )

    @server.resource(
        RECORDING_GUIDE_URI,
        name="record-a-snapshot",
        title="How to record a snapshot",
        mime_type="text/markdown",
        description="How to capture a CUDA memory snapshot of a PyTorch run "
        "for vramscope (the README's section)",
    )
    def recording_guide() -> str:
        return mcp_tools.recording_guide()

    return server
