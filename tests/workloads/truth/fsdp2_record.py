"""Record FSDP2 (``fully_shard``, DTensor) training, one snapshot and truth per rank.

    torchrun --standalone --nproc-per-node 2 tests/workloads/truth/fsdp2_record.py \\
        --out DIR --name fsdp2_decoder --model decoder --init meta --mp bf16 --optimizer AdamW

Each rank records its own device from the first CUDA allocation on and writes, beside
``NAME_rank{R}.pickle.xz`` and its sidecar, ``NAME_rank{R}.truth.json`` with what the
program itself knows: its local parameter shards (the storages behind each DTensor's
``to_local()``), its optimizer state (the same for the state's DTensors), the sharded
gradients of the last iteration before ``zero_grad``, and the unsharded (all-gathered)
parameter storages seen by a forward pre-hook inside each sharded block.  Schema as
README.md (``vramscope-truth/1``), kind ``fsdp``.

Two ways of building the model, as programs do: ``--init meta`` (torchtitan: on the meta
device, shard, ``to_empty`` on the GPU, then initialise) and ``--init cuda`` (build on the
GPU, then shard).  Runs without torchrun (a world of one) and on the CPU with gloo
(``--device cpu``: no snapshot, to test the script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shim import import_capture
from record_one import SCHEMA, dump_xz, here, now_us, storages, summary


def build_decoder(torch, vocab: int, dim: int, layers: int, heads: int, kv_heads: int, ffn: int):
    """A decoder of pre-norm blocks with grouped-query attention and a SwiGLU MLP."""
    nn = torch.nn
    F = torch.nn.functional

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hd = dim // heads
            self.q = nn.Linear(dim, dim, bias=False)
            self.kv = nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
            self.o = nn.Linear(dim, dim, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, heads, self.hd).transpose(1, 2)
            k, v = self.kv(x).view(b, t, 2, kv_heads, self.hd).unbind(2)
            k = k.transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
            v = v.transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, t, dim))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_up = nn.Linear(dim, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, dim, bias=False)

        def forward(self, x):
            g, u = self.gate_up(x).chunk(2, -1)
            return self.down(F.silu(g) * u)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1 = nn.RMSNorm(dim)
            self.attn = Attention()
            self.n2 = nn.RMSNorm(dim)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

        def init_weights(self) -> None:
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                elif isinstance(m, nn.RMSNorm):
                    nn.init.ones_(m.weight)

        def forward(self, ids):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    model = Decoder()
    return model, list(model.layers), model.init_weights


def build_gpt2(torch, device):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = dict(
        vocab_size=24000,
        n_layer=8,
        n_embd=768,
        n_head=12,
        n_positions=1024,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.device(device):
        model = GPT2LMHeadModel(GPT2Config(**cfg))
    return model, list(model.transformer.h), None, cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--model", choices=("decoder", "gpt2"), default="decoder")
    ap.add_argument("--init", choices=("meta", "cuda"), default="meta")
    ap.add_argument("--mp", choices=("bf16", "none"), default="bf16")
    ap.add_argument("--optimizer", default="AdamW")
    ap.add_argument("--reshard-after-forward", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--fsdp1",
        action="store_true",
        help="FSDP1 (FullyShardedDataParallel, FlatParameter) instead of fully_shard",
    )
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda"
    if "MASTER_ADDR" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        torch.cuda.init()
    else:
        dev = torch.device("cpu")
    torch.manual_seed(1234)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.name}_rank{rank}"

    capture = rec = None
    if cuda:
        capture = import_capture()
        rec = capture.record(
            out=str(out),
            max_entries=1_000_000,
            stacks="python",
            context="all",
            oom=False,
            dump_on_exit=False,
            dump_signal=None,
        )
        rec.start()
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=rank, world_size=world, device_id=dev if cuda else None
    )

    code_lines: dict = {}
    if args.model == "decoder":
        cfg = dict(vocab=32000, dim=1280, layers=10, heads=10, kv_heads=2, ffn=3584)
        build_on = "meta" if args.init == "meta" else dev
        with torch.device(build_on):
            model, blocks, init = build_decoder(torch, **cfg)
        model_name = "decoder (GQA, SwiGLU, RMSNorm)"
    else:
        model, blocks, init, cfg = build_gpt2(torch, "meta" if args.init == "meta" else dev)
        model_name = "transformers.GPT2LMHeadModel"
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if args.mp == "bf16"
        else MixedPrecisionPolicy()
    )
    if args.fsdp1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        block_types = {type(b) for b in blocks}
        code_lines["fully_shard"] = here(2)
        model = FSDP(
            model,
            auto_wrap_policy=ModuleWrapPolicy(block_types),
            use_orig_params=True,
            device_id=dev if cuda else None,
            mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if args.mp == "bf16"
            else None,
        )
        blocks = [m for m in model.modules() if type(m) in block_types]
    else:
        code_lines["fully_shard"] = here(2)
        for block in blocks:
            fully_shard(block, mp_policy=mp, reshard_after_forward=bool(args.reshard_after_forward))
        fully_shard(model, mp_policy=mp)
    if args.init == "meta" and not args.fsdp1:
        code_lines["to_empty"] = here()
        model.to_empty(device=dev)
        if init is not None:
            init()
        else:
            model.init_weights()
    opt = getattr(torch.optim, args.optimizer)(
        model.parameters(), lr=1e-4, **({"momentum": 0.9} if args.optimizer == "SGD" else {})
    )

    # The unsharded parameters: a hook inside each sharded block runs after FSDP's
    # pre-forward all-gather, when the block's parameters are the gathered tensors.
    gathered: dict[int, int] = {}

    def seen_gathered(module, inputs):
        gathered.update(storages(module.parameters(recurse=True), cuda_only=cuda))

    hooks = [
        child.register_forward_pre_hook(seen_gathered) for b in blocks for child in b.children()
    ]

    def local_tensors(tensors):
        return [t.to_local() if hasattr(t, "to_local") else t for t in tensors]

    vocab = cfg.get("vocab", cfg.get("vocab_size"))
    iter_stats, grads = [], {}
    for it in range(args.iters):
        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        start = now_us()
        code_lines.setdefault("batch", here())
        ids = torch.randint(0, vocab, (args.batch, args.seq), device=dev)
        code_lines.setdefault("forward", here(2))
        if args.model == "decoder":
            logits = model(ids)
        else:
            logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        del logits
        code_lines.setdefault("backward", here())
        loss.backward()
        grads = storages(local_tensors(p.grad for p in model.parameters()), cuda_only=cuda)
        code_lines.setdefault("optimizer_step", here())
        opt.step()
        code_lines.setdefault("zero_grad", here())
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()
        del loss, ids
        if cuda:
            torch.cuda.synchronize(dev)
        iter_stats.append(
            {
                "iter": it,
                "start_us": start,
                "end_us": now_us(),
                "loss": loss_value,
                "max_memory_allocated": torch.cuda.max_memory_allocated(dev) if cuda else 0,
                "max_memory_reserved": torch.cuda.max_memory_reserved(dev) if cuda else 0,
                "memory_allocated_end": torch.cuda.memory_allocated(dev) if cuda else 0,
                "memory_reserved_end": torch.cuda.memory_reserved(dev) if cuda else 0,
                "batch_size": args.batch,
                "seq_len": args.seq,
            }
        )
    for h in hooks:
        h.remove()
    params = storages(local_tensors(model.parameters()), cuda_only=cuda)
    state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    opt_st = storages(local_tensors(state), cuda_only=cuda)
    gathered = {p: n for p, n in gathered.items() if p not in params}
    n_params = sum(p.numel() for p in model.parameters())

    kind = "FSDP1 (FlatParameter)" if args.fsdp1 else "FSDP2 (fully_shard)"
    sidecar: dict = {}
    if rec is not None:
        sidecar = (
            dump_xz(
                rec,
                capture,
                out,
                name,
                workload=f"{kind} {model_name}, rank {rank}",
                truth_file=f"{name}.truth.json",
            )
            or {}
        )
    truth = {
        "schema": SCHEMA,
        "name": name,
        "kind": "fsdp",
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "device": local,
        "rank": rank,
        "world_size": world,
        "workload": f"{kind} sharded per block + root, {model_name}, {args.optimizer}, "
        f"mixed precision {args.mp}, init on {args.init}, "
        f"reshard_after_forward={bool(args.reshard_after_forward)}",
        "model": model_name,
        "model_config": cfg,
        "parameter_count": n_params,
        "optimizer": args.optimizer,
        "mixed_precision": args.mp,
        "init": args.init,
        "reshard_after_forward": bool(args.reshard_after_forward),
        "batch_size": args.batch,
        "seq_len": args.seq,
        "iterations": len(iter_stats),
        "code_lines": code_lines,
        "parameters": summary(params),
        "gradients": summary(grads),
        "optimizer_state": summary(opt_st),
        "gathered_parameters": summary(gathered),
        "iterations_stats": iter_stats,
        "peaks_reset_per_iteration": True,
        "memory_stats_end": sidecar.get("memory_stats"),
        "snapshot_unix_us": now_us(),
        "unix_time": time.time(),
    }
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1, default=str))
    print(
        f"{name}: params={truth['parameters']['bytes']} opt={truth['optimizer_state']['bytes']} "
        f"grads={truth['gradients']['bytes']} gathered={truth['gathered_parameters']['bytes']} "
        f"peak={max(s['max_memory_reserved'] for s in iter_stats)}",
        flush=True,
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
