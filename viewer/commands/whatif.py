"""``vramscope whatif FILE --conf SETTINGS [...]``: predict a recorded run under other
allocator settings.

Replays the snapshot's trace through a model of the caching allocator
(:mod:`vramscope.viewer.model.whatif`) at each ``--conf`` and prints, per
setting, peak reserved and allocated bytes, fragmentation at the peak,
cudaMalloc/cudaFree counts and whether and where an OOM would happen.
Before predicting, the model replays the recorded settings and must
reproduce the recording; if it does not, the first differing event is
printed as a warning.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ..model import SnapshotError
from ..model.core import units
from ..model.core.allocator_rules import ConfError, parse_conf
from ..model.core.errors import LoadCancelled
from ..model.core.progress import Progress, stage_words
from ..model.io.remote import load_any
from .answers import Answer, print_answer
from .arg_types import add_device_option, positive_int
from .device_choice import device_fields, device_line
from .tty_progress import TerminalProgress

# Run as the process (cli.main): it ends right after the answer, without freeing the
# case's columns and the simulations' curves one by one (~0.1 s on a 10M-event file).
EXIT_WITHOUT_TEARDOWN = True


def parse_bytes(text: str) -> int:
    """``10000000000``, ``10e9``, ``10GB``, ``9.5GiB`` -> bytes (argparse type over the one
    parser the GUI uses too, :func:`..model.core.units.parse_bytes`); a negative size is
    refused as such, not as an unreadable one."""
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"the memory limit must be positive: {text!r}")
    try:
        return units.parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: Options whose value may start with "-" (a negative size or scale, to be refused by its
#: own parser with a clear message): argparse would take "-1GB" for an option and answer
#: "expected one argument".
VALUE_OPTIONS = ("--memory-limit", "--batch-scale", "--batch", "--seq-scale", "--seq")


def glue_values(argv: list[str], options=VALUE_OPTIONS) -> list[str]:
    """``argv`` with ``--memory-limit -1GB`` written ``--memory-limit=-1GB`` (for each of
    ``options``), so the value reaches its parser whatever it starts with."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if (
            arg in options
            and i + 1 < len(argv)
            and argv[i + 1].startswith("-")
            and argv[i + 1] not in ("-h", "--help")
            and not argv[i + 1].startswith("--")
        ):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope whatif",
        description="Predict peak memory, fragmentation and OOMs of a recorded run under other "
        "PYTORCH_CUDA_ALLOC_CONF settings, by replaying its trace through a model of "
        "PyTorch's caching allocator.",
        epilog='example: vramscope whatif snap.pickle --conf "expandable_segments:True" '
        '--conf "max_split_size_mb:64" --memory-limit 10GB',
    )
    p.add_argument("file", help="snapshot with a trace (recorded with _record_memory_history)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="SETTINGS",
        help="a PYTORCH_CUDA_ALLOC_CONF string, parsed like the allocator does "
        "(from the defaults); 'recorded' = the snapshot's settings; repeatable",
    )
    p.add_argument(
        "--memory-limit",
        type=parse_bytes,
        metavar="BYTES",
        help="bytes the process may reserve (like set_per_process_memory_fraction); "
        "default: the recording's, from the sidecar or inferred from the trace",
    )
    p.add_argument(
        "--recommend",
        action="store_true",
        help="also try a standard set of settings and rank all by peak reserved",
    )
    p.add_argument(
        "--batch-scale",
        type=_positive_float,
        action="append",
        default=[],
        metavar="F",
        help="re-simulate with the batch scaled by F (0.5 = half): "
        "allocations judged to grow with the batch are scaled, the rest kept; "
        "repeatable; each is combined with every --conf",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        metavar="N",
        help="the recorded batch size (optional): scaled sizes are exact per-sample "
        "multiples, and the answer says how much it hangs on the allocations that "
        "are not per-sample (cuDNN workspaces)",
    )
    p.add_argument(
        "--seq-scale",
        type=_positive_float,
        action="append",
        default=[],
        metavar="X",
        help="re-simulate with the sequence length scaled by X (2 = twice): allocations "
        "judged to grow with it are scaled, eager attention's scores by X squared; "
        "always an estimate with its range; repeatable; each is combined with every --conf",
    )
    p.add_argument(
        "--seq",
        type=positive_int,
        metavar="N",
        help="the recorded sequence length (optional): rows name the lengths",
    )
    p.add_argument(
        "--with",
        dest="with_file",
        metavar="B",
        help="a second recording of the program at another batch or sequence length: "
        "then --batch N / --seq N is the size to predict (with --sizes), --batch-scale F / "
        "--seq-scale F relative to FILE, from how each allocation changed between the two",
    )
    p.add_argument(
        "--sizes",
        metavar="A,B",
        help="with --with: the batch (or sequence length) FILE and B were recorded at",
    )
    add_device_option(p, "simulate")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per setting")
    p.add_argument("--no-cache", action="store_true", help="parse the file even if cached")
    return p


