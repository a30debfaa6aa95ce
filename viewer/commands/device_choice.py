"""Which device a command answered for, as its JSON fields and its text line (``whatif``,
``advise``, ``whatif --batch-scale``): the rule itself is :mod:`..model.analysis.focus`."""

from __future__ import annotations

from typing import Any


def device_fields(case, args: Any) -> dict:
    """``device`` and ``device_chosen_by`` ("given", "only", "last_oom", "highest_peak")
    of a loaded case (``args.device``: the device as the caller named it, None when
    chosen): what every JSON answer carries."""
    from ..model.analysis import focus

    return {
        "device": case.device,
        "device_chosen_by": focus.chosen_by(case.snap, case.device, args.device is not None),
    }


def device_line(case, args: Any) -> str | None:
    """ "answering for device 1 (the last OOM's)" where the snapshot has several devices
    (one device: the report's own "device 0:" says it)."""
    from ..model.analysis import focus

    if len(focus.devices_of(case.snap)) < 2:
        return None
    return "answering for " + focus.device_phrase(case.snap, case.device, args.device is None)
