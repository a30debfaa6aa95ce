"""The seeded workload behind ``tests/data/whatif_h200/``: one request stream,
recorded under several allocator settings.

A GPT-2-like model (6 layers, n_embd 768; ``transformers`` when installed,
else an equivalent self-made decoder) trained for 6 AdamW steps on random
batches of 2-8 sequences of 128-1024 tokens.  Every draw is seeded, so each
process makes the same allocation requests in the same order whatever
``PYTORCH_CUDA_ALLOC_CONF`` says; only the allocator's answers differ.  That
is what the what-if simulator predicts, so each recording checks a
prediction made from another.

Run once per setting, each in a fresh process (the allocator reads its
settings at CUDA start)::

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
        python tests/workloads/whatif_workload.py --out DIR --name whatif_expandable \\
        --memory-limit 10000000000

writes ``DIR/NAME.pickle`` (the allocator snapshot, via vramscope.capture)
and ``DIR/NAME.json`` (its sidecar: memory_stats at that instant, plus
``memory_limit_bytes``: the per-process limit the allocator enforced, and an
``oom`` note when a step ran out of memory).
"""

from __future__ import annotations

import argparse
import os
import random
import sys


def build_model(torch, vocab: int, layers: int, width: int, heads: int, positions: int):
    """GPT-2 from transformers, or the same shape self-made."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(
            vocab_size=vocab,
            n_layer=layers,
            n_embd=width,
            n_head=heads,
            n_positions=positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        model = GPT2LMHeadModel(cfg)

        def loss_of(ids):
            return model(input_ids=ids, labels=ids).loss

        return model, loss_of, "transformers.GPT2LMHeadModel"
    except ImportError:
        pass
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.mlp = nn.Sequential(
                nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
            )

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(positions, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=ids.device), 1)
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.ln(x))

    model = Gpt()

    def loss_of(ids):
        logits = model(ids)
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    return model, loss_of, "self-made GPT-2"


# name -> (PYTORCH_CUDA_ALLOC_CONF, memory limit in bytes)
SETTINGS = {
    "whatif_default": ("", 10_000_000_000),
    "whatif_expandable": ("expandable_segments:True", 10_000_000_000),
    "whatif_max_split_64": ("max_split_size_mb:64", 10_000_000_000),
    "whatif_roundup_4": ("roundup_power2_divisions:4", 10_000_000_000),
    "whatif_roundup_intervals": (
        "roundup_power2_divisions:[64:2,256:4,1024:8,>:8]",
        10_000_000_000,
    ),
    "whatif_gc_06": ("garbage_collection_threshold:0.6", 10_000_000_000),
    # Tight limits: cached segments released and retried, maybe an OOM.
    "whatif_default_tight": ("", 6_500_000_000),
    "whatif_expandable_tight": ("expandable_segments:True", 5_550_000_000),
}


def record_all(out: str) -> int:
    """Each setting of :data:`SETTINGS` in its own process (settings are read at CUDA start)."""
    import subprocess

    failed = 0
    for name, (conf, limit) in SETTINGS.items():
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--out",
            out,
            "--name",
            name,
            "--memory-limit",
            str(limit),
        ]
        failed += subprocess.run(cmd, env=env).returncode != 0
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for NAME.pickle and NAME.json")
    ap.add_argument("--name", help="snapshot name (one run under the current settings)")
    ap.add_argument(
        "--all",
        action="store_true",
        help="record every setting of SETTINGS, each in a fresh process",
    )
    ap.add_argument(
        "--memory-limit",
        type=int,
        default=10_000_000_000,
        help="per-process limit in bytes (set_per_process_memory_fraction)",
    )
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    if args.all:
        return record_all(args.out)
    if not args.name:
        ap.error("--name or --all is needed")

    import torch

    from vramscope.capture import files, record

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    total = torch.cuda.mem_get_info(dev)[1]
    fraction = min(1.0, args.memory_limit / total)
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    # What the allocator computes from the fraction (setMemoryFraction).
    allowed = int(fraction * total)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.name}.pickle")
    oom = None
    with record(
        out=args.out, max_entries=1_000_000, oom=False, dump_on_exit=False, dump_signal=None
    ) as rec:
        model, loss_of, kind = build_model(torch, 50257, 6, 768, 12, 1024)
        model = model.to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator(device=dev)
        gen.manual_seed(args.seed)
        shapes = []
        for step in range(args.steps):
            b, t = rng.randint(2, 8), rng.randint(128, 1024)
            shapes.append([b, t])
            try:
                ids = torch.randint(0, 50257, (b, t), device=dev, generator=gen)
                loss = loss_of(ids)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del ids, loss
            except torch.OutOfMemoryError as exc:  # recorded, then the run stops
                oom = {"step": step, "message": str(exc).splitlines()[0]}
                break
        torch.cuda.synchronize()
        written = rec.dump(path)
    if written is None:
        print("whatif_workload: no snapshot written", file=sys.stderr)
        return 1
    files.update_sidecar(
        files.sidecar_path(written),
        memory_limit_bytes=allowed,
        memory_fraction=fraction,
        gpu_total_memory=total,
        workload=f"{kind} 6 layers, {args.steps} AdamW steps of "
        f"random batch 2-8 x 128-1024 tokens (seed {args.seed}); shapes {shapes}",
        oom=oom,
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    )
    print(
        f"{args.name}: wrote {written}; oom={oom}; "
        f"reserved peak {torch.cuda.memory_stats(dev)['reserved_bytes.all.peak']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
