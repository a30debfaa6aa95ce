"""A small DDP training run for the rank overview: one rank is the outlier.

Two (or more) processes train a small MLP with DistributedDataParallel (NCCL
on GPUs, gloo on the CPU) for a few steps; rank ``--outlier-rank`` also keeps
an extra ``--extra-gib`` GiB buffer alive to the end, so its reserved,
allocated and peak memory stand out.  ``--oom-rank N`` makes rank N attempt
an impossible allocation once (caught, training goes on), so the capture
module writes an OOM snapshot for it beside the exit ones.

Record it (one snapshot per rank when each process ends)::

    torchrun --standalone --nproc-per-node 2 -m vramscope.capture --out DIR \\
        tests/workloads/ddp_train.py
    vramscope summary DIR          # one line per rank, the outlier flagged

Runs without torchrun too (a world of one) and without CUDA (gloo, CPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import types


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument(
        "--outlier-rank", type=int, default=1, help="the rank that keeps an extra buffer (-1: none)"
    )
    p.add_argument("--extra-gib", type=float, default=1.0, help="size of that buffer in GiB")
    p.add_argument(
        "--oom-rank",
        type=int,
        default=-1,
        help="the rank that hits (and survives) one CUDA OOM (-1: none)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if "MASTER_ADDR" not in os.environ:  # plain `python ddp_train.py`: a world of one
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.width, args.width), nn.GELU()]
        model = nn.Sequential(*layers, nn.Linear(args.width, 1)).to(device)
        ddp = DDP(model, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

        extra = None
        if rank == args.outlier_rank and args.extra_gib > 0:
            # The outlier: a buffer no other rank holds (e.g. rank-0-only eval data).
            extra = torch.empty(int(args.extra_gib * (1 << 30)), dtype=torch.uint8, device=device)
            extra.fill_(1)

        for step in range(args.steps):
            x = torch.randn(args.batch, args.width, device=device)
            loss = ddp(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step == 1 and rank == args.oom_rank and cuda:
                try:  # far more than any GPU has: the allocator raises, capture dumps
                    torch.empty(1 << 50, dtype=torch.uint8, device=device)
                except torch.cuda.OutOfMemoryError:
                    print(f"rank {rank}: OOM caught, training goes on", file=sys.stderr)
            print(f"rank {rank}/{world} step {step}: loss {loss.item():.4f}", flush=True)

        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if extra is not None:
            print(f"rank {rank}: holding an extra {extra.numel() / (1 << 30):.2f} GiB", flush=True)
        # Keep the model, optimizer state and the extra buffer alive until the
        # process exits, so the capture module's exit snapshot shows them: runpy
        # drops the script's own globals before the runner writes that snapshot.
        keep = types.ModuleType("_ddp_train_state")
        keep.model, keep.ddp, keep.opt, keep.extra = model, ddp, opt, extra
        sys.modules["_ddp_train_state"] = keep
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
