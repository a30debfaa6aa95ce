"""What a call stack says about the memory it allocated: frame kinds, per stack.

Every interned frame gets a bit set of kinds (optimizer step, its lazy state
init, module ``_apply``/``.to()``/``.cuda()``, module construction, a module's
forward call, autograd's backward, ``AccumulateGrad``, gradient checkpointing's
recomputation, zero_grad, the user's own code).  A stack's kinds are the OR
of its frames' kinds, computed once per stack with one ``reduceat`` (stacks
are interned: a 10M-event file has a few thousand).  From the kinds, each
stack gets one piece of *evidence* about the phase its allocation was made in.

Frames are matched by file path and function name, never by line number
(line numbers move between torch versions).
"""

from __future__ import annotations

import numpy as np

from ..core.frames import CAT_USER, frame_categories
from ..core.snapshot import Snapshot

# Kind bits of a frame (and, OR'ed, of a stack).
K_USER = 1 << 0  # the user's own Python code
K_MODULE_CALL = 1 << 1  # torch/nn/modules/module.py _call_impl: inside a module's forward
K_APPLY = 1 << 2  # module._apply (.to() / .cuda() / .half() of a module)
K_MODULE_INIT = 1 << 3  # module construction: __init__, reset_parameters, nn.init
K_OPTIM = 1 << 4  # torch/optim: optimizer step
K_OPT_INIT = 1 << 5  # the optimizer's lazy state creation (_init_group)
K_ZERO_GRAD = 1 << 6  # optimizer / module zero_grad
K_BACKWARD = 1 << 7  # autograd backward (Python entry points or the C++ engine)
K_ACCUMULATE_GRAD = 1 << 8  # the C++ AccumulateGrad node: writes .grad
K_RECOMPUTE = 1 << 9  # activation checkpointing recomputing in backward
K_CPP = 1 << 10  # any native frame (the file was recorded with C++ stacks)
K_DATA = 1 << 11  # torch.utils.data (loaders, collate, pin memory)
K_WORKSPACE = 1 << 12  # a library's scratch kept for reuse (cuBLAS / cuBLASLt workspace)
# Sharded data parallelism (FSDP2 fully_shard, FSDP1 FlatParameter): what FSDP itself makes.
K_FSDP_SHARD = 1 << 13  # a rank's parameter shard (sharding at init, to_empty of a sharded model)
K_FSDP_GATHER = 1 << 14  # the unsharded parameters an all-gather fills
K_FSDP_ALL_GATHER = 1 << 15  # the all-gather collective's own flat buffer
K_FSDP_REDUCE = 1 << 16  # the gradients' reduce-scatter (its input buffer and output shard)
K_FSDP = K_FSDP_SHARD | K_FSDP_GATHER | K_FSDP_ALL_GATHER | K_FSDP_REDUCE
# DistributedDataParallel: its Reducer's gradient buckets and its own collectives.
K_DDP_REDUCER = 1 << 17  # where the Reducer makes its buckets (construction, rebuild)
K_DDP_COMM = 1 << 18  # DDP's broadcasts and syncs, a communication hook's buffers
K_DDP_INPUTS = 1 << 19  # the inputs DDP moves to the device before the forward
K_DDP = K_DDP_REDUCER | K_DDP_COMM | K_DDP_INPUTS
# A stack, not a frame: the optimizer's step called back into the program (its closure:
# ``optimizer.step(closure)``, Lightning's automatic optimisation, LBFGS).  Such a stack
# loses K_OPTIM / K_OPT_INIT: what the closure runs is a forward, a loss or a backward.
K_CLOSURE = 1 << 20
# Frames of ``optim/optimizer.py`` that only dispatch to a step (its decorators and hooks):
# what they call is the optimizer's own step, even where that step is the user's code.
_OPT_DISPATCH = 1 << 21