def load_case(args: argparse.Namespace, tp: TerminalProgress):
    """Load ``args.file`` and prepare ``args.device``'s request stream for simulation
    (``whatif`` and ``advise``): from the prepared-case cache
    (:mod:`..model.whatif.case_cache`) when it has the file's, else prepared here and
    stored when the command is done (:func:`store_prepared`); an unreadable file: one
    line on stderr and the exit code to return instead of the case."""
    from ..model.whatif import case_cache, prepare

    use_cache = not args.no_cache and os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0")

    def load():
        snap = load_any(args.file, tp.stage("loading"), use_cache=use_cache)
        k = case_cache.key(args.file, snap, args.device) if use_cache else None
        if k is not None:
            case = case_cache.load(k, snap)
            if case is not None:
                return case
        case = prepare(snap, args.device, tp.stage("replaying the trace"))
        if k is not None:
            _TO_STORE.append((k, case))
        return case

    return reported(args, tp, load)


#: Prepared cases to store in the case cache once the command's answer is out.
_TO_STORE: list[tuple[str, Any]] = []


def store_prepared() -> None:
    """Store the cases this command prepared (:func:`load_case`) in the case cache, in a
    detached child (:func:`.background.detached`): the command returns at once."""
    from ..model.whatif import case_cache
    from .background import detached

    todo = list(_TO_STORE)
    _TO_STORE.clear()

    def store() -> None:
        for k, case in todo:
            case_cache.store(k, case)

    if todo:
        detached(store)


def case_command(
    command: str,
    args: argparse.Namespace,
    argv: list[str],
    compute: Callable[[Any, TerminalProgress], Answer],
    recorded_first: bool = True,
) -> int:
    """Run ``vramscope COMMAND`` on a what-if case (``whatif``, ``advise``): where the
    file is when it is ``ssh://`` and vramscope is there, else load ``args.file``'s case,
    simulate its recorded run (the self-check; ``recorded_first=False``: ``compute``
    does, beside its own work), ``compute(case, tp)`` its answer and print it; an
    unreadable file or a recording the model cannot follow: one line on stderr, no
    traceback.  Returns the exit code."""
    if args.file.startswith("ssh://"):
        from .remote_run import answered_there

        code = answered_there(command, args, argv)
        if code is not None:
            return code
    # On a terminal, a progress line on stderr (dozens of simulations); piped: none.
    with TerminalProgress(f"vramscope {command}") as tp:
        case = load_case(args, tp)
        if isinstance(case, int):
            return case

        def run() -> Answer:
            if recorded_first:
                # The recorded run (computed once, cached in the case) for the self-check.
                case.simulate("recorded", progress=tp.stage(stage_words("self_check")))
            return compute(case, tp)

        got = reported(args, tp, run)
        if isinstance(got, int):
            return got
    code = print_answer(got, args.json)
    store_prepared()
    return code


def reported(args: argparse.Namespace, tp: TerminalProgress, work):
    """``work()``'s result; a file the model cannot read or follow: one line on stderr and
    the exit code to return instead (2; 1 when cancelled)."""
    try:
        return work()
    except SnapshotError as exc:
        tp.clear()
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        tp.clear()
        print(f"vramscope: error: {args.file}: not enough memory to load it", file=sys.stderr)
        return 2
    except LoadCancelled:  # pragma: no cover - no one cancels on the command line
        return 1


