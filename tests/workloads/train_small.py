"""A small real training loop: a transformer encoder trained with AdamW.

Used by the capture tests (recorded under ``python -m vramscope.capture``),
the signal test (``--ready-file`` / ``--until-file``), the torchrun test
(``--oom-on-rank``) and ``tests/capture/bench_capture.py`` (which imports
:func:`build` and :func:`make_step`).  Runs on the GPU of ``LOCAL_RANK``, or
on the CPU where there is none (then small and quick, for CPU-only tests).

    python tests/workloads/train_small.py --steps 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable


def build(width: int = 256, layers: int = 2, device: str = "cpu"):
    """Model and optimizer: ``layers`` encoder layers of ``width``, AdamW."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(
                d_model=width,
                nhead=max(1, width // 64),
                dim_feedforward=4 * width,
                batch_first=True,
                dropout=0.0,
            )
            self.encoder = nn.TransformerEncoder(
                layer, num_layers=layers, enable_nested_tensor=False
            )
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            return self.head(self.encoder(x)).mean()

    model = Net().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt


def make_step(
    model, opt, batch: int = 16, seq: int = 128, width: int = 256, device: str = "cpu"
) -> Callable[[], float]:
    """One training step on fresh random data; returns the loss."""
    import torch

    def step() -> float:
        x = torch.randn(batch, seq, width, device=device)
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def pick_device() -> str:
    import torch

    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return f"cuda:{index}"
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--ready-file", help="touched after the first step")
    p.add_argument("--until-file", help="train until this file exists (at most --max-seconds)")
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument(
        "--oom-on-rank",
        type=int,
        default=None,
        help="on this RANK, after the steps, request more memory than the GPU has",
    )
    args = p.parse_args(argv)

    import torch

    torch.manual_seed(0)
    device = pick_device()
    model, opt = build(args.width, args.layers, device)
    step = make_step(model, opt, args.batch, args.seq, args.width, device)
    rank = int(os.environ.get("RANK", "0"))
    deadline = time.monotonic() + args.max_seconds
    i = 0
    while True:
        loss = step()
        i += 1
        print(f"step {i} loss {loss:.4f} rank {rank} device {device}", flush=True)
        if i == 1 and args.ready_file:
            open(args.ready_file, "w").close()
        if args.until_file:
            if os.path.exists(args.until_file):
                break
            if time.monotonic() > deadline:
                print("gave up waiting for --until-file", file=sys.stderr)
                return 3
        elif i >= args.steps:
            break
    if args.oom_on_rank is not None and rank == args.oom_on_rank and device != "cpu":
        total = torch.cuda.get_device_properties(device).total_memory
        print(f"rank {rank}: requesting {2 * total} bytes to provoke an OOM", flush=True)
        torch.empty(2 * total, dtype=torch.uint8, device=device)  # raises OutOfMemoryError
    if device != "cpu":
        torch.cuda.synchronize()
    print(f"done {i} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
