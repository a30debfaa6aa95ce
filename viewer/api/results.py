"""The answers of :class:`~.recording.Recording`: typed, frozen, each the answer of one
command of the ``vramscope`` CLI.

Every result is made from what the CLI's own pipeline returns (the functions
``answer`` and ``summarize_loaded`` in :mod:`vramscope.viewer.commands`): ``to_dict()``
is the command's ``--json`` (as ``json.loads`` reads it), ``str()`` its text and, in a
notebook, ``_repr_html_`` a fragment of the HTML report (:mod:`.notebook`).  The
typed fields are read from that same JSON, never computed a second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def _plain(value: Any) -> Any:
    """``value`` as the CLI's ``--json`` reads back: plain dicts, lists, str and numbers."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class _Answer:
    """What every result keeps: the command's JSON and its text."""

    _json: Any = field(repr=False, compare=False)
    _text: str = field(repr=False, compare=False)

    def to_dict(self) -> Any:
        """The command's ``--json`` output, read back (a fresh copy each call)."""
        return _plain(self._json)

    def __str__(self) -> str:
        return self._text

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's plain-text display
        printer.text(self._text)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # IPython takes a class's own __repr__ (each dataclass has one) before an
        # inherited _repr_pretty_: each result class carries it itself.
        cls._repr_pretty_ = _Answer._repr_pretty_  # type: ignore[method-assign]


# ----------------------------------------------------------------------------- summary
@dataclass(frozen=True)
class Summary(_Answer):
    """``vramscope summary FILE [--device N] [--at EVENT]``: the figures (equal to
    ``torch.cuda.memory_stats()`` at the same instant), the peaks and, after an OOM, why."""

    file: str
    device: int | None
    reserved_bytes: int
    allocated_bytes: int
    peak_reserved_bytes: int | None
    peak_allocated_bytes: int | None
    oom_verdict: str | None  # the last OOM's verdict (up to ``at``), None: no OOM
    at: int | None  # the event the figures are after; None: the end as recorded
    _chart: str = field(default="", repr=False, compare=False)  # SVG, for notebooks

    @classmethod
    def of(cls, data: dict, text: str, chart: str = "") -> Summary:
        ooms = data.get("ooms") or []
        at = data.get("at")
        if at:  # (the OOMs up to --at, as the text says)
            ooms = [o for o in ooms if o["event_index"] <= at["trace_row"]]
        return cls(
            data,
            text,
            file=data["file"],
            device=data.get("device"),
            reserved_bytes=int(data["reserved_bytes"]),
            allocated_bytes=int(data["allocated_bytes"]),
            peak_reserved_bytes=data.get("peak_reserved_bytes"),
            peak_allocated_bytes=data.get("peak_allocated_bytes"),
            oom_verdict=ooms[-1].get("verdict") if ooms else None,
            at=at["event"] if at else None,
            _chart=chart,
        )

    def _repr_html_(self) -> str:
        from .notebook import summary_fragment

        return summary_fragment(self._json, self._chart)


@dataclass(frozen=True)
class Categories(_Answer):
    """What the memory is (parameters, gradients, optimizer state, activations, ...):
    the split at the peak and, with ``at``, after that event, with the iterations and
    leaks: the ``categories_*``, ``iterations`` and ``leaks`` fields of ``vramscope
    summary --json`` and its lines."""

    device: int | None
    at: int | None
    split: dict[str, int]  # category -> bytes, at ``at`` (else at the peak)
    leaked_bytes_at_peak: int

    KEYS = (
        "categories_device",
        "categories_at_peak",
        "categories_guessed_bytes_at_peak",
        "leaked_bytes_at_peak",
        "categories_at",
        "categories_guessed_bytes_at",
        "categories_at_device",
        "graph_held_at_peak",
        "graph_held_at",
        "iterations",
        "leaks",
        "sharding",
        "sharding_note",
    )

    @classmethod
    def of(cls, summary: dict, text: str) -> Categories:
        data = {k: summary[k] for k in cls.KEYS if k in summary}
        at = summary.get("at")
        split = data.get("categories_at") if at else data.get("categories_at_peak")
        return cls(
            data,
            text,
            device=data.get("categories_at_device") if at else data.get("categories_device"),
            at=at["event"] if at else None,
            split=dict(split or {}),
            leaked_bytes_at_peak=int(data.get("leaked_bytes_at_peak") or 0),
        )

    def _repr_html_(self) -> str:
        from .notebook import categories_fragment

        return categories_fragment(self._json, self.split, self.at)


# ----------------------------------------------------------------------------- advise
@dataclass(frozen=True)
class Remedy:
    """One change that would lower the peak (an entry of ``advise --json``'s remedies)."""

    remedy: str  # its name, as ``diff --change`` takes it
    title: str
    change: str  # the one-line change
    predicted_peak_reserved_bytes: int
    saving_bytes: int
    method: str  # "simulated" or how it was estimated
    fits: bool | None
    fits_word: str
    where: str | None  # where in the code


