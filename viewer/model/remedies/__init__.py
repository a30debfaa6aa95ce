"""Remedies: what change would make a recorded run fit, predicted from the recording.

* :mod:`.evidence`: per-request lifetime, iteration, phase and provenance;
* :mod:`.scaling`: which allocations grow with the batch, with a reason each;
* :mod:`.batch_scale`: the run re-simulated at another batch size, and the
  largest batch that fits a memory limit (bisection over simulations); beside it,
  without simulations of their own, :mod:`.batch_ranges` (the sizes the doubtful
  allocations could take at another batch, and the estimate's low/high) and
  :mod:`.batch_judge` (exact or estimate, the error a prediction is held to, whether
  it fits, in words);
* :mod:`.changes`: the recorded request stream edited as a remedy would edit it
  (kept outputs freed, optimizer state shrunk, checkpointed blocks, autocast), for
  the simulator;
* :mod:`.no_grad`: forwards whose graph no backward used, and the stream with
  them run under ``no_grad``;
* :mod:`.advise`: the remedy catalogue, each simulated or estimated, ranked
  by predicted peak reserved.

No Qt, no torch: the CLI (``vramscope whatif --batch-scale``, ``vramscope
advise``) and the GUI's Diagnosis panel share it.

May import: :mod:`..whatif` and :mod:`..categories` (their public names),
:mod:`..replay`, :mod:`..core`, numpy.
"""