def predict_all(case, confs: list[str], limit: int | None = None, progress: Progress | None = None):
    """:func:`~..model.whatif.predict` with the settings simulated side by side, on every
    core (:func:`~..model.core.parallel.pmap`; serially for a small case): the same
    predictions, in the order given."""
    from ..model.core import parallel
    from ..model.whatif import Prediction

    cfgs = [case.config_of(conf) for conf in confs]
    results = parallel.pmap(
        lambda cfg, sub: case.simulate(cfg, limit, sub),
        cfgs,
        work=_work(case),
        progress=progress,
        stage="simulate",
        with_progress=True,
    )
    lim = case.limit if limit is None else limit
    return [Prediction(conf, cfg, lim, r) for conf, cfg, r in zip(confs, cfgs, results)]


def _work(case) -> int:
    """One simulation of ``case``, in :func:`~..model.core.parallel.pmap`'s units."""
    from ..model.core import parallel
    from ..model.whatif import native_sim

    return parallel.simulation_work(len(case.requests), native_sim.use_native())


class BadConf(ValueError):
    """A setting the allocator would refuse: ``conf`` and its :class:`ConfError`."""

    def __init__(self, conf: str, error: ConfError) -> None:
        super().__init__(f"{conf!r}: {error}")
        self.conf, self.error = conf, error


def settings_to_try(given: list[str], recommend: bool) -> list[str]:
    """The settings to simulate (``whatif`` and the MCP tool ``whatif``): those ``given``
    ("recorded": the snapshot's own), then with ``recommend`` the standard set's others;
    the recorded settings alone when that is none.  :class:`BadConf` for the first
    given that the allocator would refuse."""
    from ..model.whatif import RECOMMENDED

    confs = list(given)
    for conf in confs:
        if conf == "recorded":
            continue
        try:
            parse_conf(conf)
        except ConfError as exc:
            raise BadConf(conf, exc) from None
    if recommend:
        confs += [c for c in RECOMMENDED if c not in confs]
    if not confs:
        confs = ["recorded"]
    return confs


def main(argv: list[str]) -> int:
    argv = glue_values(argv)
    args = parser().parse_args(argv)
    try:
        confs = settings_to_try(args.conf, args.recommend)
    except BadConf as exc:
        print(f"vramscope: error: --conf {exc.conf!r}: {exc.error}", file=sys.stderr)
        return 2
    if args.with_file or args.sizes:
        from . import whatif_pair

        code = whatif_pair.run(args, confs, load_case, reported)
        store_prepared()
        return code
    if args.seq_scale and args.batch_scale:
        print(
            "vramscope: error: --seq-scale and --batch-scale are asked one at a time",
            file=sys.stderr,
        )
        return 2
    return case_command(
        "whatif",
        args,
        argv,
        lambda case, tp: answer(
            case,
            confs,
            args.memory_limit,
            args.recommend,
            args.device,
            args.batch_scale,
            args.batch,
            tp,
            seq_scales=args.seq_scale,
            seq=args.seq,
        ),
        # The settings' rows simulate the recorded run beside theirs (answer()).
        recorded_first=bool(args.seq_scale or args.batch_scale),
    )


