"""DistributedDataParallel training whose ranks write what their gradient buckets cost.

Record it (one snapshot, sidecar and truth file per rank)::

    torchrun --standalone --nproc-per-node 2 -m vramscope.capture --out DIR \\
        tests/workloads/ddp_buckets.py --model gpt2 --bucket-view on --accum 4

A transformers GPT-2 decoder (from a config, no download) or a timm ResNet is
wrapped in DDP (``bucket_cap_mb``, ``gradient_as_bucket_view``,
``find_unused_parameters``, ``static_graph`` settable) and trained with AdamW
for a few optimizer steps of ``--accum`` micro-batches each, all but the last
under ``ddp.no_sync()``.  Each rank then writes ``NAME_rankR.truth.json``
(schema ``vramscope-truth/1`` of tests/workloads/truth/README.md, kind
``ddp``) with what the program itself knows: parameter, gradient (``p.grad``
storages, deduplicated: with the bucket view they are the buckets), bucket
and optimizer-state bytes with their data_ptr blocks, the settings, rank and
world size, ``memory_stats()``.  When the runner writes its exit snapshot the
truth file is renamed to ``<snapshot stem>.truth.json`` beside it and the
sidecar gets ``truth_file``.

The buckets are read from DDP itself: their sizes from the reducer's logging
data (``_get_ddp_logging_data()``: ``bucket_sizes`` at construction,
``rebuilt_bucket_sizes`` after the first step re-orders them), their
addresses from a communication hook (``--bucket-hook record``, default) that
notes ``bucket.buffer()`` and then does exactly what DDP's built-in
all-reduce does (divide by the world size in place, all-reduce in place), so
memory is the same as without it; ``--bucket-hook none`` keeps DDP's own.
Runs on the CPU with gloo too (``--device cpu``: no snapshot), and without
torchrun as a world of one.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "truth"))
from _shim import import_capture
from record_one import SCHEMA, SavedCollector, here, now_us, storages, summary

#: The GPT-2 shape: GPT-2 small's width and heads, fewer layers, a smaller vocabulary
#: (about 54 M parameters, 216 MB fp32: nine 25 MB buckets).
GPT2_CONFIG = dict(
    vocab_size=32000,
    n_layer=4,
    n_embd=768,
    n_head=12,
    n_positions=1024,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    bos_token_id=0,
    eos_token_id=0,
)
#: Keys of DDP's logging data that describe the buckets and the settings.
LOGGING_KEYS = (
    "bucket_sizes",
    "rebuilt_bucket_sizes",
    "rebuilt_per_bucket_param_indices",
    "bucket_cap_bytes",
    "has_rebuilt_buckets",
    "num_buckets_reduced",
    "gradient_as_bucket_view",
    "find_unused_parameters",
    "static_graph",
    "broadcast_buffers",
    "comm_hook",
    "backend_name",
    "world_size",
    "total_parameter_size_bytes",
    "num_parameter_tensors",
    "dtypes",
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("gpt2", "resnet"), default="gpt2")
    p.add_argument(
        "--bucket-view",
        choices=("on", "off"),
        default="off",
        help="gradient_as_bucket_view (DDP's default is off)",
    )
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--batch", type=int, help="micro-batch per rank (gpt2 4, resnet 32)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--find-unused", choices=("on", "off"), default="off")
    p.add_argument("--static-graph", choices=("on", "off"), default="off")
    p.add_argument(
        "--set-to-none",
        choices=("on", "off"),
        default="on",
        help="zero_grad(set_to_none=...) (PyTorch's default is on)",
    )
    p.add_argument(
        "--bucket-hook",
        choices=("record", "none"),
        default="record",
        help="record: a comm hook notes the bucket addresses (same memory)",
    )
    p.add_argument("--seq", type=int, default=256, help="gpt2 sequence length")
    p.add_argument("--layers", type=int, help="gpt2 layers (default 4)")
    p.add_argument("--image", type=int, default=224, help="resnet image size")
    p.add_argument("--timm-arch", default="resnet50", help="the timm model of --model resnet")
    p.add_argument("--name", help="recording name (default from the settings)")
    p.add_argument(
        "--out",
        help="directory for the truth file until it joins the exit snapshot "
        "(default: the runner's --out; ddp_truth without a recorder)",
    )
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = p.parse_args(argv)
    if args.accum < 1 or args.steps < 1:
        p.error("--accum and --steps must be at least 1")
    if args.batch is None:
        args.batch = 4 if args.model == "gpt2" else 32
    if args.name is None:
        args.name = f"ddp_{args.model}_view{args.bucket_view}_acc{args.accum}_b{args.batch}"
    return args


def build(args: argparse.Namespace, torch, dev):
    """(model, model name, config, make_batch, forward) for ``--model``."""
    if args.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = dict(GPT2_CONFIG)
        if args.layers:
            cfg["n_layer"] = args.layers
        model = GPT2LMHeadModel(GPT2Config(**cfg)).to(dev)
        vocab = cfg["vocab_size"]

        def make_batch(b: int) -> dict:
            return {"input_ids": torch.randint(0, vocab, (b, args.seq), device=dev)}

        def forward(m, batch: dict):
            return m(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

        return model, "transformers.GPT2LMHeadModel", cfg, make_batch, forward

    import timm

    cfg = {"arch": args.timm_arch, "num_classes": 100, "pretrained": False}
    model = timm.create_model(args.timm_arch, pretrained=False, num_classes=100).to(dev)

    def make_batch(b: int) -> dict:
        return {
            "images": torch.randn(b, 3, args.image, args.image, device=dev),
            "targets": torch.randint(0, 100, (b,), device=dev),
        }

    def forward(m, batch: dict):
        return torch.nn.functional.cross_entropy(m(batch["images"]), batch["targets"])

    return model, f"timm.{args.timm_arch}", cfg, make_batch, forward


def record_buckets_hook(state: dict, bucket):
    """A DDP comm hook: notes each bucket's flat buffer in ``state``, then all-reduces it
    as DDP's built-in hook does.

    The built-in divides the bucket by the world size and all-reduces it in place;
    this does the same on the same tensor (as torch's own ``allreduce_hook``), so the
    gradients, the bucket views and the memory are as without a hook.
    """
    import torch.distributed as dist

    buf = bucket.buffer()
    st = buf.untyped_storage()
    state[bucket.index()] = [st.data_ptr(), st.nbytes(), buf.numel()]
    buf.div_(dist.get_world_size())
    work = dist.all_reduce(buf, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def planned_buckets(dist, params, cap_bytes: int) -> list[int]:
    """Bucket sizes (bytes) computed from ``bucket_cap_mb`` and the parameter order, as
    DDP's reducer assigns them before its first rebuild (used only when DDP's logging
    data has no sizes)."""
    ps = [p for p in params if p.requires_grad]
    groups, _ = dist._compute_bucket_assignment_by_size(ps, [cap_bytes], [False] * len(ps))
    return [sum(ps[i].numel() * ps[i].element_size() for i in g) for g in groups]


def sizes(text) -> list[int]:
    """The logging data's ``"a, b, c"`` byte sizes as ints."""
    if isinstance(text, (list, tuple)):
        return [int(x) for x in text]
    return [int(x) for x in str(text).replace(",", " ").split()] if text else []


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    if "MASTER_ADDR" not in os.environ:  # plain `python ddp_buckets.py`: a world of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    capture = import_capture()
    rec = capture.active_recorder()  # the runner's, under `-m vramscope.capture`
    out = Path(args.out) if args.out else (rec.out if rec is not None else Path("ddp_truth"))
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.name}_rank{rank}"
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=rank, world_size=world, device_id=dev if cuda else None
    )
    torch.manual_seed(1234 + rank)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def stat(fn) -> int:
        return int(fn(dev)) if cuda else 0

    code_lines: dict = {}
    code_lines["build"] = here()
    model, model_name, cfg, make_batch, forward = build(args, torch, dev)
    view = args.bucket_view == "on"
    code_lines["ddp"] = here()
    ddp = DDP(
        model,
        device_ids=[local] if cuda else None,
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=view,
        find_unused_parameters=args.find_unused == "on",
        static_graph=args.static_graph == "on",
    )
    seen: dict[int, list[int]] | None = None  # bucket index -> [data_ptr, nbytes, numel]
    if args.bucket_hook == "record":
        seen = {}  # the hook's state
        ddp.register_comm_hook(seen, record_buckets_hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    set_to_none = args.set_to_none == "on"

    sync()
    peak_before = {
        "allocated": stat(torch.cuda.max_memory_allocated),
        "reserved": stat(torch.cuda.max_memory_reserved),
    }
    saved = SavedCollector(dev.type)
    iter_stats: list = []
    grads: dict[int, int] = {}
    grads_before_sync: dict[int, int] = {}
    last_saved: dict[int, int] = {}
    last_inputs: dict[int, int] = {}
    for step in range(args.steps):
        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        start = now_us()
        # zero_grad first, so that the last step's gradients are alive at the snapshot.
        code_lines.setdefault("zero_grad", here())
        opt.zero_grad(set_to_none=set_to_none)
        micro: list = []
        losses: list = []
        for m in range(args.accum):
            last = m == args.accum - 1
            code_lines.setdefault("batch", here())
            batch = make_batch(args.batch)
            if not last:
                code_lines.setdefault("no_sync", here())
            with contextlib.nullcontext() if last else ddp.no_sync():
                saved.current = {}
                with saved.hooks():
                    code_lines.setdefault("forward", here())
                    loss = forward(ddp, batch)
                if last:
                    # What .grad holds after the no_sync micro-batches, before the
                    # all-reduced one: accumulated outside the buckets or in them.
                    grads_before_sync = storages((p.grad for p in model.parameters()), cuda)
                code_lines.setdefault("backward", here())
                (loss / args.accum).backward()
            losses.append(float(loss.detach()))
            last_saved = {k: v for k, v in saved.current.items()}
            last_inputs = storages(batch.values(), cuda)
            del batch, loss
            sync()
            micro.append(
                {
                    "micro": m,
                    "no_sync": not last,
                    "memory_allocated_end": stat(torch.cuda.memory_allocated),
                    "max_memory_allocated": stat(torch.cuda.max_memory_allocated),
                }
            )
        grads = storages((p.grad for p in model.parameters()), cuda)
        code_lines.setdefault("optimizer_step", here())
        opt.step()
        sync()
        iter_stats.append(
            {
                "iter": step,
                "start_us": start,
                "end_us": now_us(),
                "max_memory_allocated": stat(torch.cuda.max_memory_allocated),
                "max_memory_reserved": stat(torch.cuda.max_memory_reserved),
                "memory_allocated_end": stat(torch.cuda.memory_allocated),
                "memory_reserved_end": stat(torch.cuda.memory_reserved),
                "loss": sum(losses) / len(losses),
                "batch_size": args.batch,
                "micro_batches": micro,
            }
        )
    gc.collect()
    sync()

    params = storages(model.parameters(), cuda)
    buffers = storages(model.buffers(), cuda)
    state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    opt_st = storages(state, cuda)
    logging = {}
    with contextlib.suppress(Exception):
        data = ddp._get_ddp_logging_data()
        logging = {k: data[k] for k in LOGGING_KEYS if k in data}
    built = sizes(logging.get("bucket_sizes"))
    # DDP refreshes its logging data only at sampled iterations: after a short run the
    # rebuilt sizes may be missing although the buckets were rebuilt; the hook saw them.
    rebuilt = sizes(logging.get("rebuilt_bucket_sizes"))
    bucket_blocks: dict[int, int] = {}
    if seen:
        bucket_blocks = {ptr: n for ptr, n, _ in (seen[i] for i in sorted(seen))}
        bucket_sizes = [seen[i][1] for i in sorted(seen)]
        size_source = "comm hook: bucket.buffer() storages of the last synchronised backward"
    elif rebuilt or built:
        key = "rebuilt_bucket_sizes" if rebuilt else "bucket_sizes"
        bucket_sizes = rebuilt or built
        size_source = f"DDP logging data ({key})"
    else:
        cap = int(logging.get("bucket_cap_bytes") or args.bucket_cap_mb * (1 << 20))
        bucket_sizes = planned_buckets(dist, model.parameters(), cap)
        size_source = "computed from bucket_cap_mb and the parameter order"
    buckets = summary(
        bucket_blocks,
        sizes=bucket_sizes,
        sizes_source=size_source,
        logging_bucket_sizes=built,
        logging_rebuilt_bucket_sizes=rebuilt,
    )
    if not bucket_blocks:
        buckets["bytes"] = sum(bucket_sizes)  # no addresses: the sizes are the figure
        buckets["count"] = len(bucket_sizes)
    grads_in_buckets = {p: n for p, n in grads.items() if p in bucket_blocks}
    activations = {p: n for p, n in last_saved.items() if p not in params}
    everything = {**params, **buffers, **grads, **bucket_blocks, **opt_st}
    n_params = sum(p.numel() for p in model.parameters())

    ms_end = torch.cuda.memory_stats(dev) if cuda else None
    # Only this rank's device: asking another one would create a CUDA context there.
    by_device = {str(local): ms_end} if cuda else {}
    workload = (
        f"DDP {model_name}, rank {rank}/{world}, gradient_as_bucket_view={view}, "
        f"bucket_cap_mb={args.bucket_cap_mb:g}, accumulation {args.accum} "
        f"(no_sync on {args.accum - 1}), batch {args.batch}, AdamW, {args.steps} steps"
    )
    truth: dict = {
        "schema": SCHEMA,
        "name": name,
        "kind": "ddp",
        "workload": workload,
        "model": model_name,
        "model_config": cfg,
        "parameter_count": n_params,
        "optimizer": "AdamW",
        "optimizer_kwargs": {"lr": 1e-4},
        "dtype": "float32",
        "autocast": None,
        "grad_checkpointing": False,
        "batch_size": args.batch,
        "seq_len": args.seq if args.model == "gpt2" else None,
        "image_size": args.image if args.model == "resnet" else None,
        "iterations": len(iter_stats),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "device": local if cuda else None,
        "gpu_total_memory": torch.cuda.mem_get_info(dev)[1] if cuda else None,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_limit_bytes": None,
        "memory_fraction": None,
        "rank": rank,
        "local_rank": local,
        "world_size": world,
        "backend": dist.get_backend(),
        "ddp": {
            "gradient_as_bucket_view": view,
            "bucket_cap_mb": args.bucket_cap_mb,
            "find_unused_parameters": args.find_unused == "on",
            "static_graph": args.static_graph == "on",
            "accumulation": args.accum,
            "no_sync_micro_batches": args.accum - 1,
            "zero_grad_set_to_none": set_to_none,
            "bucket_hook": args.bucket_hook,
            "logging_data": logging,
        },
        "code_lines": code_lines,
        "parameters": summary(params),
        "buffers": summary(buffers),
        "gradients": summary(
            grads,
            in_buckets_bytes=sum(grads_in_buckets.values()),
            outside_buckets_bytes=sum(n for p, n in grads.items() if p not in bucket_blocks),
        ),
        "gradients_before_sync": summary(grads_before_sync),
        "ddp_buckets": buckets,
        "optimizer_state": summary(
            opt_st, cpu_tensors=sum(1 for v in state if v.device.type == "cpu") if cuda else 0
        ),
        "activations": summary(activations),
        "inputs": summary(last_inputs),
        # Parameters, buffers, gradients, buckets and optimizer state with shared
        # storages counted once (with the bucket view the gradients are the buckets).
        "model_state_bytes": sum(everything.values()),
        "iterations_stats": iter_stats,
        "peaks_reset_per_iteration": True,
        "peak_before_loop": peak_before,
        "overall_peak_allocated": max(
            [peak_before["allocated"]] + [s["max_memory_allocated"] for s in iter_stats]
        ),
        "overall_peak_reserved": max(
            [peak_before["reserved"]] + [s["max_memory_reserved"] for s in iter_stats]
        ),
        "memory_stats_end": ms_end,
        "memory_stats_by_device": by_device,
        "snapshot_unix_us": now_us(),
        "snapshot_file": None,
    }
    path = out / f"{name}.truth.json"
    path.write_text(json.dumps(truth, indent=1, default=str))
    if rec is not None and rec.active:
        atexit.register(_pair_with_snapshot, rec, path, capture)
    mib = 1 << 20
    print(
        f"ddp_buckets: {name} world={world} params={truth['parameters']['bytes'] / mib:.1f}MiB "
        f"grads={truth['gradients']['bytes'] / mib:.1f}MiB "
        f"buckets={buckets['bytes'] / mib:.1f}MiB({buckets['count']}, {size_source}) "
        f"opt={truth['optimizer_state']['bytes'] / mib:.1f}MiB "
        f"peak={truth['overall_peak_allocated'] / mib:.1f}MiB",
        flush=True,
    )
    dist.barrier()
    # Keep the model, DDP (its buckets), the optimizer and the last gradients alive
    # until the runner's exit snapshot: runpy drops the script's globals before it.
    keep = types.ModuleType("_ddp_buckets_state")
    keep.model, keep.ddp, keep.opt = model, ddp, opt  # type: ignore[attr-defined]
    sys.modules["_ddp_buckets_state"] = keep
    dist.destroy_process_group()
    return 0


def _pair_with_snapshot(rec, truth_path: Path, capture) -> None:
    """After the runner's exit snapshot: the truth file becomes ``<stem>.truth.json``
    beside it, with the snapshot's name and memory_stats; the sidecar names it."""
    exits = [p for p in rec.paths if "_exit_" in p.name and p.exists()]
    if not exits or not truth_path.exists():
        return
    snap = exits[-1]
    side_path = capture.files.sidecar_path(snap)
    truth = json.loads(truth_path.read_text())
    target = snap.with_name(snap.stem + ".truth.json")
    truth["snapshot_file"] = snap.name
    with contextlib.suppress(Exception):
        side = json.loads(side_path.read_text())
        truth["memory_stats_at_snapshot"] = side.get("memory_stats")
        capture.files.update_sidecar(side_path, truth_file=target.name, workload=truth["workload"])
    target.write_text(json.dumps(truth, indent=1, default=str))
    truth_path.unlink()
    print(f"ddp_buckets: truth {target.name}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
