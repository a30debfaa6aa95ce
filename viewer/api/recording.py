"""``vramscope.open(path)``: a recording, and the CLI's analyses of it as methods.

Each method runs the pipeline of one ``vramscope`` command (the ``answer`` functions of
:mod:`vramscope.viewer.commands` and :func:`~vramscope.viewer.commands.summary.summarize_loaded`,
which the CLI and the MCP server render too) on the snapshot loaded once, so the
answers are the CLI's, figure for figure and word for word.  Bad arguments raise
``ValueError`` with the CLI's one-line message; a file that is not a snapshot raises
:class:`~vramscope.viewer.model.SnapshotError`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Sequence

from .results import Advice, Categories, Diff, RankSummary, Report, Summary, WhatIf


def open(path: str | os.PathLike[str]) -> Recording | Ranks:
    """Open a snapshot as the CLI does: a local file (a pickle, compressed or not, or
    JSON), an ``ssh://[user@]host[:port]/path`` address (streamed through your ssh), or
    a directory of per-rank snapshots written under torchrun (a :class:`Ranks`).

    :class:`~vramscope.viewer.model.SnapshotError` (one line) when it cannot be read."""
    from vramscope.viewer.model import SnapshotError
    from vramscope.viewer.model.io.remote import is_remote, load_any

    text = os.fspath(path)
    if not is_remote(text) and os.path.isdir(text):
        return Ranks(text)
    try:
        snap = load_any(text)
    except SnapshotError as exc:
        raise SnapshotError(f"{text}: {exc}") from None
    except MemoryError:
        raise SnapshotError(f"{text}: not enough memory to load it") from None
    return Recording(text, snap)


def _limit(value: int | str | None) -> int | None:
    """``memory_limit=`` as ``--memory-limit`` reads it: bytes, or ``"10GB"``, ``"9.5GiB"``."""
    if value is None:
        return None
    from vramscope.viewer.model.core import units

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"memory_limit: not a size: {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"the memory limit must be positive: {value}")
        return value
    if value.strip().startswith("-"):
        raise ValueError(f"the memory limit must be positive: {value!r}")
    return units.parse_bytes(value)


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{name}: not a positive whole number: {value!r}")


class Recording:
    """One snapshot, loaded once; its analyses as methods (each cached per arguments).

    ``path``: as given to :func:`open` (the ``file`` of every JSON answer);
    ``snapshot``: the model's :class:`~vramscope.viewer.model.Snapshot`."""

    def __init__(self, path: str, snapshot) -> None:
        self.path = path
        self.snapshot = snapshot
        self._summaries: dict[tuple, Any] = {}
        self._cases: dict[int | None, Any] = {}
        self._advice: dict[tuple, Any] = {}
        self._timeline = None

    def __repr__(self) -> str:
        return f"<vramscope.Recording {self.path!r}: devices {self.devices}>"

    @property
    def devices(self) -> list[int]:
        """The devices the snapshot has."""
        return list(self.snapshot.devices)

    # ------------------------------------------------------------------ summary
    def _summary_dict(self, device: int | None, at: int | None) -> dict:
        from vramscope.viewer.commands.summary import Refused, summarize_loaded

        key = (device, at)
        if key not in self._summaries:
            if at is not None and at < 0:
                raise ValueError(
                    f"at {at}: events are numbered from 0; give one of the "
                    "device's events (0 or more)"
                )
            try:
                self._summaries[key] = summarize_loaded(self.snapshot, self.path, device, at, "at")
            except Refused as exc:
                raise ValueError(str(exc)) from None
        return self._summaries[key]

    def summary(self, device: int | None = None) -> Summary:
        """``vramscope summary FILE [--device N]``: the figures at the end as recorded,
        the peaks and every OOM's verdict (``device``: default the last OOM's, else the
        one whose reserved memory peaked highest)."""
        from vramscope.viewer.model.reports.summary import format_text

        data = self._summary_dict(device, None)
        return Summary.of(data, format_text(data), self._chart(data.get("device")))

    def at(self, event: int, device: int | None = None) -> Summary:
        """``vramscope summary FILE --at EVENT``: the figures after trace event ``event``
        (0-based, of ``device``'s events)."""
        from vramscope.viewer.model.reports.summary import format_text

        data = self._summary_dict(device, event)
        return Summary.of(data, format_text(data), self._chart(data.get("device"), event))

    def categories(self, at: int | None = None, device: int | None = None) -> Categories:
        """What the memory is at the peak (and after event ``at``): the summary's
        ``categories_*``, ``iterations`` and ``leaks``."""
        from vramscope.viewer.model.reports.summary import breakdown_lines

        data = self._summary_dict(device, at)
        return Categories.of(data, "\n".join(breakdown_lines(data)))

    # ------------------------------------------------------------------ what-if
    def _case(self, device: int | None):
        """The what-if case of ``device`` (its request stream), prepared once."""
        from vramscope.viewer.model.whatif import prepare

        if device is not None and device not in self.snapshot.devices:
            known = ", ".join(map(str, self.snapshot.devices)) or "none"
            raise ValueError(
                f"{self.path}: no device {device} in this snapshot (its devices: {known})"
            )
        if device not in self._cases:
            with self._as_the_cli():
                self._cases[device] = prepare(self.snapshot, device)
        return self._cases[device]

    @contextlib.contextmanager
    def _as_the_cli(self):
        """A recording the model cannot follow: the CLI's one line, ``FILE: why``."""
        from vramscope.viewer.model import SnapshotError

        try:
            yield
        except SnapshotError as exc:
            raise SnapshotError(f"{self.path}: {exc}") from None

    def advise(
        self,
        memory_limit: int | str | None = None,
        batch: int | None = None,
        device: int | None = None,
        seq: int | None = None,
    ) -> Advice:
        """``vramscope advise FILE [--memory-limit SIZE] [--batch N] [--seq N]``: the
        changes that would make the run fit, ranked by predicted peak reserved; with
        ``batch`` (the batch size it ran with) the largest batch that fits; a sequence
        model's longest sequence that fits (in tokens with ``seq``, its recorded length)."""
        _positive("batch", batch)
        _positive("seq", seq)
        got = self._advise(device, batch, _limit(memory_limit), seq)
        return Advice.of(got.data, got.text, got.warnings)

    def _advise(
        self, device: int | None, batch: int | None, limit: int | None, seq: int | None = None
    ):
        """advise's answer (the CLI's pipeline), computed once per arguments."""
        from vramscope.viewer.commands.advise import answer

        key = (device, batch, limit, seq)
        if key not in self._advice:
            case = self._case(device)
            with self._as_the_cli():
                self._advice[key] = answer(case, self.path, batch, limit, device, None, seq)
        return self._advice[key]

    def _advice_of(self, device: int):
        """The model's advice for ``device`` (the report's remedies: advise's own)."""
        return self._advise(device, None, None).result

    def whatif(
        self,
        settings: str | Sequence[str] | None = None,
        *,
        batch_scale: float | Sequence[float] | None = None,
        batch: int | None = None,
        memory_limit: int | str | None = None,
        recommend: bool = False,
        device: int | None = None,
        seq_scale: float | Sequence[float] | None = None,
        seq: int | None = None,
    ) -> WhatIf:
        """``vramscope whatif FILE --conf SETTINGS... [--batch-scale F...] [--seq-scale
        X... --seq N]``: the run replayed through the allocator model at other
        ``PYTORCH_CUDA_ALLOC_CONF`` settings ("recorded": its own) and, with
        ``batch_scale``, other batch sizes, with ``seq_scale`` other sequence lengths."""
        from vramscope.viewer.commands.whatif import answer, settings_to_try

        confs = settings_to_try(
            [settings] if isinstance(settings, str) else list(settings or []), recommend
        )
        scales = [batch_scale] if isinstance(batch_scale, (int, float)) else list(batch_scale or [])
        for f in scales:
            if isinstance(f, bool) or not f > 0 or f != f or f == float("inf"):
                raise ValueError(f"batch_scale: not a positive number: {f!r}")
        _positive("batch", batch)
        seqs = [seq_scale] if isinstance(seq_scale, (int, float)) else list(seq_scale or [])
        for f in seqs:
            if isinstance(f, bool) or not f > 0 or f != f or f == float("inf"):
                raise ValueError(f"seq_scale: not a positive number: {f!r}")
        if seqs and scales:
            raise ValueError("seq_scale and batch_scale are asked one at a time")
        _positive("seq", seq)
        case = self._case(device)
        with self._as_the_cli():
            got = answer(
                case,
                confs,
                _limit(memory_limit),
                recommend,
                device,
                [float(f) for f in scales],
                batch,
                seq_scales=[float(f) for f in seqs],
                seq=seq,
            )
        return WhatIf.of(got.data, got.text, got.warnings)

    def whatif_pair(
        self,
        other: Recording | str | os.PathLike[str],
        *,
        batch: int | None = None,
        seq: int | None = None,
        batch_scale: float | Sequence[float] | None = None,
        seq_scale: float | Sequence[float] | None = None,
        sizes: tuple[int, int] | None = None,
        settings: str | Sequence[str] | None = None,
        memory_limit: int | str | None = None,
        device: int | None = None,
    ) -> WhatIf:
        """``vramscope whatif FILE --with OTHER --batch N --sizes A,B`` (or ``seq``,
        ``batch_scale``, ``seq_scale`` relative to this recording): the run at another
        batch size or sequence length predicted from this recording and ``other``, the
        same program recorded at another size (``sizes``: this one's and ``other``'s)."""
        from vramscope.viewer.commands.whatif import settings_to_try
        from vramscope.viewer.commands.whatif_pair import (
            API_NAMES,
            error_words,
            pair_answer,
            question,
        )
        from vramscope.viewer.model.remedies.two_recordings import PairError

        if not isinstance(other, Recording):
            opened = open(other)
            if not isinstance(opened, Recording):
                raise ValueError(f"{other}: a directory; whatif_pair takes a snapshot file")
            other = opened
        _positive("batch", batch)
        _positive("seq", seq)
        scales = {}
        for name, given in (("batch_scale", batch_scale), ("seq_scale", seq_scale)):
            got = [given] if isinstance(given, (int, float)) else list(given or [])
            for f in got:
                if isinstance(f, bool) or not f > 0 or f != f or f == float("inf"):
                    raise ValueError(f"{name}: not a positive number: {f!r}")
            scales[name] = [float(f) for f in got]
        if sizes is not None:
            if len(sizes) != 2:
                raise ValueError(f"sizes: this recording's and the other's, not {sizes!r}")
            for s in sizes:
                _positive("sizes", s)
            if sizes[0] == sizes[1]:
                raise ValueError(f"sizes: the two recordings must differ in size: {sizes!r}")
        knob, targets, relative = question(
            batch, scales["batch_scale"], seq, scales["seq_scale"], sizes, API_NAMES
        )
        confs = settings_to_try(
            [settings] if isinstance(settings, str) else list(settings or []), False
        )
        a, b = self._case(device), other._case(device)
        with self._as_the_cli():
            try:
                got = pair_answer(a, b, knob, targets, relative, sizes, confs, _limit(memory_limit))
            except PairError as exc:
                raise PairError(error_words(exc, API_NAMES), exc.needs) from None
        return WhatIf.of(got.data, got.text, got.warnings)

    def diff(
        self,
        other: Recording | str | os.PathLike[str],
        *,
        change: str | None = None,
        top: int = 10,
        by: str = "stack",
        all_frames: bool = False,
        peaks: bool = True,
    ) -> Diff:
        """``vramscope diff THIS OTHER``: what grew from this recording (before) to
        ``other`` (after), by allocation stack; the peaks' deltas and, for a change
        advise names (``change``), how far advise's prediction was."""
        from vramscope.viewer.commands.diff import answer

        if not isinstance(other, Recording):
            opened = open(other)
            if not isinstance(opened, Recording):
                raise ValueError(f"{other}: a directory; diff compares two snapshot files")
            other = opened
        if top < 0:
            raise ValueError("top must be at least 0")
        if by not in ("stack", "line", "function"):
            raise ValueError(f"by: one of stack, line, function, not {by!r}")
        got = answer(
            self.snapshot,
            other.snapshot,
            change=change,
            top=top,
            by=by,
            all_frames=all_frames,
            peaks=peaks,
        )
        return Diff(got.data, got.text, a=self.path, b=other.path)

    # ------------------------------------------------------------------ report
    def _timeline_of(self):
        if self._timeline is None:
            from vramscope.viewer.model.replay.timeline import build_timeline

            self._timeline = build_timeline(self.snapshot, keyframes=False)
        return self._timeline

    def _chart(self, device: int | None, at: int | None = None) -> str:
        """The memory-over-time chart of ``device`` (SVG), the peak and OOMs marked."""
        from .notebook import timeline_svg

        if device is None or not len(self.snapshot.trace):
            return ""
        return timeline_svg(self.snapshot, self._timeline_of(), device, at)

    def report(
        self, path: str | os.PathLike[str] | None = None, *, remedies: bool = True
    ) -> Report:
        """The HTML report (one self-contained page: per device the figures, the OOM
        verdict, the memory over time, what the memory is, the remedies and the top
        allocation sites), written to ``path`` when given.  Without Qt: the charts are
        drawn as SVG; ``vramscope report`` adds pictures of the desktop app's views."""
        from .notebook import build_report, report_parts

        parts = report_parts(self, remedies)
        page, fragment = build_report(parts)
        out = None
        if path is not None:
            out = os.fspath(path)
            with _write(out) as f:  # (this module's open() is the API's)
                f.write(page)
        return Report(page, fragment, out)

    def _repr_html_(self) -> str:
        return self.report()._repr_html_()


