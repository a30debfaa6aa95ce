"""A checkpointed GPT-2 training, with and without recording: does the recording change the run?

    python3 tests/workloads/checkpoint_trainer.py                     # transformers Trainer
    python3 -m vramscope.capture --out DIR tests/workloads/checkpoint_trainer.py
    python3 tests/workloads/checkpoint_trainer.py --plain --reentrant  # a plain loop

GPT-2 built from its config (no downloads), bf16, fused AdamW, gradient checkpointing
(non-reentrant unless ``--reentrant``), a few steps on fixed random tokens, deterministic
kernels (eager attention, ``torch.use_deterministic_algorithms``), so that two runs give
the same losses to the bit.  The last line is ``RESULT {json}``: the losses of each step,
a checksum of the trained weights, or the error the run died of (it is re-raised, so the
exit status is 1 as it would be without this line).

``--self-record CONTEXT:STACKS`` makes the program call
``torch.cuda.memory._record_memory_history`` itself (CONTEXT ``none`` for no stacks);
the other options switch single ingredients off to find which one matters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import traceback

# Deterministic cuBLAS needs this before the first handle is created.
if "--nondeterministic" not in sys.argv:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def build_model(torch, args):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=args.layers,
        n_embd=args.hidden,
        n_head=args.heads,
        vocab_size=args.vocab,
        n_positions=max(args.seq, 1024),
        resid_pdrop=args.dropout,
        embd_pdrop=args.dropout,
        attn_pdrop=args.dropout,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    # Eager (matmul) attention has a deterministic backward; sdpa is transformers' default.
    config._attn_implementation = args.attn
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


def dataset(torch, args):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch * args.steps, args.seq), generator=g)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def run_trainer(torch, args, model, data):
    from transformers import Trainer, TrainingArguments

    losses: list[float] = []

    class Recording(Trainer):
        def training_step(self, *a, **k):
            loss = super().training_step(*a, **k)
            losses.append(float(loss))
            return loss

    out = tempfile.mkdtemp(prefix="ckpt-trainer-")
    targs = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        learning_rate=1e-3,
        bf16=not args.no_bf16,
        optim="adamw_torch_fused",
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": bool(args.reentrant)},
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        data_seed=0,
        dataloader_num_workers=0,
        dataloader_pin_memory=not args.no_pin,
        disable_tqdm=True,
        lr_scheduler_type="constant",
    )
    Recording(model=model, args=targs, train_dataset=data).train()
    return losses


def run_plain(torch, args, model, data):
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(dev).train()
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": bool(args.reentrant)}
    )
    if args.reentrant:
        model.enable_input_require_grads()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    losses = []
    for step in range(args.steps):
        rows = data[step * args.batch : (step + 1) * args.batch]
        ids = torch.stack([r["input_ids"] for r in rows]).to(dev)
        ctx = (
            contextlib.nullcontext()
            if args.no_bf16
            else torch.autocast(dev.type, dtype=torch.bfloat16)
        )
        with ctx:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    return losses


class RaiseLog:
    """Python exceptions raised outside the main thread (autograd's threads), via sys.monitoring."""

    def __init__(self, sys_mod) -> None:
        self.events: list[str] = []
        self.mon = getattr(sys_mod, "monitoring", None)
        if self.mon is None:
            return
        tool = self.mon.OPTIMIZER_ID
        self.mon.use_tool_id(tool, "ckpt-diag")
        ev = self.mon.events
        main = threading.main_thread().ident

        def on(kind):
            def cb(code, offset, exc):
                if threading.get_ident() != main and len(self.events) < 200:
                    self.events.append(
                        f"{kind} {type(exc).__name__} in {code.co_name} "
                        f"({os.path.basename(code.co_filename)}:"
                        f"{code.co_firstlineno}) {str(exc)[:120]!r}"
                    )

            return cb

        for kind in ("RAISE", "RERAISE", "EXCEPTION_HANDLED", "PY_UNWIND"):
            self.mon.register_callback(tool, getattr(ev, kind), on(kind))
        self.mon.set_events(tool, ev.RAISE | ev.RERAISE | ev.EXCEPTION_HANDLED | ev.PY_UNWIND)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plain", action="store_true", help="a plain loop instead of the Trainer")
    p.add_argument("--reentrant", action="store_true")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--attn", choices=("eager", "sdpa"), default="eager")
    p.add_argument(
        "--nondeterministic",
        action="store_true",
        help="no torch.use_deterministic_algorithms (two runs may then differ)",
    )
    p.add_argument("--no-bf16", action="store_true")
    p.add_argument("--no-pin", action="store_true")
    p.add_argument(
        "--no-early-stop",
        action="store_true",
        help="torch.utils.checkpoint.set_checkpoint_early_stop(False)",
    )
    p.add_argument(
        "--self-record",
        default=None,
        metavar="CONTEXT:STACKS",
        help="call _record_memory_history itself, e.g. all:python, alloc:all",
    )
    p.add_argument("--enabled", default="all", help="_record_memory_history's enabled")
    p.add_argument(
        "--clear-callbacks",
        action="store_true",
        help="remove RecordFunction callbacks after recording starts",
    )
    p.add_argument(
        "--monitor",
        action="store_true",
        help="log Python exceptions raised in other threads (sys.monitoring)",
    )
    args = p.parse_args(argv)

    import torch

    if not args.nondeterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    log = RaiseLog(sys) if args.monitor else None
    if args.self_record:
        context, _, stacks = args.self_record.partition(":")
        torch.cuda.memory._record_memory_history(
            enabled=args.enabled,
            context=None if context == "none" else context,
            stacks=stacks or "python",
            max_entries=100_000,
        )
    if args.clear_callbacks:
        torch._C._clear_callbacks()
    model = build_model(torch, args)
    data = dataset(torch, args)
    result: dict = {"trainer": not args.plain, "reentrant": args.reentrant, "history_enabled": None}
    early = (
        torch.utils.checkpoint.set_checkpoint_early_stop(False)
        if args.no_early_stop
        else contextlib.nullcontext()
    )
    try:
        with early:
            losses = (run_plain if args.plain else run_trainer)(torch, args, model, data)
        result["losses"] = losses
        result["weights_sum"] = float(sum(p.detach().double().sum() for p in model.parameters()))
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:600]
        result["context"] = repr(exc.__context__)[:300] if exc.__context__ else None
        result["traceback_tail"] = traceback.format_exc()[-1500:]
        raise
    finally:
        if torch.cuda.is_initialized():
            result["history_enabled"] = bool(torch._C._cuda_isHistoryEnabled())
        if log is not None:
            result["raised_in_other_threads"] = log.events
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
