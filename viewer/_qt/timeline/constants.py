"""The timeline's constants (x modes, colours, action names) and small helpers."""

from __future__ import annotations

from ...model.core.snapshot import Action
from ..widgets import theme

X_TIME = "time"
X_EVENTS = "events"
CURVES = ("reserved", "active", "allocated", "requested")
CURVE_COLORS = {
    "reserved": "#37474f",
    "active": "#8e24aa",
    "allocated": "#0d47a1",
    "requested": "#2e7d32",
}
CURVE_COLORS_DARK = {
    "reserved": "#eceff1",
    "active": "#e1bee7",
    "allocated": "#82b1ff",
    "requested": "#b9f6ca",
}
# Bands: soft colours so the curves stay readable; one per code site.
BAND_COLORS = (
    "#90caf9",
    "#a5d6a7",
    "#ffcc80",
    "#ce93d8",
    "#80deea",
    "#e6ee9c",
    "#bcaaa4",
    "#aed581",
    "#9fa8da",
    "#c5e1a5",
    "#ffe082",
    "#80cbc4",
    "#b39ddb",
    "#4fc3f7",
    "#81d4fa",
    "#dce775",
)
SUMMARY_COLOR = "#bdbdbd"
DIM_COLOR = "#e0e0e0"
HIGHLIGHT_PEN = "#ff6f00"
ANNOTATION_COLORS = ("#7e57c2", "#26a69a", "#ef6c00", "#5c6bc0", "#8d6e63")
ACTION_TEXT = {
    Action.ALLOC: "alloc",
    Action.FREE_REQUESTED: "free requested",
    Action.FREE_COMPLETED: "free completed",
    Action.SEGMENT_ALLOC: "segment alloc (cudaMalloc)",
    Action.SEGMENT_FREE: "segment free (cudaFree)",
    Action.SEGMENT_MAP: "segment map",
    Action.SEGMENT_UNMAP: "segment unmap",
    Action.OOM: "OOM",
    Action.SNAPSHOT: "snapshot",
}
DEBOUNCE_MS = 30
STACK_PX = 2  # pixels per column of the stacked allocations (curves: one point per pixel)


def curve_colors() -> dict[str, str]:
    return CURVE_COLORS_DARK if theme.is_dark() else CURVE_COLORS


def format_seconds(s: float) -> str:
    """+12.3 s, +45.6 ms, +789 µs."""
    a = abs(s)
    if a >= 60:
        return f"{s / 60:.1f} min"
    if a >= 1:
        return f"{s:.2f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"
