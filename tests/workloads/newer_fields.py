"""Record a snapshot with every newer-torch field this torch can write, and the truth beside it.

    python tests/workloads/newer_fields.py --out DIR

Uses whichever of these the installed torch has (each is checked, none is
required): ``_record_memory_history(compile_context=True,
record_pinned_host_memory=True)``, ``torch.cuda.memory._set_memory_metadata``
(``user_metadata`` on events), ``_annotate_tensor`` (``annotate`` events), a
``torch.compile``d step (``compile_context``), anomaly mode during backward
(``forward_frames``), pinned host tensors (``host_segments``/``host_traces``),
and a trace ring smaller than the run (``trace_alloc_overflowed``).

Writes ``DIR/newer_fields.pickle`` (torch's own ``_dump_snapshot`` form) and
``DIR/newer_fields.json``: torch version, GPU, ``memory_stats``, which APIs
existed, which keys the snapshot really holds, and the truth the tests check
(annotated addresses and texts, metadata strings, pinned bytes held).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pickle
import sys

MiB = 1 << 20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument(
        "--max-entries",
        type=int,
        default=1000,
        help="trace ring size: smaller than the run, so it overflows",
    )
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args(argv)

    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("newer_fields: needs a CUDA GPU", file=sys.stderr)
        return 2
    mem = torch.cuda.memory
    dev = torch.device("cuda", 0)
    features: dict[str, bool] = {}
    params = inspect.signature(mem._record_memory_history).parameters
    kwargs = {}
    for name in ("compile_context", "record_pinned_host_memory"):
        features[name] = name in params
        if features[name]:
            kwargs[name] = True
    mem._record_memory_history(
        "all", context="all", stacks="python", max_entries=args.max_entries, **kwargs
    )
    set_meta = getattr(mem, "_set_memory_metadata", None)
    features["_set_memory_metadata"] = set_meta is not None
    annotate = getattr(mem, "_annotate_tensor", None)
    features["_annotate_tensor"] = annotate is not None

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth: dict = {"annotations": [], "metadata": []}

    # Pinned host memory: 8 MiB kept to the end, 4 MiB freed (the host allocator caches it).
    pinned_kept = torch.empty(8 * MiB, dtype=torch.uint8, pin_memory=True)
    pinned_tmp = torch.empty(4 * MiB, dtype=torch.uint8, pin_memory=True)
    del pinned_tmp
    truth["pinned_kept_bytes"] = pinned_kept.numel()

    try:
        compiled = torch.compile(lambda t: (t * 2).relu().sum())
        compiled(torch.randn(256, 256, device=dev))
        features["torch.compile"] = True
    except Exception as exc:  # a missing compiler toolchain must not end the recording
        print(
            f"newer_fields: torch.compile unavailable ({exc.__class__.__name__})", file=sys.stderr
        )
        features["torch.compile"] = False

    for step in range(args.steps):
        if set_meta is not None:
            text = f"step {step}"
            set_meta(text)
            truth["metadata"].append(text)
        x = torch.randn(512, 1024, device=dev)
        # anomaly mode keeps each node's forward traceback: newer torch writes it as forward_frames
        with torch.autograd.set_detect_anomaly(step == args.steps - 1, check_nan=False):
            loss = model(x).pow(2).mean()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if set_meta is not None:
        set_meta("")
    if annotate is not None:
        for name, prm in model.named_parameters():
            annotate(prm, f"parameter {name}")
            truth["annotations"].append([prm.untyped_storage().data_ptr(), f"parameter {name}"])
    torch.cuda.synchronize(dev)

    snap = mem._snapshot()
    stats = torch.cuda.memory_stats(dev)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "newer_fields.pickle"), "wb") as f:
        pickle.dump(snap, f)
    keys: dict[str, list] = {"top": sorted(snap)}
    events = [e for t in snap.get("device_traces", []) for e in t]
    keys["event"] = sorted({k for e in events for k in e})
    keys["actions"] = sorted({e["action"] for e in events})
    keys["frame"] = sorted({k for e in events for f in (e.get("frames") or []) for k in f})
    keys["allocator_settings"] = sorted(snap.get("allocator_settings", {}))
    if hasattr(torch.cuda, "host_memory_stats"):
        truth["host_memory_stats"] = dict(torch.cuda.host_memory_stats())
    sidecar = {
        "name": "newer_fields",
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_stats": dict(stats),
        "features": features,
        "keys": keys,
        "truth": truth,
    }
    with open(os.path.join(args.out, "newer_fields.json"), "w") as f:
        json.dump(sidecar, f, indent=1, sort_keys=True, default=str)
    mem._record_memory_history(None)
    print(json.dumps({"features": features, "keys": keys}, indent=1))
    del pinned_kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
