"""The curves' summary for views; lives with the curves in :mod:`.replay.curves`
(kept here so ``from vramscope.viewer.model.curve_index import CurveIndex`` works)."""

from .replay.curves import BLOCK, COARSE, CurveColumn, CurveIndex

__all__ = ["BLOCK", "COARSE", "CurveColumn", "CurveIndex"]
