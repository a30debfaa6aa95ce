"""What-if: replay a recorded trace through a model of the caching allocator under other settings.

Typical use::

    from vramscope.viewer.model.whatif import prepare

    case = prepare(snap)                      # the last OOM's device, else the highest peak's
    case.self_check()                         # the model reproduces the recording
    result = case.simulate("expandable_segments:True", limit=10 * 10**9)
    result.peak_reserved, result.first_oom

Settings are ``PYTORCH_CUDA_ALLOC_CONF`` strings, parsed as the allocator
parses them (each starts from the defaults; ``"recorded"`` means the
settings in the snapshot).  The memory limit is the recording's
(``memory_limit_bytes`` in the capture sidecar, else bounded from the
trace: :mod:`.limits`) unless given.

Modules: :mod:`.requests` (the program's requests and the recorded
answers), :mod:`.simulator` (the allocator model; with :mod:`.blocks`,
:mod:`.release`, :mod:`.expandable`), :mod:`.run` (curves,
peaks, OOMs: :mod:`.result`), :mod:`.native_sim` (the same model compiled, over
columns and without the GIL: ``_native/whatif_core.c``; it answers whenever it is built
and covers the case, and equals the Python model to the byte: tests compare them),
:mod:`.selfcheck`, :mod:`.limits`, :mod:`.predictions` (the rows per
setting the CLI prints and the panels show), :mod:`.case_cache` (prepared cases kept
beside the column cache: a re-run skips the replay).

May import: :mod:`..analysis` (which device to answer for), :mod:`..replay`, :mod:`..core`
(the allocator's rules), numpy.
"""

from .predictions import RECOMMENDED, Case, Prediction, predict, prepare

__all__ = ["RECOMMENDED", "Case", "Prediction", "predict", "prepare"]