# Evidence a stack gives about the phase of its allocation.
EV_NONE = 0  # no stack, or nothing telling
EV_FORWARD = 1
EV_BACKWARD = 2
EV_OPTIMIZER = 3
EV_ZERO_GRAD = 4
EV_PARAM_INIT = 5  # module construction or .to()/.cuda()
EV_USER = 6  # the user's code outside any module, optimizer or backward
EV_NO_PYTHON = 7  # a stack without a single Python frame: a thread that runs no Python

EVIDENCE_NAMES = (
    "none",
    "forward",
    "backward",
    "optimizer",
    "zero_grad",
    "param_init",
    "user",
    "no_python",
)

_OPT_INIT_NAMES = ("_init_group", "_init_state", "_lazy_init")
_MODULE_INIT_NAMES = (
    "__init__",
    "reset_parameters",
    "_reset_parameters",
    "_init_weights",
    "init_weights",
    "post_init",
    "tie_weights",
)
_APPLY_NAMES = (
    "_apply",
    "to",
    "cuda",
    "half",
    "float",
    "double",
    "bfloat16",
    "type",
    "to_empty",
    "convert",
    "_load_from_state_dict",
    "load_state_dict",
)
_BACKWARD_PY_NAMES = ("backward", "_engine_run_backward", "grad", "_make_grads", "run_backward")
# torch.compile's backward: AOTAutograd's compiled autograd.Function runs the compiled
# backward graph from these (the generated Inductor module below them is the program's
# own-looking code in /tmp/torchinductor_*, and on autograd's device thread nothing else
# in the stack names a backward).  The forward's wrappers share the directory, not names.
# (torch 2.2-2.4 ran it from ``call_compiled_backward`` in jit_compile_runtime_wrappers.py.)
_AOT_BACKWARD_NAMES = (
    "backward",
    "_backward_impl",
    "call_compiled_backward",
    "_compiled_backward",
    "_backward_prologue",
    "_backward_epilogue",
    "_double_backward",
)
_RECOMPUTE_NAMES = ("unpack_hook", "recompute_fn", "backward", "_recompute", "unpack")

# FSDP's frames by (file inside torch, function) -> kind.  FSDP2 (fully_shard) first, then
# FSDP1's FlatParameter.  Functions, not lines: they move between torch versions.
_FSDP2 = "distributed/fsdp/_fully_shard/"
_FSDP_FRAMES = {
    (_FSDP2 + "_fsdp_param.py", "_init_sharded_param"): K_FSDP_SHARD,
    (_FSDP2 + "_fsdp_param.py", "reset_sharded_param"): K_FSDP_SHARD,
    (_FSDP2 + "_fully_shard.py", "_apply"): K_FSDP_SHARD,
    (_FSDP2 + "_fsdp_param.py", "init_all_gather_outputs"): K_FSDP_GATHER,
    (_FSDP2 + "_fsdp_param.py", "alloc_all_gather_outputs"): K_FSDP_GATHER,
    (_FSDP2 + "_fsdp_param.py", "init_unsharded_param"): K_FSDP_GATHER,
    (_FSDP2 + "_fsdp_collectives.py", "foreach_all_gather"): K_FSDP_ALL_GATHER,
    (_FSDP2 + "_fsdp_collectives.py", "foreach_reduce"): K_FSDP_REDUCE,
    ("distributed/fsdp/_flat_param.py", "_init_flat_param_and_metadata"): K_FSDP_SHARD,
    ("distributed/fsdp/_flat_param.py", "flatten_tensors"): K_FSDP_SHARD,
    ("distributed/fsdp/_flat_param.py", "_get_shard"): K_FSDP_SHARD,
    ("distributed/fsdp/_flat_param.py", "init_flat_param_attributes"): K_FSDP_GATHER,
    ("distributed/fsdp/_flat_param.py", "_use_low_precision_shard"): K_FSDP_ALL_GATHER,
    ("distributed/fsdp/_flat_param.py", "_alloc_padded_unsharded_flat_param"): K_FSDP_GATHER,
    ("distributed/fsdp/_flat_param.py", "_all_gather_flat_param"): K_FSDP_GATHER,
    ("distributed/fsdp/_runtime_utils.py", "_post_backward_hook"): K_FSDP_REDUCE,
    ("distributed/fsdp/_runtime_utils.py", "_reduce_grad"): K_FSDP_REDUCE,
}