def _write(path: str):
    import builtins

    return builtins.open(path, "w", encoding="utf-8")


class Ranks:
    """A directory of per-rank snapshots (the capture under torchrun)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._overview = None

    def __repr__(self) -> str:
        return f"<vramscope.Ranks {self.directory!r}>"

    def _load(self):
        if self._overview is None:
            from vramscope.viewer.model import SnapshotError
            from vramscope.viewer.model.reports import ranks

            try:
                self._overview = ranks.load_ranks(self.directory)
            except SnapshotError as exc:
                raise SnapshotError(f"{self.directory}: {exc}") from None
        return self._overview

    def summary(self) -> RankSummary:
        """``vramscope summary DIR``: one entry per rank, outliers flagged."""
        from vramscope.viewer.model.reports import ranks

        overview = self._load()
        return RankSummary(
            overview.to_dict(), ranks.format_text(overview), directory=self.directory
        )

    @property
    def ranks(self) -> list[int]:
        """The ranks the directory has."""
        return [e.rank for e in self._load().ranks]

    def rank(self, rank: int) -> Recording:
        """Rank ``rank``'s preferred file (the one its figures come from), opened."""
        entry = self._load().entry(rank)
        if entry is None:
            raise ValueError(
                f"{self.directory}: no rank {rank} (its ranks: "
                f"{', '.join(map(str, self.ranks)) or 'none'})"
            )
        got = open(entry.file.path)
        assert isinstance(got, Recording)
        return got

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()
