"""Whether what the window shows at its moment is exact, and if not, why.

:func:`integrity.check` finds the stretches of a timeline that are not exact; the
timeline draws them hatched.  The header's figures and the OOM banner are of one moment
(the cursor of :class:`~.view_state.ViewState`): here is decided whether that moment lies
in such a stretch, as plain data (:class:`Mark`) the Qt views only draw.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..replay.integrity import Untrusted, check, untrusted_at

NOT_EXACT_SIGN = "\u2248"  # ≈, before each figure that is not exact


@dataclass(frozen=True)
class Mark:
    """A label for something shown that is not exact."""

    text: str  # short, for a tag beside the figures or a banner's suffix
    tip: str  # the whole reason, for a tooltip


def untrusted_of(doc) -> list[Untrusted]:
    """integrity.check of ``doc``'s timeline, once per (root) document; [] without one.
    A check that cannot run is named as a warning of the snapshot, never a crash."""
    root = doc.root
    hit = root._cache.get("untrusted")
    if hit is None:
        try:
            hit = check(root.timeline) if root.timeline is not None else []
        except (ValueError, KeyError, IndexError) as exc:
            root.snap.warnings.append(f"integrity check skipped: {exc}")
            hit = []
        root._cache["untrusted"] = hit
    return hit


def figures_mark(vs) -> Mark | None:
    """The header's figures at ``vs``'s moment: None when exact, else why not.

    The figures are replayed at the cursor's event; they are exact outside every
    untrusted stretch, and at the trace's last event, where the window shows the
    snapshot as recorded (its own segments, not a replay)."""
    doc, view, dev = vs.doc, vs.view_doc, vs.cursor_device
    if doc is None or view is None or dev is None or vs.host_shown or view is doc.root:
        return None
    u = untrusted_at(untrusted_of(doc), dev, vs.cursor_k)
    if u is None:
        return None
    what = "estimated" if u.kind == "estimated" else "not exact"
    return Mark(
        f"{NOT_EXACT_SIGN} {what} at this moment",
        f"The figures after event {vs.cursor_k:,} of device {dev} are {what}: "
        f"{u.reason}.\n({u.line()})",
    )


def oom_mark(oom) -> Mark | None:
    """An OOM report's verdict: None when exact, else the banner's suffix and tooltip."""
    if oom is None or getattr(oom, "exact", True):
        return None
    reason = oom.not_exact_reason or "the recording is not exact here"
    return Mark(
        f"not exact: {reason}",
        f"This verdict is not exact: the layout at the OOM is replayed from a "
        f"stretch of the trace that is not exact ({reason}).",
    )
