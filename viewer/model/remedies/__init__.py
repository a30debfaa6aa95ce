"""Remedies: what change would make a recorded run fit, predicted from the recording.

* :mod:`.evidence`: per-request lifetime, iteration, phase and provenance;
* :mod:`.scaling`: which allocations grow with the batch, with a reason each;
* :mod:`.batch_scale`: the run re-simulated at another batch size, and the
  largest batch that fits a memory limit (bisection over simulations); beside it,
  without simulations of their own, :mod:`.batch_ranges` (the sizes the doubtful
  allocations could take at another batch, and the estimate's low/high) and
  :mod:`.batch_judge` (exact or estimate, the error a prediction is held to, whether
  it fits, in words); :mod:`.workspaces` (library workspaces at another batch: a fixed
  part plus a per-sample part), :mod:`.reductions` (ATen reductions' staging buffers:
  in proportion up to the blocks the GPU holds at once) and :mod:`.explain` (how the
  judgement went, per rule, in words and JSON);
* :mod:`.seq_scale`: the run re-simulated at another sequence length: which
  allocations grow with the sequence, which with its square (eager attention's scores),
  which not at all, the estimate's range and the longest sequence that fits;
* :mod:`.two_recordings`: two recordings of one program at two batch sizes (or
  sequence lengths) matched request by request, each size affine in the knob, and the
  run at any other size simulated from them;
* :mod:`.changes`: the recorded request stream edited as a remedy would edit it
  (kept outputs freed, optimizer state shrunk, checkpointed blocks, autocast), for
  the simulator;
* :mod:`.no_grad`: forwards whose graph no backward used, and the stream with
  them run under ``no_grad``;
* :mod:`.split`: the live bytes at the peak (or the OOM), split by what they are and
  by how they scale with the batch;
* :mod:`.remedy`: one remedy, the change and what it is predicted to do;
* :mod:`.catalogue`: the remedy catalogue, one spec per remedy (when it applies, the
  simulations it needs, how its prediction is built and labelled);
* :mod:`.advise`: the remedies that apply, simulated side by side, ranked by
  predicted peak reserved, with the verdict and the split (and their words).

No Qt, no torch: the CLI (``vramscope whatif --batch-scale``, ``vramscope
advise``) and the GUI's Diagnosis panel share it.

May import: :mod:`..whatif` and :mod:`..categories` (their public names),
:mod:`..replay`, :mod:`..core`, numpy.
"""