# DDP's frames by (file inside torch, function) -> kind.  The Reducer (C++) makes its
# buckets when DDP is constructed (_ddp_init_helper) and again, in the order the
# gradients arrived, in the first forward after a backward (_pre_forward calls
# _rebuild_buckets); the same frames also make the tiny tensors of the bucket-order sync.
_DDP = "nn/parallel/distributed.py"
_DDP_UTILS = "distributed/utils.py"
_DDP_FRAMES = {
    (_DDP, "_ddp_init_helper"): K_DDP_REDUCER,
    (_DDP, "_pre_forward"): K_DDP_REDUCER,
    (_DDP, "_sync_buffers"): K_DDP_COMM,
    (_DDP, "_sync_module_buffers"): K_DDP_COMM,
    (_DDP, "_default_broadcast_coalesced"): K_DDP_COMM,
    (_DDP, "_distributed_broadcast_coalesced"): K_DDP_COMM,
    (_DDP, "_check_global_requires_backward_grad_sync"): K_DDP_COMM,
    (_DDP, "_match_all_reduce_for_bwd_pass"): K_DDP_COMM,
    (_DDP, "_match_unused_params_allreduce"): K_DDP_COMM,
    (_DDP, "_delay_all_reduce"): K_DDP_COMM,
    (_DDP_UTILS, "_sync_module_states"): K_DDP_COMM,
    (_DDP_UTILS, "_sync_params_and_buffers"): K_DDP_COMM,
    (_DDP_UTILS, "_verify_param_shape_across_processes"): K_DDP_COMM,
    (_DDP_UTILS, "_to_kwargs"): K_DDP_INPUTS,
    (_DDP_UTILS, "_recursive_to"): K_DDP_INPUTS,
}
# A built-in communication hook (fp16 / bf16 compression, PowerSGD): all it makes is its own.
_DDP_HOOKS = "distributed/algorithms/ddp_comm_hooks/"
# Each framework's frames: (path prefix inside torch, {(file, function): kind}).
_FRAMEWORK_FRAMES = (
    ("distributed/fsdp/", _FSDP_FRAMES),
    (_DDP, _DDP_FRAMES),
    (_DDP_UTILS, _DDP_FRAMES),
)


def _torch_rel(filename: str) -> str | None:
    """The path inside the torch package (``nn/modules/module.py``), or None."""
    f = filename.replace("\\", "/")
    for marker in ("/site-packages/torch/", "/dist-packages/torch/", "/torch/"):
        if marker in f:
            return f.rsplit(marker, 1)[1]
    if f.startswith("torch/"):
        return f[len("torch/") :]
    return None