@dataclass(frozen=True)
class Advice(_Answer):
    """``vramscope advise FILE [--memory-limit SIZE] [--batch N]``: the remedies ranked
    by predicted peak reserved, and the largest batch that fits."""

    file: str
    device: int | None
    memory_limit_bytes: int | None
    recorded_peak_reserved_bytes: int | None
    needed_peak_reserved_bytes: int | None
    verdict: str | None
    remedies: tuple[Remedy, ...]
    largest_batch_that_fits: int | None
    largest_scale_that_fits: float | None
    warnings: tuple[str, ...]
    # A sequence model's longest sequence that fits (tokens; None: not one, or not judged).
    longest_seq_that_fits: int | None = None

    @classmethod
    def of(cls, data: dict, text: str, warnings: list[str]) -> Advice:
        rems = tuple(
            Remedy(
                remedy=r.get("remedy", ""),
                title=r.get("title", ""),
                change=r.get("change", ""),
                predicted_peak_reserved_bytes=int(r.get("predicted_peak_reserved_bytes") or 0),
                saving_bytes=int(r.get("saving_bytes") or 0),
                method=r.get("method", ""),
                fits=r.get("fits"),
                fits_word=r.get("fits_word", ""),
                where=r.get("where"),
            )
            for r in data.get("remedies") or []
        )
        return cls(
            data,
            text,
            file=data["file"],
            device=data.get("device"),
            memory_limit_bytes=data.get("memory_limit_bytes"),
            recorded_peak_reserved_bytes=data.get("recorded_peak_reserved_bytes"),
            needed_peak_reserved_bytes=data.get("needed_peak_reserved_bytes"),
            verdict=data.get("verdict"),
            remedies=rems,
            largest_batch_that_fits=data.get("largest_batch_that_fits"),
            largest_scale_that_fits=data.get("largest_scale_that_fits"),
            warnings=tuple(warnings),
            longest_seq_that_fits=(data.get("longest_seq_that_fits") or {}).get("seq"),
        )

    def _repr_html_(self) -> str:
        from .notebook import advice_fragment

        return advice_fragment(self._json)


# ----------------------------------------------------------------------------- whatif
@dataclass(frozen=True)
class WhatIfRow:
    """One simulated setting (an entry of ``whatif --json``)."""

    conf: str
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    oom: bool  # the run would still run out of memory
    batch_scale: float | None


@dataclass(frozen=True)
class WhatIf(_Answer):
    """``vramscope whatif FILE --conf SETTINGS... [--batch-scale F...]``: the recorded run
    predicted under other allocator settings (and batch sizes).  ``to_dict()`` is the
    command's JSON: a list, one object per row."""

    rows: tuple[WhatIfRow, ...]
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, data: list, text: str, warnings: list[str]) -> WhatIf:
        rows = tuple(
            WhatIfRow(
                conf=r.get("conf", ""),
                peak_reserved_bytes=int(r["peak_reserved_bytes"]),
                peak_allocated_bytes=int(r["peak_allocated_bytes"]),
                oom=r.get("oom") is not None,
                batch_scale=r.get("batch_scale"),
            )
            for r in data
        )
        return cls(data, text, rows=rows, warnings=tuple(warnings))

    def _repr_html_(self) -> str:
        from .notebook import text_fragment

        return text_fragment("What if", self._text)


# ----------------------------------------------------------------------------- diff
@dataclass(frozen=True)
class Diff(_Answer):
    """``vramscope diff A B``: what grew between two recordings, by allocation stack."""

    a: str
    b: str

    def _repr_html_(self) -> str:
        from .notebook import text_fragment

        return text_fragment(f"{self.a} → {self.b}", self._text)


# ----------------------------------------------------------------------------- ranks
@dataclass(frozen=True)
class RankSummary(_Answer):
    """``vramscope summary DIR``: one entry per rank of a directory the capture wrote
    under torchrun, outlier ranks flagged."""

    directory: str

    def _repr_html_(self) -> str:
        from .notebook import text_fragment

        return text_fragment(self.directory, self._text)


# ----------------------------------------------------------------------------- report
@dataclass(frozen=True)
class Report:
    """The HTML report of a recording (``html``: one self-contained page, no network),
    written to ``path`` when one was given."""

    html: str = field(repr=False)
    fragment: str = field(repr=False)  # the same sections, to embed in a notebook
    path: str | None = None

    def save(self, path: str) -> str:
        """Write the page to ``path``; the path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)
        return path

    def __str__(self) -> str:
        return self.html

    def _repr_html_(self) -> str:
        return self.fragment
