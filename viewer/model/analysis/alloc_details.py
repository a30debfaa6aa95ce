"""What newer torch recorded about an allocation, in words and positions for the views.

Qt-free: the stack panel, the timeline's tooltips and its markers only draw what
this returns.

* :func:`interval_rows`: the trace rows of one allocation of a device's timeline
  (its alloc, and its free when the trace has it);
* :func:`detail_lines`: the sections under the allocation stack: the forward-pass
  stack of an allocation made in backward (with the FX node and the model source
  of FX-generated frames), its ``_annotate_memory`` annotations, user metadata and
  compile context;
* :func:`fx_lines`: the FX node of one frame (also shown under frames of the
  allocation stack itself), :func:`hidden_fx_lines` those of frames the filter hides;
* :func:`tooltip_lines`: the short form for a tooltip;
* :func:`annotation_markers`: where the timeline draws the annotations of a device;
* :func:`integrity_stretches`: the stretches of a device's timeline that are not
  exact, and whether its left edge is the start of the run or overwritten history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.snapshot import Snapshot

# torch writes this compile context when none was set: no information, not shown.
NO_CONTEXT = ("", "N/A")
FORWARD_HEADING = "Forward pass (where this tensor was created)"
ANNOTATIONS_HEADING = "Annotations"
TOOLTIP_TEXT_CHARS = 160  # user metadata is free text: long values are cut in tooltips


@dataclass(frozen=True)
class DetailLine:
    """One line of a details section.

    ``kind``: ``"heading"``, ``"frame"`` (``frame_id`` set), ``"fx"`` (the FX node of
    the frame above), ``"source"`` (a line of the model code the FX node came from),
    ``"annotation"``, ``"metadata"`` or ``"context"``.  ``tip``: the long form.
    """

    kind: str
    text: str
    tip: str = ""
    frame_id: int = -1


@dataclass
class AllocationDetails:
    """:meth:`Snapshot.event_details` of one allocation, with the rows it came from."""

    row: int  # trace row of the alloc
    free_row: int | None  # trace row of its free (None: live at the end)
    user_metadata: str | None = None
    compile_context: str | None = None
    forward_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    annotations: list[dict] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.user_metadata
            or self.compile_context
            or len(self.forward_frames)
            or self.annotations
        )


def interval_rows(rows: np.ndarray, event: int, end: int) -> tuple[int, int | None] | None:
    """(alloc row, free row or None) in the snapshot's trace of an allocation whose alloc
    is event ``event`` and free event ``end`` of a device (``rows``:
    ``timeline.replay(device).rows``); None for one allocated before the recording."""
    n = len(rows)
    if not 0 <= event < n:
        return None
    return int(rows[event]), (int(rows[end]) if 0 <= end < n else None)


def allocation_details(
    snap: Snapshot, rows: np.ndarray, event: int, end: int
) -> AllocationDetails | None:
    """What was recorded about the allocation made at device event ``event`` and freed
    at ``end`` (see :func:`interval_rows`); None without an alloc event."""
    found = interval_rows(rows, event, end)
    if found is None or found[0] >= len(snap.trace):
        return None
    row, free_row = found
    d = snap.event_details(row, free_row)
    cc = d["compile_context"]
    return AllocationDetails(
        row=row,
        free_row=free_row,
        user_metadata=d["user_metadata"] or None,
        compile_context=None if cc in NO_CONTEXT or cc is None else cc,
        forward_frames=np.asarray(d["forward_frames"]),
        annotations=d["annotations"],
    )


def frame_text(snap: Snapshot, fid: int) -> tuple[str, str]:
    """(short, full) text of frame ``fid``, as the stack panel writes frames."""
    f = snap.frames
    filename, line, name = f.filename_of(fid), int(f.line[fid]), f.name_of(fid)
    base = filename.rsplit("/", 1)[-1] or "??"
    short = f"{base}:{line} {name}" if line else f"{base} {name}"
    return short, f'File "{filename}", line {line}, in {name}'


def fx_lines(snap: Snapshot, fid: int) -> list[DetailLine]:
    """The FX node of frame ``fid`` and the model code it came from (``[]`` for an
    ordinary frame): ``FX: node=…, op=…, target=…`` then ``fx_original_trace``'s lines."""
    fx = snap.frames.fx_of(int(fid))
    if not fx:
        return []
    parts = [
        f"{key}={fx[name]}"
        for key, name in (
            ("node", "fx_node_name"),
            ("op", "fx_node_op"),
            ("target", "fx_node_target"),
        )
        if name in fx
    ]
    out = []
    trace = fx.get("fx_original_trace", "")
    if parts:
        out.append(DetailLine("fx", "FX: " + ", ".join(parts), tip=trace.strip(), frame_id=fid))
    if trace:
        out.append(DetailLine("source", "original model code:", tip=trace.strip(), frame_id=fid))
        for line in trace.splitlines():
            if line.strip():
                out.append(DetailLine("source", line.rstrip(), tip=trace.strip(), frame_id=fid))
    return out


FX_HEADING = "FX-generated code in this stack"


def hidden_fx_lines(snap: Snapshot, stack: int, shown: set[int]) -> list[DetailLine]:
    """FX frames of ``stack`` the panel's filter hides (``shown``: the frame ids drawn):
    their FX node matters whatever file the generated code lives in, so they get a
    section of their own (``[]``: none)."""
    out: list[DetailLine] = []
    for fid in snap.stacks.frame_ids(int(stack)).tolist():
        if fid in shown or not snap.frames.fx_of(fid):
            continue
        if not out:
            out.append(
                DetailLine(
                    "heading",
                    FX_HEADING,
                    tip="Frames of FX-generated code (hidden by the frame filter) "
                    "with the graph node they run and the model code it "
                    "came from",
                )
            )
        short, full = frame_text(snap, fid)
        out.append(DetailLine("frame", short, tip=full, frame_id=int(fid)))
        out.extend(fx_lines(snap, fid))
    return out