def frame_kind(filename: str, name: str, category: int) -> int:
    """The kind bits of one frame (file path, function name, vramscope frame category)."""
    kind = 0
    if category == CAT_USER:
        kind |= K_USER
    is_py = filename.endswith(".py")
    if not is_py:
        if category != CAT_USER:
            kind |= K_CPP
        # Native frames that name the autograd engine or AccumulateGrad.
        if (
            "autograd::Engine::" in name
            or "autograd::Node::operator()" in name
            or "autograd::python::PythonEngine" in name
            or ("call_function(" in name and "autograd" in name)
        ):
            kind |= K_BACKWARD
        if "Workspace" in name and (
            "cublas" in name.lower() or "BlasLt" in name or "setWorkspaceForHandle" in name
        ):
            kind |= K_WORKSPACE
        if "AccumulateGrad" in name:
            kind |= K_BACKWARD | K_ACCUMULATE_GRAD
        return kind
    rel = _torch_rel(filename)
    if rel is None:
        return kind
    for prefix, table in _FRAMEWORK_FRAMES:
        if rel.startswith(prefix):
            return kind | table.get((rel, name), 0)
    if rel.startswith(_DDP_HOOKS):
        return kind | K_DDP_COMM
    if rel.startswith("nn/modules/"):
        if rel == "nn/modules/module.py":
            if name in ("_call_impl", "_wrapped_call_impl"):
                kind |= K_MODULE_CALL
            elif name in _APPLY_NAMES or name == "<lambda>" or name == "_apply":
                kind |= K_APPLY
            elif name == "zero_grad":
                kind |= K_ZERO_GRAD
        if name in _MODULE_INIT_NAMES:
            kind |= K_MODULE_INIT
    elif rel.startswith(("nn/init.py", "nn/parameter.py")):
        kind |= K_MODULE_INIT
    elif rel.startswith("optim/"):
        if name == "zero_grad":
            kind |= K_ZERO_GRAD
        else:
            kind |= K_OPTIM
            if name in _OPT_INIT_NAMES:
                kind |= K_OPT_INIT
            if rel == "optim/optimizer.py":
                kind |= _OPT_DISPATCH
    elif (
        rel in ("_tensor.py", "autograd/__init__.py", "autograd/graph.py")
        and name in _BACKWARD_PY_NAMES
    ):
        kind |= K_BACKWARD
    elif rel == "autograd/function.py" and name == "backward":
        kind |= K_BACKWARD  # a custom Function's backward, run by the engine
    elif rel.startswith("_functorch/") and name in _AOT_BACKWARD_NAMES:
        kind |= K_BACKWARD
    elif rel.startswith("utils/checkpoint.py") and name in _RECOMPUTE_NAMES:
        kind |= K_RECOMPUTE | K_BACKWARD
    elif rel.startswith("utils/data/"):
        kind |= K_DATA
    return kind


def frame_kinds(snap: Snapshot, categories: np.ndarray | None = None) -> np.ndarray:
    """Kind bits of every interned frame (int32), one string test per distinct (file, name)."""
    frames = snap.frames
    if categories is None:
        categories = frame_categories(frames)
    out = np.zeros(len(frames), dtype=np.int32)
    cache: dict[tuple[int, int, int], int] = {}
    strings = frames.strings
    for i, (f, n, c) in enumerate(
        zip(frames.filename.tolist(), frames.name.tolist(), categories.tolist())
    ):
        key = (f, n, c)
        k = cache.get(key)
        if k is None:
            k = cache[key] = frame_kind(strings[f], strings[n], c)
        out[i] = k
    return out


def stack_kinds(snap: Snapshot, kinds: np.ndarray | None = None) -> np.ndarray:
    """OR of the kinds of every frame of every stack (int32 per stack; 0 for empty ones),
    with :data:`K_CLOSURE` in place of the optimizer's bits where the step called back into
    the program (:func:`closure_stacks`)."""
    if kinds is None:
        kinds = frame_kinds(snap)
    stacks = snap.stacks
    n = len(stacks)
    out = np.zeros(n, dtype=np.int32)
    if n == 0 or not len(stacks.frames):
        return out
    lengths = np.diff(stacks.offsets)
    nonempty = lengths > 0
    out[nonempty] = np.bitwise_or.reduceat(kinds[stacks.frames], stacks.offsets[:-1][nonempty])
    closure = closure_stacks(snap, kinds, out)
    out[closure] = (out[closure] & ~(K_OPTIM | K_OPT_INIT)) | K_CLOSURE
    return out & ~_OPT_DISPATCH


def _program_file(filename: str) -> bool:
    """A Python file of the program or of a library it uses: not torch, not the standard
    library (whose frames an optimizer's own code passes through)."""
    f = filename.replace("\\", "/")
    if not f.endswith(".py") or "torchinductor_" in f:
        return False  # Inductor's generated code runs a compiled step as much as a forward
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in f:  # an installed package: torch's or another's (a venv may sit in .../torch/)
            return not f.rsplit(marker, 1)[1].startswith(_COMPILER_PACKAGES)
    return _torch_rel(f) is None and "/lib/python3" not in f