def answer(
    case,
    confs: list[str],
    limit: int | None = None,
    recommend: bool = False,
    device: int | None = None,
    batch_scales: list[float] | None = None,
    batch: int | None = None,
    tp: TerminalProgress | None = None,
    progress: Progress | None = None,
    seq_scales: list[float] | None = None,
    seq: int | None = None,
) -> Answer:
    """The predictions for a prepared ``case`` at the settings ``confs``
    (:func:`settings_to_try`), each at every scale of ``batch_scales`` when given
    (``--batch-scale``); ``device`` as the caller named it; progress on the command's
    terminal (``tp``) or through ``progress``.  The one pipeline the CLI,
    the MCP tool ``whatif`` and ``Recording.whatif()`` render.
    :class:`~..model.SnapshotError` for a recording the model cannot follow."""
    from ..model.whatif.predictions import format_text, rank

    preds: list | None = None
    plain = not seq_scales and not batch_scales
    # A cached case knows what the self-check reads of the recorded run: the settings'
    # rows need no simulation of it then.
    known = plain and case.recorded_known is not None
    if plain and not known and _beside(case, confs, limit):
        # The self-check's run and the settings' at once (two cores, no copies).
        preds = case.recorded_beside(
            lambda: _predict(case, confs, limit, tp, progress),
            Progress(None, progress.cancel_event) if progress is not None else None,
        )
    if not known:  # (cached in the case: the self-check's run)
        case.simulate("recorded", progress=_self_check_progress(tp))
    check = case.self_check()
    warnings = check.warnings()
    if seq_scales:
        from .whatif_seq import seq_rows

        data, text = seq_rows(case, confs, list(seq_scales), seq, limit, recommend, device, tp)
        return Answer(data, text, warnings)
    if batch_scales:
        from .whatif_batch import batch_rows

        data, text = batch_rows(
            case, confs, list(batch_scales), batch, limit, recommend, device, tp
        )
        return Answer(data, text, warnings)
    if preds is None:
        preds = _predict(case, confs, limit, tp, progress)
    if recommend:
        preds = rank(preds)
    given = SimpleNamespace(device=device)
    fields = device_fields(case, given)
    line = device_line(case, given)
    text = (line + "\n" if line else "") + format_text(case, preds, ranked=recommend, limit=limit)
    return Answer([{**p.to_dict(case), **fields} for p in preds], text, warnings)


def _predict(case, confs: list[str], limit, tp: TerminalProgress | None, progress):
    """:func:`predict_all` with the terminal's progress line or ``progress``."""
    return predict_all(
        case, confs, limit, _per_setting(tp, case, confs) if tp is not None else progress
    )


def _beside(case, confs: list[str], limit: int | None) -> bool:
    """Whether the settings' simulations may run beside the recorded one
    (:meth:`~..model.whatif.Case.recorded_beside`): they run in this process (a pool
    forks, which a running thread forbids) and none of them is the recorded run itself
    (that one is simulated once, cached in the case)."""
    from ..model.core import parallel

    lim = case.limit if limit is None else limit
    if lim == case.limit and any(case.config_of(c) == case.recorded for c in confs):
        return False
    return parallel.workers_for(len(confs), _work(case)) <= 1


def _self_check_progress(tp: TerminalProgress | None) -> Progress | None:
    """The recorded run's progress line, shown only while it is still to simulate."""
    return None if tp is None else _LazyStage(tp, stage_words("self_check"))


class _LazyStage(Progress):
    """``tp.stage(label)`` drawn at its first update: a run already cached draws nothing."""

    def __init__(self, tp: TerminalProgress, label: str) -> None:
        super().__init__()
        self.tp, self.label = tp, label

    def update(self, stage: str, fraction: float) -> None:
        super().update(stage, fraction)
        self.tp.show(self.label, fraction)


def _per_setting(tp: TerminalProgress, case, confs: list[str]) -> Progress | None:
    """predict_all()'s progress, shown as "simulating 3/9: max_split_size_mb:64  41%"
    (one after the other) or "simulating 9 settings on 2 processes  41%"."""
    if not tp.enabled:
        return None
    from ..model.core import parallel

    n = len(confs)
    workers = parallel.workers_for(n, _work(case))
    if workers > 1:
        what = (
            f"simulating {units.plural(n, 'setting')} on "
            f"{units.plural(workers, 'process', 'processes')}"
        )
        tp.show(what, 0.0, force=True)
        return Progress(lambda _stage, f: tp.show(what, f))

    def show(_stage: str, f: float) -> None:
        j = min(int(f * n), n - 1)
        tp.show(f"simulating {j + 1}/{n}: {confs[j] or '(defaults)'}", f)

    tp.show(f"simulating 1/{n}: {confs[0] or '(defaults)'}", 0.0, force=True)
    return Progress(show)