def stack_label(snap: Snapshot, stack: int) -> str:
    """The innermost frame of ``stack`` as ``file:line name`` ("" without one)."""
    ids = snap.stacks.frame_ids(int(stack))
    return frame_text(snap, int(ids[0]))[0] if len(ids) else ""


def detail_lines(snap: Snapshot, details: AllocationDetails | None) -> list[DetailLine]:
    """The sections the stack panel shows under the allocation stack (``[]``: none)."""
    if details is None or details.empty:
        return []
    out: list[DetailLine] = []
    if len(details.forward_frames):
        out.append(
            DetailLine(
                "heading",
                FORWARD_HEADING,
                tip="torch recorded the forward-pass stack of this allocation "
                "made in backward (forward_frames): the code that created "
                "the tensor it belongs to. Innermost frame first.",
            )
        )
        for fid in details.forward_frames.tolist():
            short, full = frame_text(snap, fid)
            out.append(DetailLine("frame", short, tip=full, frame_id=int(fid)))
            out.extend(fx_lines(snap, fid))
    if details.annotations:
        out.append(
            DetailLine(
                "heading",
                ANNOTATIONS_HEADING,
                tip="torch.cuda.memory._annotate_memory / _annotate_tensor calls "
                "on this allocation while it was live, in order",
            )
        )
        for a in details.annotations:
            where = stack_label(snap, a["stack"])
            tip = a["text"] + (f"\nannotated at {where}" if where else "")
            out.append(DetailLine("annotation", a["text"], tip=tip))
    if details.user_metadata:
        out.append(
            DetailLine(
                "metadata", f"User metadata: {details.user_metadata}", tip=details.user_metadata
            )
        )
    if details.compile_context:
        out.append(
            DetailLine(
                "context",
                f"Compile context: {details.compile_context}",
                tip=details.compile_context,
            )
        )
    return out


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TOOLTIP_TEXT_CHARS else text[: TOOLTIP_TEXT_CHARS - 1] + "…"


def tooltip_lines(snap: Snapshot, details: AllocationDetails | None) -> list[str]:
    """Plain-text lines a block's or allocation's tooltip adds (``[]``: nothing recorded)."""
    if details is None or details.empty:
        return []
    out = []
    if details.user_metadata:
        out.append(f"User metadata: {_cut(details.user_metadata)}")
    if details.compile_context:
        out.append(f"Compile context: {_cut(details.compile_context)}")
    if details.annotations:
        texts = "; ".join(_cut(a["text"]) for a in details.annotations[:3])
        more = len(details.annotations) - 3
        out.append(f"Annotated: {texts}" + (f" (+{more} more)" if more > 0 else ""))
    if len(details.forward_frames):
        out.append(f"Forward pass: {frame_text(snap, int(details.forward_frames[0]))[0]}")
    return out


@dataclass
class Markers:
    """A device's annotations on its event axis: ``position[i]`` is the event index the
    i-th was recorded before (it sits between events ``position - 1`` and ``position``),
    ``text``/``tip`` what a tooltip says."""

    rows: np.ndarray  # int64 rows of Snapshot.alloc_annotations
    position: np.ndarray  # int64
    text: list[str]
    tip: list[str]

    def __len__(self) -> int:
        return len(self.rows)

    def x_events(self) -> np.ndarray:
        """Positions on the event axis: halfway between the events around each."""
        return self.position.astype(np.float64) - 0.5

    def nearest(self, x: np.ndarray | float, xs: np.ndarray, tolerance: float) -> int:
        """The marker whose x (``xs``, as drawn) is nearest to ``x`` within
        ``tolerance``; -1 if none."""
        if not len(xs):
            return -1
        d = np.abs(np.asarray(xs, np.float64) - float(x))
        i = int(np.argmin(d))
        return i if d[i] <= tolerance else -1


def annotation_markers(snap: Snapshot, device: int, rows: np.ndarray) -> Markers:
    """The annotations of ``device`` placed on its event axis (``rows``: the device's
    trace rows, ``timeline.replay(device).rows``)."""
    ann = snap.alloc_annotations
    idx, pos = ann.on_device(device, np.asarray(rows))
    texts, tips = [], []
    for i in idx.tolist():
        text = snap.string(int(ann.text[i]))
        where = stack_label(snap, int(ann.stack[i]))
        texts.append(text)
        tips.append(
            f"annotation: {text}\non 0x{int(ann.addr[i]):x}" + (f"\nat {where}" if where else "")
        )
    return Markers(rows=idx.astype(np.int64), position=pos, text=texts, tip=tips)


@dataclass(frozen=True)
class Stretch:
    """A stretch of a device's timeline to shade: events ``first..last`` (inclusive)."""

    first: int
    last: int
    kind: str  # "inconsistent" | "estimated" | "overwritten"
    text: str


OVERWRITTEN_TEXT = "earlier history overwritten"


def integrity_stretches(snap: Snapshot, untrusted: list, device: int) -> list[Stretch]:
    """What the timeline of ``device`` shades: each :class:`integrity.Untrusted` of the
    device (its ``line()`` as the text), and, when the trace ring overflowed, the left
    edge (``first == last == -1``): the history before it was overwritten."""
    out = []
    note = snap.trace_integrity_note()
    if note:
        out.append(Stretch(-1, -1, "overwritten", f"{OVERWRITTEN_TEXT}: {note}"))
    for u in untrusted:
        if u.device == device:
            out.append(Stretch(int(u.first_event), int(u.last_event), u.kind, u.line()))
    return out