#: Installed packages an optimizer's own (compiled) step runs through.
_COMPILER_PACKAGES = ("torch/", "triton/")


def closure_stacks(snap: Snapshot, kinds: np.ndarray, or_kinds: np.ndarray) -> np.ndarray:
    """Per stack: did the optimizer's step call back into the program that allocated?

    Stacks list their frames innermost first.  Inner to the step's innermost frame, a
    module's forward or autograd's backward is the closure's (an optimizer runs neither);
    so is any frame outside torch (the user's loss, Lightning's ``_wrap_closure``) when
    that innermost frame is a concrete step (``adamw.py step``): a frame of
    ``optimizer.py``'s dispatch calls the step itself, which may be the user's own
    optimizer."""
    stacks = snap.stacks
    n = len(stacks)
    out = np.zeros(n, dtype=bool)
    cand = np.flatnonzero((or_kinds & K_OPTIM) != 0)
    if not len(cand):
        return out
    frames = snap.frames
    strings = frames.strings
    outside = np.fromiter((_program_file(s) for s in strings), bool, count=len(strings))
    frame_outside = outside[frames.filename] if len(frames) else np.zeros(0, bool)
    big = np.iinfo(np.int64).max
    for s in cand.tolist():  # stacks inside a step: a few hundred at most
        ids = stacks.frames[stacks.offsets[s] : stacks.offsets[s + 1]]
        k = kinds[ids]
        at_opt = np.flatnonzero((k & K_OPTIM) != 0)
        first_opt = int(at_opt[0]) if len(at_opt) else big
        inner = slice(0, first_opt)
        if ((k[inner] & (K_MODULE_CALL | K_BACKWARD)) != 0).any():
            out[s] = True
        elif not (k[first_opt] & _OPT_DISPATCH) and frame_outside[ids[inner]].any():
            out[s] = True
    return out


def stack_has_python(snap: Snapshot) -> np.ndarray:
    """Per stack: does it hold at least one Python frame?"""
    frames = snap.frames
    strings = frames.strings
    py_string = np.fromiter((s.endswith(".py") for s in strings), bool, count=len(strings))
    is_py = py_string[frames.filename] if len(frames) else np.zeros(0, bool)
    stacks = snap.stacks
    n = len(stacks)
    out = np.zeros(n, dtype=bool)
    if n == 0 or not len(stacks.frames):
        return out
    lengths = np.diff(stacks.offsets)
    nonempty = lengths > 0
    out[nonempty] = np.logical_or.reduceat(is_py[stacks.frames], stacks.offsets[:-1][nonempty])
    return out


def stack_evidence(kinds: np.ndarray, has_python: np.ndarray) -> np.ndarray:
    """One phase evidence per stack (int8), from its kinds; the order of the tests is the
    priority: backward wins over a forward frame (recomputation under checkpointing runs
    module forwards inside backward), the optimizer over anything it calls."""
    ev = np.full(len(kinds), EV_NONE, dtype=np.int8)
    ev[(kinds & K_USER) != 0] = EV_USER
    ev[(kinds & K_MODULE_CALL) != 0] = EV_FORWARD
    ev[(kinds & (K_APPLY | K_MODULE_INIT)) != 0] = EV_PARAM_INIT
    ev[(kinds & K_ZERO_GRAD) != 0] = EV_ZERO_GRAD
    ev[(kinds & K_OPTIM) != 0] = EV_OPTIMIZER
    ev[(kinds & K_BACKWARD) != 0] = EV_BACKWARD
    # No Python frame and nothing native that names a phase: a thread without Python,
    # in a training program almost always autograd's device thread (a guess).
    ev[~has_python & (ev == EV_NONE)] = EV_NO_PYTHON
    return ev
