"""Categories of memory and the reason codes that say how each allocation's
category was decided (and whether that is a guess)."""

from __future__ import annotations

from dataclasses import dataclass

PARAMETER = 0
GRADIENT = 1
OPTIMIZER_STATE = 2
ACTIVATION = 3
TEMPORARY = 4
INPUT = 5
KV_CACHE = 6
PARAMETER_GATHERED = 7
COMMUNICATION = 8
UNKNOWN = 9
CATEGORY_NAMES = (
    "parameter",
    "gradient",
    "optimizer_state",
    "activation",
    "temporary",
    "input",
    "kv_cache",
    "parameter_gathered",
    "communication",
    "unknown",
)
CATEGORY_LABELS = (
    "parameters",
    "gradients",
    "optimizer state",
    "activations",
    "temporaries",
    "inputs",
    "KV cache",
    "parameters (gathered)",
    "communication buffers",
    "unknown",
)
# Each category's colour wherever it is drawn (the GUI's views, the HTML report), so that
# a category looks the same in every picture of it.
CATEGORY_COLORS = {
    "parameter": "#1f77b4",
    "gradient": "#9467bd",
    "optimizer_state": "#2ca02c",
    "activation": "#ff7f0e",
    "temporary": "#bcbd22",
    "input": "#17becf",
    "kv_cache": "#e377c2",
    "parameter_gathered": "#6fa8dc",
    "communication": "#5b4a9e",
    "unknown": "#9e9e9e",
}


@dataclass(frozen=True)
class Reason:
    """How a category was decided."""

    code: str
    category: int
    guess: bool
    text: str


