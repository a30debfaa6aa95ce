"""A training loop written as an allocator trace, with what each allocation *is*.

Test helper for the memory categories: it writes the snapshot a program like
this would produce (torch's pickle schema: segments, device_traces with Python
frames, record_function annotations), and remembers the category it meant for
every allocation, so a classifier can be checked event by event::

    model.cuda()                      # parameters, via module._apply
    for it in range(iterations):
        opt.zero_grad()               # frees last iteration's gradients (annotated)
        x = batch()                   # input (train.py:38)
        loss = model(x).sum()         # activations kept for backward, temporaries
        loss.backward()               # autograd thread: no Python frames; gradients
        opt.step()                    # AdamW: two states per parameter, lazily in step 0
        kept.append(x.clone())        # the leak, at train.py:57 (when asked)

Addresses bump upward inside one large segment, so the replay is exact and the
final segment list is consistent with the trace.
"""

from __future__ import annotations

import pickle

MIB = 1 << 20
BASE = 0x7F00_0000_0000
SEGMENT = 64 << 30
TORCH = "/usr/lib/python3.12/site-packages/torch"
USER = "/home/user/train.py"
MODEL = "/home/user/model.py"


def _f(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


APPLY = [
    _f(f"{TORCH}/nn/modules/module.py", 1097, "<lambda>"),
    _f(f"{TORCH}/nn/modules/module.py", 965, "_apply"),
    _f(f"{TORCH}/nn/modules/module.py", 1097, "cuda"),
    _f(USER, 20, "main"),
]


def FORWARD(line: int) -> list[dict]:
    return [
        _f(f"{TORCH}/nn/modules/linear.py", 125, "forward"),
        _f(f"{TORCH}/nn/modules/module.py", 1790, "_call_impl"),
        _f(f"{TORCH}/nn/modules/module.py", 1779, "_wrapped_call_impl"),
        _f(MODEL, line, "forward"),
        _f(f"{TORCH}/nn/modules/module.py", 1790, "_call_impl"),
        _f(f"{TORCH}/nn/modules/module.py", 1779, "_wrapped_call_impl"),
        _f(USER, 40, "main"),
    ]


INPUT = [_f(USER, 38, "main")]
LOSS = [_f(f"{TORCH}/_tensor.py", 40, "wrapped"), _f(USER, 42, "main")]
BACKWARD_ENTRY = [
    _f(f"{TORCH}/autograd/__init__.py", 200, "_make_grads"),
    _f(f"{TORCH}/autograd/__init__.py", 340, "backward"),
    _f(f"{TORCH}/_tensor.py", 620, "backward"),
    _f(USER, 44, "main"),
]
AUTOGRAD_THREAD: list[dict] = []  # autograd's device thread runs no Python
OPT_INIT = [
    _f(f"{TORCH}/optim/adamw.py", 150, "_init_group"),
    _f(f"{TORCH}/optim/adamw.py", 220, "step"),
    _f(f"{TORCH}/optim/optimizer.py", 533, "wrapper"),
    _f(USER, 46, "main"),
]
OPT_TEMP = [
    _f(f"{TORCH}/optim/adamw.py", 600, "_multi_tensor_adamw"),
    _f(f"{TORCH}/optim/adamw.py", 240, "step"),
    _f(f"{TORCH}/optim/optimizer.py", 533, "wrapper"),
    _f(USER, 46, "main"),
]
ZERO_GRAD = [_f(f"{TORCH}/optim/optimizer.py", 990, "zero_grad"), _f(USER, 36, "main")]
# ``opt.step(closure)``: the step calls the program's closure, which runs the forward, the
# loss and backward (PyTorch Lightning's automatic optimisation, LBFGS-style loops).
STEP_CALLS_CLOSURE = [
    _f(USER, 30, "closure"),
    _f(f"{TORCH}/optim/adamw.py", 205, "step"),
    _f(f"{TORCH}/optim/optimizer.py", 80, "_use_grad"),
    _f(f"{TORCH}/optim/optimizer.py", 533, "wrapper"),
    _f(USER, 46, "main"),
]


def in_closure(frames: list[dict]) -> list[dict]:
    """The same call made from the closure that ``opt.step(closure)`` runs (for the
    program's own ``main`` frame at the bottom, the closure and the step above it)."""
    return frames[:-1] + STEP_CALLS_CLOSURE


LEAK_LINE = 57
LEAK = [_f(USER, LEAK_LINE, "main")]


class TrainingTrace:
    """Builds the trace; ``meant`` holds (alloc event index, category) of every allocation."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.annotations: list[dict] = []
        self.t = 1_700_000_000_000_000
        self.top = BASE
        self.live: dict[int, tuple[int, int, list]] = {}  # addr -> (rounded, requested, frames)
        self.meant: dict[int, str] = {}  # addr -> category of the live allocation
        self.category_of_event: dict[int, str] = {}

    def _event(self, action: str, addr: int, size: int, frames: list) -> None:
        self.t += 10
        self.events.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": self.t,
                "frames": frames,
            }
        )

    def alloc(self, size: int, frames: list, category: str) -> int:
        rounded = (size + 511) // 512 * 512
        addr = self.top
        self.top += rounded
        self.category_of_event[len(self.events)] = category
        self._event("alloc", addr, size, frames)
        self.live[addr] = (rounded, size, frames)
        return addr

    def free(self, addr: int, frames: list) -> None:
        """Free ``addr``; ``frames``: where the program freed it (torch records that stack)."""
        _rounded, size, _ = self.live.pop(addr)
        self._event("free_requested", addr, size, frames)
        self._event("free_completed", addr, size, frames)

    def annotate(self, name: str, stage: str) -> None:
        self.t += 5
        self.annotations.append({"stage": stage, "name": name, "device": 0, "time_us": self.t})

    def snapshot(self) -> dict:
        """The snapshot dict torch would have written at the end."""
        blocks = []
        at = BASE
        for addr in sorted(self.live):
            rounded, size, frames = self.live[addr]
            if addr > at:
                blocks.append(
                    {
                        "address": at,
                        "size": addr - at,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    }
                )
            blocks.append(
                {
                    "address": addr,
                    "size": rounded,
                    "requested_size": size,
                    "state": "active_allocated",
                    "frames": frames,
                }
            )
            at = addr + rounded
        if at < BASE + SEGMENT:
            blocks.append(
                {
                    "address": at,
                    "size": BASE + SEGMENT - at,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            )
        allocated = sum(v[0] for v in self.live.values())
        requested = sum(v[1] for v in self.live.values())
        seg = {
            "device": 0,
            "address": BASE,
            "total_size": SEGMENT,
            "allocated_size": allocated,
            "active_size": allocated,
            "requested_size": requested,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "frames": [],
            "blocks": blocks,
        }
        trace = [
            {
                "action": "segment_alloc",
                "addr": BASE,
                "size": SEGMENT,
                "stream": 0,
                "time_us": self.t - 10**9,
                "frames": [],
            }
        ] + self.events
        return {
            "segments": [seg],
            "device_traces": [trace],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": "",
                "max_split_size": -1,
                "expandable_segments": False,
            },
            "external_annotations": self.annotations,
        }


def training_run(
    iterations: int = 6,
    layers: int = 4,
    leak: bool = False,
    leak_bytes: int = 3 * MIB + 1000,
    closure: bool = False,
) -> tuple[bytes, TrainingTrace]:
    """(pickle bytes of the snapshot, the builder with what every allocation was meant as).

    ``closure``: the forward, the loss and backward run inside ``opt.step(closure)`` (the
    step's annotation spans them; their stacks hold the step's frames).  Event indices in
    ``category_of_event`` are 0-based in the device trace *after* the leading segment_alloc
    (so +1 for the trace as loaded)."""
    tr = TrainingTrace()
    wrap = in_closure if closure else (lambda frames: frames)
    param_sizes = [(5 + j) * MIB + 256 * j for j in range(layers)]
    params = [tr.alloc(s, APPLY, "parameter") for s in param_sizes]
    del params
    grads: list[int] = []
    states: list[int] = []
    x_prev = loss_prev = None
    for it in range(iterations):
        tr.annotate("Optimizer.zero_grad#AdamW.zero_grad", "START")
        for g in grads:
            tr.free(g, ZERO_GRAD)
        grads = []
        tr.annotate("Optimizer.zero_grad#AdamW.zero_grad", "END")
        x = tr.alloc(2 * MIB + 4096, INPUT, "input")
        if x_prev is not None:
            tr.free(x_prev, INPUT)
        x_prev = x
        if closure:
            tr.annotate("Optimizer.step#AdamW.step", "START")
        acts = []
        for j in range(layers):
            fwd = wrap(FORWARD(10 + j))
            acts.append(tr.alloc(6 * MIB + 512 * j, fwd, "activation"))
            tmp = tr.alloc(7 * MIB + 512 * j, fwd, "temporary")
            tr.free(tmp, fwd)
        loss = tr.alloc(1536 * 1024, wrap(LOSS), "activation")
        if loss_prev is not None:
            tr.free(loss_prev, wrap(LOSS))
        loss_prev = loss
        g0 = tr.alloc(1536 * 1024, wrap(BACKWARD_ENTRY), "temporary")
        for j in reversed(range(layers)):
            tmp = tr.alloc(8 * MIB + 512 * j, AUTOGRAD_THREAD, "temporary")
            grads.append(tr.alloc(param_sizes[j], AUTOGRAD_THREAD, "gradient"))
            tr.free(tmp, AUTOGRAD_THREAD)
            tr.free(acts[j], AUTOGRAD_THREAD)
        tr.free(g0, wrap(BACKWARD_ENTRY))
        if not closure:
            tr.annotate("Optimizer.step#AdamW.step", "START")
        if it == 0:
            for s in param_sizes:
                states.append(tr.alloc(s, OPT_INIT, "optimizer_state"))
                states.append(tr.alloc(s, OPT_INIT, "optimizer_state"))
        for s in param_sizes:
            tmp = tr.alloc(s, OPT_TEMP, "temporary")
            tr.free(tmp, OPT_TEMP)
        tr.annotate("Optimizer.step#AdamW.step", "END")
        if leak:
            tr.alloc(leak_bytes, LEAK, "unknown")
    return pickle.dumps(tr.snapshot(), protocol=4), tr
