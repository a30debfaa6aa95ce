"""vramscope from Python: open a PyTorch CUDA memory snapshot and ask why it ran out.

::

    import vramscope

    rec = vramscope.open("oom.pickle")   # a file, ssh://host/path, or a directory of ranks
    print(rec.summary())                 # what `vramscope summary oom.pickle` prints
    rec.advise(batch=16).to_dict()       # `vramscope advise oom.pickle --batch 16 --json`

    with vramscope.record(out="snapshots/"):   # the capture side (needs torch)
        train()

In Jupyter, a recording or a result displays as the HTML report's sections; ``%load_ext
vramscope`` adds the ``%%vramscope`` cell magic, which records the cell's CUDA memory.

Importing this package imports nothing else: each name is imported on first use, so
``import vramscope`` stays cheap (no numpy, no Qt, no torch).  The code lives in the
repository's ``viewer/api/`` folder (:mod:`.recording`: ``open`` and the recordings;
:mod:`.results`: their typed answers; :mod:`.notebook`: the HTML sections Jupyter shows;
:mod:`.magic`: the cell magic); :mod:`vramscope.viewer` and :mod:`vramscope.capture`
are the viewer and the capture side.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING's value, without importing typing (~5 ms) on every start of any
# command: this package is imported first.
TYPE_CHECKING = False

# name -> module that defines it (absolute: this package's own or the capture side's)
_EXPORTS = {
    "open": "vramscope.recording",
    "Recording": "vramscope.recording",
    "Ranks": "vramscope.recording",
    "Summary": "vramscope.results",
    "Categories": "vramscope.results",
    "Advice": "vramscope.results",
    "Remedy": "vramscope.results",
    "WhatIf": "vramscope.results",
    "WhatIfRow": "vramscope.results",
    "Diff": "vramscope.results",
    "RankSummary": "vramscope.results",
    "Report": "vramscope.results",
    "SnapshotError": "vramscope.viewer.model",
    # The capture side, in the training process (imports torch on first use, not here).
    "record": "vramscope.capture",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from typing import Any

    from vramscope.capture import record as record
    from vramscope.viewer.model import SnapshotError as SnapshotError

    from .recording import Ranks as Ranks
    from .recording import Recording as Recording
    from .recording import open as open
    from .results import Advice as Advice
    from .results import Categories as Categories
    from .results import Diff as Diff
    from .results import RankSummary as RankSummary
    from .results import Remedy as Remedy
    from .results import Report as Report
    from .results import Summary as Summary
    from .results import WhatIf as WhatIf
    from .results import WhatIfRow as WhatIfRow


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from vramscope.viewer import __version__ as value
    else:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython) -> None:
    """``%load_ext vramscope``: the ``%%vramscope`` cell magic (IPython is imported here,
    never by ``import vramscope``)."""
    from .magic import register

    register(ipython)