# Index in this tuple = the reason id stored per allocation (int8).
REASONS: tuple[Reason, ...] = (
    Reason(
        "param_module_apply",
        PARAMETER,
        False,
        "made by a module's _apply (model.to() / .cuda() / .half())",
    ),
    Reason(
        "param_module_init",
        PARAMETER,
        False,
        "made while constructing a module (__init__, reset_parameters, nn.init)",
    ),
    Reason(
        "param_buffer",
        PARAMETER,
        True,
        "made by a module's _apply or constructor, but no gradient has its size: "
        "a buffer (e.g. BatchNorm statistics) or a frozen parameter",
    ),
    Reason(
        "param_size_match",
        PARAMETER,
        True,
        "made before the first iteration, alive throughout, and a gradient of "
        "exactly its size exists (a guess from sizes)",
    ),
    Reason(
        "pre_param_size_match",
        PARAMETER,
        True,
        "allocated before recording; one per gradient of exactly its size "
        "(a guess from sizes: parameter or optimizer state of the same size)",
    ),
    Reason(
        "grad_accumulate",
        GRADIENT,
        False,
        "made by autograd's AccumulateGrad and alive after the backward pass",
    ),
    Reason(
        "grad_survives_backward",
        GRADIENT,
        False,
        "made in the backward pass and alive after it (a .grad)",
    ),
    Reason(
        "grad_survives_backward_guess",
        GRADIENT,
        True,
        "made by a thread without Python (autograd's device thread, presumably) "
        "and alive after the backward pass",
    ),
    Reason(
        "opt_init_group",
        OPTIMIZER_STATE,
        False,
        "made by the optimizer's _init_group (its lazily created state)",
    ),
    Reason(
        "opt_survives_step", OPTIMIZER_STATE, False, "made in the optimizer step and alive after it"
    ),
    Reason(
        "pre_opt_size_match",
        OPTIMIZER_STATE,
        True,
        "allocated before recording; more blocks of a gradient's exact size than "
        "gradients (a guess from sizes: optimizer state such as Adam's moments)",
    ),
    Reason(
        "act_saved",
        ACTIVATION,
        False,
        "made in the forward pass and alive when the backward pass starts",
    ),
    Reason(
        "act_saved_guess",
        ACTIVATION,
        True,
        "made before the iteration's highest point and alive past it "
        "(phases guessed from the curve)",
    ),
    Reason(
        "act_output_no_backward",
        ACTIVATION,
        True,
        "made in a forward pass that no backward follows, and alive after it",
    ),
    Reason(
        "act_kept",
        ACTIVATION,
        False,
        "made in the forward pass, alive into backward, and still alive after its "
        "iteration ended: the program kept a reference (e.g. the outputs of the last "
        "step, alive until the next forward replaces them)",
    ),
    Reason(
        "workspace_cublas",
        TEMPORARY,
        False,
        "cuBLAS / cuBLASLt workspace (its C++ frames say so): scratch the library keeps "
        "for reuse for the whole run",
    ),
    Reason(
        "workspace_guess",
        TEMPORARY,
        True,
        "made in the first iteration's forward or backward (or before recording), never "
        "freed, of a cuBLAS workspace's size (32 MiB / 1 MiB / 8.125 MiB / 4 MiB), a few "
        "at most, and no parameter's: presumably a library workspace",
    ),
    Reason("temp_forward", TEMPORARY, False, "made and freed inside the forward pass"),
    Reason("temp_backward", TEMPORARY, False, "made and freed inside the backward pass"),
    Reason("temp_optimizer", TEMPORARY, False, "made and freed inside the optimizer step"),
    Reason(
        "temp_other",
        TEMPORARY,
        False,
        "made and freed outside forward, backward and the optimizer step",
    ),
    Reason(
        "input_user_code",
        INPUT,
        False,
        "made by the user's code outside the model and alive into the next forward pass",
    ),
    Reason(
        "input_lifetime",
        INPUT,
        True,
        "made outside any pass (no telling stack) and alive into the next forward pass",
    ),
    Reason(
        "pre_act_freed_in_backward",
        ACTIVATION,
        True,
        "allocated before recording (which started inside an iteration) and freed in "
        "that iteration's backward pass: presumably its activation",
    ),
    Reason(
        "pre_grad_freed_in_zero_grad",
        GRADIENT,
        True,
        "allocated before recording and freed by zero_grad: presumably the previous "
        "iteration's gradient",
    ),
    Reason(
        "leak_kept",
        UNKNOWN,
        False,
        "kept by a line that leaks (see the leaks): made outside the passes, alive ever "
        "since; what it holds, the trace cannot tell",
    ),
    Reason(
        "unknown_pre_recording",
        UNKNOWN,
        False,
        "allocated before the recording started: nothing says what it is",
    ),
    Reason(
        "unknown_setup",
        UNKNOWN,
        False,
        "made before the first iteration, alive into it, not by a module",
    ),
    Reason(
        "unknown_other",
        UNKNOWN,
        False,
        "made outside forward, backward and the optimizer step and kept",
    ),
    Reason(
        "unknown_no_iterations", UNKNOWN, False, "no iterations found in the trace to relate it to"
    ),
    # Appended: the ids above stay what they were.
    Reason(
        "kv_cache_carried",
        KV_CACHE,
        False,
        "made in a forward pass of a generation request and freed in a later forward "
        "of the same request (or kept to its end): the attention key/value cache, "
        "which each decode step concatenates and replaces",
    ),
    Reason(
        "kv_cache_last_step",
        KV_CACHE,
        True,
        "made in a generation request's last forward pass by the same call stack as "
        "the cache the earlier decode steps carried, and alive after it: that step's "
        "key/value cache (a guess from the stack)",
    ),
    Reason(
        "param_shard",
        PARAMETER,
        False,
        "made by FSDP when it sharded the model (fully_shard / FlatParameter): this "
        "rank's shard of the parameters, the local tensors of their DTensors",
    ),
    Reason(
        "param_gathered",
        PARAMETER_GATHERED,
        False,
        "made by FSDP's all-gather for a block's forward or backward: the block's "
        "unsharded parameters, freed when it reshards",
    ),
    Reason(
        "comm_all_gather",
        COMMUNICATION,
        False,
        "FSDP's all-gather buffer: the flat input and output of the collective that "
        "gathers a block's parameter shards from every rank",
    ),
    Reason(
        "comm_reduce_scatter",
        COMMUNICATION,
        False,
        "FSDP's reduce-scatter input: a block's unsharded gradients copied into one "
        "flat buffer for the collective, freed when it is done",
    ),
    Reason(
        "grad_shard",
        GRADIENT,
        False,
        "the output of FSDP's reduce-scatter, alive after the backward pass: this "
        "rank's shard of the gradients (.grad of the sharded parameters)",
    ),
    Reason(
        "grad_unsharded",
        GRADIENT,
        False,
        "made in the backward pass and freed by FSDP's reduce-scatter: a block's "
        "unsharded gradients before they are reduce-scattered",
    ),
    Reason(
        "ddp_bucket",
        GRADIENT,
        False,
        "DDP bucket: made by DistributedDataParallel's Reducer (when DDP was built, or "
        "when it rebuilt its buckets in the first forward after a backward) and kept: "
        "a flat gradient bucket the gradients are all-reduced in (with "
        "gradient_as_bucket_view=True the parameters' .grad are views into it)",
    ),
    Reason(
        "comm_ddp",
        COMMUNICATION,
        False,
        "made by DistributedDataParallel's collectives: the broadcast of parameters and "
        "buffers from rank 0, the Reducer's bucket-order sync, a communication hook's "
        "buffers",
    ),
)
REASON_IDS = {r.code: i for i, r in enumerate(REASONS)}


def reason_id(code: str) -> int:
    """The stored id of reason ``code``."""
    return REASON_IDS[code]
