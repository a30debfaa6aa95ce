"""One remedy: the change to make and what it is predicted to do.

:class:`Remedy` is what every spec of the catalogue (:mod:`.catalogue`) builds and what
every view shows (the CLI's table, the Diagnosis panel, the HTML report, MCP); its
``method`` says how its peak was predicted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..whatif import Case

SIMULATED, ESTIMATED = "simulated", "estimated"
# A remedy that changes what else holds the GPU, not the program: its peak is the
# program's own, unchanged; it fits because the memory the allocator can have rises.
GPU_FREED = "the limit rises"


@dataclass
class Remedy:
    """One change and what it is predicted to do."""

    remedy: str  # id: smaller_batch, allocator:..., free_kept, gradient_checkpointing, ...
    title: str
    predicted_peak_reserved_bytes: int
    saving_bytes: int
    method: str  # simulated | estimated
    change: str  # the one-line change to make
    where: str | None  # file:line of the code to change, when one exists
    fits: bool | None  # under the limit (None: no limit known)
    detail: str = ""
    # simulated reserved after each request
    curve: np.ndarray | None = field(default=None, repr=False)
    curve_x: np.ndarray | None = field(default=None, repr=False)  # trace event of each curve point
    acts_on: np.ndarray | None = field(default=None, repr=False)  # bool per request it changes
    # (low, high) of the predicted peak when it is an estimate with a range: a batch
    # prediction that hangs on library workspaces (cuDNN-like) whose size at another
    # batch is not in the recording, a simulated change that also alters what the
    # recording cannot show (another optimizer's temporaries), or an estimated remedy
    # (every one has a range, but where its ends are one value).  None: exact.
    predicted_peak_reserved_range: tuple[int, int] | None = None

    # A smaller-batch remedy's batch (None: the recorded batch is not known) and its
    # fraction of the recorded batch; None for every other remedy.
    batch: int | None = None
    batch_scale: float | None = None
    # A batch prediction the one rule (:func:`.batch_scale.is_estimate`) calls an estimate,
    # with or without a range.
    batch_estimate: bool = False
    # The limit lies inside the predicted range: whether it fits depends on where in the
    # range the real run lands ("maybe" where ``fits`` is said).
    range_holds_limit: bool = False
    # A remedy that frees the GPU (method GPU_FREED): the memory the allocator could have
    # had with the change made (None: not known, or another kind of remedy).
    limit_with_change_bytes: int | None = None

    @property
    def fits_word(self) -> str:
        """ "yes", "no", "maybe" (the limit inside the range) or "-" (no limit known)."""
        if self.fits is None:
            return "-"
        if self.range_holds_limit:
            return "maybe"
        return "yes" if self.fits else "no"

    @property
    def is_estimate(self) -> bool:
        """The predicted peak is an estimate (estimated method, a range, or a batch
        prediction that :func:`.batch_scale.is_estimate` calls one)."""
        return (
            self.method == ESTIMATED
            or self.predicted_peak_reserved_range is not None
            or self.batch_estimate
        )

    def acts_on_events(self, case: Case) -> np.ndarray:
        """Trace event indices (of the case's device) of the allocations this remedy changes."""
        if self.acts_on is None:
            return np.zeros(0, np.int64)
        return case.requests.event[self.acts_on]

    def to_dict(self) -> dict:
        """The remedy as ``advise --json`` writes it (no curves; its range as a list, and
        whether it is an estimate and the fit word, as every view says them)."""
        d = asdict(self)
        d.pop("curve")
        d.pop("curve_x")
        d.pop("acts_on")
        d.pop("batch_estimate")
        rng = self.predicted_peak_reserved_range
        d["predicted_peak_reserved_range"] = list(rng) if rng is not None else None
        d["predicted_peak_is_estimate"] = self.is_estimate
        d["fits_word"] = self.fits_word  # the one decision every view shows
        return d
