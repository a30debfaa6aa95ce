"""``%load_ext vramscope`` then ``%%vramscope``: record one notebook cell's CUDA memory.

The cell runs inside the capture's own recorder (:func:`vramscope.capture.record`:
the allocator's history with Python stacks, a snapshot and its JSON sidecar when the
cell ends, and at the moment of a CUDA out-of-memory error, which then propagates
unchanged).  Afterwards the report of what was recorded (the OOM's snapshot when the
cell ran out of memory) is displayed under the cell, and the recording is kept as a
variable (``--name``, default ``vramscope_recording``) and as files (``--out``, default
``snapshots/``).  Without CUDA it says so in one line and runs the cell as usual.

IPython is imported here only: ``import vramscope`` never needs it.
"""

from __future__ import annotations

import argparse
import ast
import shlex
from typing import Any

USAGE = "%%vramscope [--out DIR] [--name VARIABLE] [--max-entries N] [--no-remedies]"


def register(ipython) -> None:
    """Add the ``%%vramscope`` cell magic to ``ipython``."""
    ipython.register_magic_function(vramscope_cell, magic_kind="cell", magic_name="vramscope")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's exit
        from IPython.core.error import UsageError

        raise UsageError(f"%%vramscope: {message} (usage: {USAGE})")


def _options(line: str) -> argparse.Namespace:
    p = _Parser(prog="%%vramscope", add_help=False)
    p.add_argument("--out", default="snapshots")
    p.add_argument("--name", default="vramscope_recording")
    p.add_argument("--max-entries", type=int, default=100_000)
    p.add_argument("--no-remedies", action="store_true")
    try:
        words = shlex.split(line)
    except ValueError as exc:
        p.error(str(exc))
    opts = p.parse_args(words)
    if not opts.name.isidentifier():
        p.error(f"--name {opts.name!r} is not a Python variable name")
    if opts.max_entries <= 0:
        p.error(f"--max-entries {opts.max_entries}: a positive number of events")
    return opts


def no_cuda() -> str | None:
    """Why this kernel cannot record CUDA memory (the capture's own words, saying that
    the cell runs as usual), or None."""
    from vramscope.capture.backend import get_backend

    backend = get_backend()
    if backend is None:
        return (
            "torch cannot be imported, so CUDA memory cannot be recorded; the cell "
            "runs without recording"
        )
    problem = backend.early_problem()
    if problem is None and not backend.cuda_available():
        problem = (
            f"CUDA is not available: torch {backend.torch_version} sees no GPU; the "
            "cell runs without recording"
        )
    return problem


def run_cell(ipython, cell: str) -> Any:
    """Run ``cell`` in the notebook's namespace (IPython syntax too); the value of its
    last line when that is an expression (what a plain cell would display)."""
    code = ipython.transform_cell(cell)
    name = cell_file_name(ipython, cell, code)
    tree = ast.parse(code, name)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    namespace = ipython.user_ns
    exec(compile(tree, name, "exec"), namespace)
    if last is not None:
        return eval(compile(last, name, "eval"), namespace)
    return None


def cell_file_name(ipython, cell: str, code: str) -> str:
    """The file name the cell's frames carry, its lines in :mod:`linecache` (tracebacks
    show them).  A ``.py`` name, as the Jupyter kernel gives its cells: the recording's
    stacks then name the cell's line as the program's own code (what advise's "where"
    and the top sites point at), never this module's ``exec``."""
    import linecache

    count = getattr(ipython, "execution_count", 0)
    name = ""
    get = getattr(getattr(ipython, "compile", None), "get_code_name", None)
    if get is not None:
        try:
            name = str(get(cell, code, count))
        except Exception:  # another IPython's signature: a name of our own below
            name = ""
    if not name.endswith(".py"):
        name = f"vramscope_cell_{count}.py"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    return name


def vramscope_cell(line: str, cell: str) -> Any:
    """``%%vramscope [--out DIR] [--name VARIABLE] [--max-entries N] [--no-remedies]``:
    run the cell while recording its CUDA memory, then show the report inline."""
    from IPython import get_ipython

    ipython = get_ipython()
    opts = _options(line)
    why = no_cuda()
    if why:
        print(f"vramscope: {why}")
        return run_cell(ipython, cell)
    from vramscope.capture import record

    recorder = record(out=opts.out, max_entries=opts.max_entries, stacks="python", dump_signal=None)
    error: BaseException | None = None
    result = None
    try:
        with recorder:
            result = run_cell(ipython, cell)
    except BaseException as exc:  # re-raised below, once the report is shown
        error = exc
    show(ipython, recorder, opts)
    if error is not None:
        raise error
    return result


def show(ipython, recorder, opts: argparse.Namespace) -> None:
    """Display the report of what ``recorder`` wrote (its OOM's snapshot first) and keep
    the recording as the variable ``opts.name``."""
    from IPython.display import HTML, display

    import vramscope
    from vramscope.viewer.model.core.units import format_bytes

    path = getattr(recorder, "last_oom_path", None) or (
        recorder.paths[-1] if recorder.paths else None
    )
    if path is None:
        print("vramscope: no snapshot was written (see the capture's warning above)")
        return
    rec = vramscope.open(str(path))
    ipython.user_ns[opts.name] = rec
    summary = rec.summary()
    peak = summary.peak_reserved_bytes
    print(
        f"vramscope: {path} (the recording is `{opts.name}`)"
        + (f"; peak reserved {format_bytes(int(peak))}" if peak is not None else "")
    )
    display(HTML(rec.report(remedies=not opts.no_remedies).fragment))
