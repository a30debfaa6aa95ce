"""One zoo recording in this process: a real library's model, trained a few steps by one
of several loops, recorded through ``vramscope.capture``; zoo.py runs each in a fresh one.

    python tests/workloads/zoo_one.py --out DIR --spec '{"name": ..., "model": "gpt2", ...}'
    python tests/workloads/zoo_one.py --out DIR --device cpu --spec '{...}'   # smoke test

Writes ``NAME.pickle.xz``, its sidecar ``NAME.json`` and ``NAME.truth.json`` in the truth
kit's format (tests/workloads/truth/README.md, schema ``vramscope-truth/1``), plus the zoo's
keys: ``family``, ``program``, ``settings`` (the spec), ``loop``,
``parameters_trainable`` / ``parameters_frozen``, ``pair`` (remedy pairs).  Peaks are
whole-run peaks (never reset): the sidecar's ``reserved_bytes.all.peak`` is the run's peak.

Spec keys: ``model`` (see :func:`build`), ``batch``, ``seq`` (language models), ``iters``,
``dtype`` (parameter dtype: float32 | bfloat16), ``amp`` (None | bf16 | fp16: fp16 adds a
GradScaler), ``optimizer`` (adamw | adamw_fused | sgd | sgd_momentum | adafactor),
``ckpt`` (gradient checkpointing), ``compile`` (None | default | reduce-overhead |
max-autotune-no-cudagraphs), ``loop`` (plain | trainer | accelerate | lightning), ``peft``
(None | lora | ia3), ``attn`` (sdpa | eager), ``set_to_none`` (default true), ``validate``
(None | grad | no_grad: a validation forward after each step), ``leak`` (keep
``logits.detach().clone()`` every iteration), ``accum`` (gradient accumulation, Trainer),
``train_only`` (names: only parameters whose name holds one are trained, in float32; the
rest frozen at ``dtype`` - partial fine-tuning of a half-precision model, without peft).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "truth"))

from _shim import import_capture  # noqa: E402
from record_one import (  # noqa: E402
    SCHEMA,
    SavedCollector,
    _stats_by_device,
    dump_xz,
    here,
    now_us,
    optimizer_state_tensors,
    storages,
    summary,
)

VOCAB = 16000
NUM_CLASSES = 100

#: Small configurations (tens of millions of parameters at most), built without downloads.
HF_CONFIGS: dict[str, tuple[str, str, dict]] = {
    # name: (config class, model class, config)
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(
            vocab_size=VOCAB,
            n_layer=6,
            n_embd=384,
            n_head=6,
            n_positions=1024,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
        ),
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=512,
            intermediate_size=1376,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            max_position_embeddings=2048,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            tie_word_embeddings=False,
        ),
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=384,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=6,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
        ),
    ),
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=384,
            intermediate_size=1536,
            num_hidden_layers=4,
            num_attention_heads=6,
            max_position_embeddings=2048,
            hidden_dropout=0.0,
            attention_dropout=0.0,
        ),
    ),
    "bert": (
        "BertConfig",
        "BertForMaskedLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=6,
            intermediate_size=1536,
            max_position_embeddings=1024,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
    ),
    "roberta": (
        "RobertaConfig",
        "RobertaForSequenceClassification",
        dict(
            vocab_size=VOCAB,
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=6,
            intermediate_size=1536,
            max_position_embeddings=1030,
            num_labels=4,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=1,
        ),
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertForMaskedLM",
        dict(
            vocab_size=VOCAB,
            dim=384,
            n_layers=6,
            n_heads=6,
            hidden_dim=1536,
            max_position_embeddings=1024,
            dropout=0.0,
            attention_dropout=0.0,
        ),
    ),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        dict(
            vocab_size=VOCAB,
            d_model=384,
            d_kv=64,
            d_ff=1536,
            num_layers=4,
            num_decoder_layers=4,
            num_heads=6,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        ),
    ),
    "bart": (
        "BartConfig",
        "BartForConditionalGeneration",
        dict(
            vocab_size=VOCAB,
            d_model=384,
            encoder_layers=3,
            decoder_layers=3,
            encoder_attention_heads=6,
            decoder_attention_heads=6,
            encoder_ffn_dim=1536,
            decoder_ffn_dim=1536,
            max_position_embeddings=1024,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=2,
        ),
    ),
}
#: Which kind of batch each Hugging Face model takes.
HF_TASK = {
    "gpt2": "causal",
    "llama": "causal",
    "qwen2": "causal",
    "gpt_neox": "causal",
    "bert": "mlm",
    "distilbert": "mlm",
    "roberta": "cls",
    "t5": "seq2seq",
    "bart": "seq2seq",
}
#: LoRA target modules per model.
LORA_TARGETS = {
    "gpt2": ["c_attn", "c_proj"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen2": ["q_proj", "v_proj"],
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "distilbert": ["q_lin", "v_lin"],
    "t5": ["q", "v"],
    "bart": ["q_proj", "v_proj"],
    "timm:vit_tiny_patch16_224": ["qkv"],
    "timm:vit_small_patch16_224": ["qkv"],
}


class Built:
    """A model on its device, how to make one batch, and the loss of a batch."""

    def __init__(self, model, make_batch, loss_of, name: str, config: dict, task: str):
        self.model = model
        self.make_batch = make_batch  # (b, t, device) -> dict of tensors
        self.loss_of = loss_of  # (model, batch) -> (loss, logits)
        self.name = name
        self.config = config
        self.task = task


def build(spec: dict, dev, torch) -> Built:
    """The model named ``spec["model"]``: a Hugging Face name of :data:`HF_CONFIGS`,
    ``timm:ARCH``, ``tv:ARCH`` (torchvision) or ``encoder`` (``nn.TransformerEncoder``)."""
    key = spec["model"]
    dtype = getattr(torch, spec.get("dtype", "float32"))
    image = spec.get("image", 224)
    if key in HF_CONFIGS:
        import transformers

        cfg_cls, model_cls, cfg = HF_CONFIGS[key]
        config = getattr(transformers, cfg_cls)(**cfg)
        model = getattr(transformers, model_cls)._from_config(
            config, attn_implementation=spec.get("attn", "sdpa")
        )
        model = model.to(device=dev, dtype=dtype)
        task = HF_TASK[key]

        def make_batch(b: int, t: int, device) -> dict:
            ids = torch.randint(3, VOCAB, (b, t), device=device)
            if task == "causal":
                return {"input_ids": ids, "labels": ids}
            if task == "mlm":
                mask = torch.rand(ids.shape, device=device) < 0.15
                return {"input_ids": ids, "labels": torch.where(mask, ids, -100)}
            if task == "cls":
                return {"input_ids": ids, "labels": torch.randint(0, 4, (b,), device=device)}
            return {
                "input_ids": ids,
                "labels": torch.randint(3, VOCAB, (b, max(8, t // 4)), device=device),
            }

        def loss_of(m, batch: dict):
            out = m(**batch)
            return out.loss, out.logits

        return Built(model, make_batch, loss_of, f"transformers.{model_cls}", cfg, task)

    if key.startswith(("timm:", "tv:")):
        lib, arch = key.split(":", 1)
        if lib == "timm":
            import timm

            model = timm.create_model(arch, pretrained=False, num_classes=NUM_CLASSES)
            name = f"timm.{arch}"
        else:
            import torchvision

            model = getattr(torchvision.models, arch)(weights=None, num_classes=NUM_CLASSES)
            name = f"torchvision.{arch}"
        model = model.to(device=dev, dtype=dtype)

        def make_batch(b: int, t, device) -> dict:
            return {
                "images": torch.randn(b, 3, image, image, device=device, dtype=dtype),
                "targets": torch.randint(0, NUM_CLASSES, (b,), device=device),
            }

        def loss_of(m, batch: dict):
            logits = m(batch["images"])
            return torch.nn.functional.cross_entropy(logits.float(), batch["targets"]), logits

        return Built(
            model, make_batch, loss_of, name, {"arch": arch, "num_classes": NUM_CLASSES}, "image"
        )

    if key == "encoder":
        cfg = {"d_model": 512, "nhead": 8, "layers": 6, "ffn": 2048, "vocab": VOCAB}

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = torch.nn.Embedding(VOCAB, 512)
                layer = torch.nn.TransformerEncoderLayer(
                    512, 8, 2048, dropout=0.0, batch_first=True
                )
                self.enc = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
                self.head = torch.nn.Linear(512, VOCAB)

            def forward(self, ids):
                return self.head(self.enc(self.emb(ids)))

        model = Encoder().to(device=dev, dtype=dtype)

        def make_batch(b: int, t: int, device) -> dict:
            ids = torch.randint(0, VOCAB, (b, t), device=device)
            return {"input_ids": ids, "labels": ids}

        def loss_of(m, batch: dict):
            logits = m(batch["input_ids"])
            loss = torch.nn.functional.cross_entropy(
                logits.float().flatten(0, 1), batch["labels"].flatten()
            )
            return loss, logits

        return Built(model, make_batch, loss_of, "torch.nn.TransformerEncoder", cfg, "causal")
    raise SystemExit(f"unknown model {key!r}")


def apply_peft(spec: dict, built: Built):
    """Freeze the base and add adapters (peft ``get_peft_model``)."""
    import peft

    targets = LORA_TARGETS.get(spec["model"])
    if spec["peft"] == "lora":
        cfg = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets)
    elif spec["peft"] == "ia3":
        cfg = peft.IA3Config(target_modules=["k", "v", "wo"], feedforward_modules=["wo"])
    else:
        raise SystemExit(f"unknown peft method {spec['peft']!r}")
    built.model = peft.get_peft_model(built.model, cfg)


def train_only(spec: dict, built: Built, torch) -> None:
    """Freeze every parameter but those whose name holds one of ``spec["train_only"]``,
    which are trained in float32 (the usual way to fine-tune part of a bf16 model)."""
    wanted = spec["train_only"]
    for name, p in built.model.named_parameters():
        keep = any(w in name for w in wanted)
        p.requires_grad_(keep)
        if keep:
            p.data = p.data.float()


def enable_ckpt(model) -> None:
    """Gradient checkpointing the library's own way (non-reentrant where it can be asked)."""
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()  # a frozen embedding (peft) needs it
    elif hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
    else:
        raise SystemExit("this model has no gradient checkpointing")


def make_optimizer(spec: dict, params, torch):
    name = spec.get("optimizer", "adamw")
    lr = spec.get("lr", 1e-4)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=lr, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False)
    raise SystemExit(f"unknown optimizer {name!r}")


def unwrap_optimizer(opt):
    """The torch optimizer inside a wrapper (accelerate's, Lightning's)."""
    for _ in range(5):
        wrapper = type(opt).__module__.startswith(("accelerate", "pytorch_lightning", "lightning"))
        if not (wrapper and hasattr(opt, "optimizer")):
            break
        opt = opt.optimizer
    return opt


class Tracker:
    """Iteration boundaries, per-iteration peaks (running maxima) and each iteration's
    gradient storages (post-accumulate-grad hooks: every loop, also where the library
    zeroes the gradients before anything else sees them)."""

    def __init__(self, torch, dev, params) -> None:
        self.torch = torch
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.stats: list[dict] = []
        self.grads: dict[int, int] = {}
        self.last_grads: dict[int, int] = {}
        self.start_us = 0
        self.b = None
        self.t = None
        for p in params:
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._grad)

    def _grad(self, p) -> None:
        if p.grad is not None:
            self.grads.update(storages([p.grad], cuda_only=self.cuda))

    def begin(self, b=None, t=None) -> None:
        self.grads = {}
        self.start_us = now_us()
        self.b, self.t = b, t

    def end(self, loss=None) -> None:
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        if self.grads:
            self.last_grads = dict(self.grads)
        self.stats.append(
            {
                "iter": len(self.stats),
                "start_us": self.start_us,
                "end_us": now_us(),
                "max_memory_allocated": torch.cuda.max_memory_allocated(self.dev)
                if self.cuda
                else 0,
                "max_memory_reserved": torch.cuda.max_memory_reserved(self.dev) if self.cuda else 0,
                "memory_allocated_end": torch.cuda.memory_allocated(self.dev) if self.cuda else 0,
                "memory_reserved_end": torch.cuda.memory_reserved(self.dev) if self.cuda else 0,
                "loss": loss,
                "batch_size": self.b,
                "seq_len": self.t,
            }
        )


def amp_ctx(spec: dict, dev, torch):
    amp = spec.get("amp")
    if not amp:
        return contextlib.nullcontext()
    return torch.autocast(dev.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


def plain_loop(spec, built, opt, tracker, dev, torch, code_lines, extra) -> None:
    """The hand-written loop: zero_grad, batch, forward (autocast), backward, step."""
    model = built.model
    b, t = spec["batch"], spec.get("seq")
    scaler = torch.amp.GradScaler(dev.type) if spec.get("amp") == "fp16" else None
    saved = SavedCollector(dev.type)
    compiled = bool(spec.get("compile"))
    graphs = spec.get("compile") == "reduce-overhead"
    kept: list = []
    set_to_none = spec.get("set_to_none", True)
    for _ in range(spec.get("iters", 3)):
        tracker.begin(b, t)
        saved.current = {}
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        code_lines.setdefault("zero_grad", here())
        opt.zero_grad(set_to_none=set_to_none)
        code_lines.setdefault("batch", here())
        batch = built.make_batch(b, t, dev)
        # Compiled graphs do not run Python saved-tensor hooks: no activation truth there.
        hooks = contextlib.nullcontext() if compiled else saved.hooks()
        with amp_ctx(spec, dev, torch), hooks:
            code_lines.setdefault("forward", here())
            loss, logits = built.loss_of(model, batch)
        if scaler is not None:
            code_lines.setdefault("backward", here())
            scaler.scale(loss).backward()
            code_lines.setdefault("optimizer_step", here())
            scaler.step(opt)
            scaler.update()
        else:
            code_lines.setdefault("backward", here())
            loss.backward()
            code_lines.setdefault("optimizer_step", here())
            opt.step()
        if spec.get("leak"):
            code_lines.setdefault("leak", here())
            kept.append(logits.detach().clone())
        value = float(loss.detach())
        extra["saved"] = dict(saved.current)
        extra["inputs"] = storages(batch.values(), cuda_only=dev.type == "cuda")
        del batch, loss, logits
        if spec.get("validate"):
            # Evaluation often runs larger batches than training (no optimizer state
            # to share the memory with when it runs under no_grad).
            vb = built.make_batch(b * int(spec.get("val_scale", 1)), t, dev)
            grad = spec["validate"] == "grad"
            with contextlib.nullcontext() if grad else torch.no_grad(), amp_ctx(spec, dev, torch):
                code_lines.setdefault("validate", here())
                extra.setdefault("val_losses", []).append(built.loss_of(model, vb)[0].item())
            del vb
        tracker.end(value)
    if kept:
        extra["kept"] = storages(kept, cuda_only=dev.type == "cuda")


def accelerate_loop(spec, built, opt, tracker, dev, torch, code_lines, extra) -> None:
    """An accelerate loop: ``Accelerator.prepare`` and ``accelerator.backward``."""
    from accelerate import Accelerator

    mp = {None: "no", "bf16": "bf16", "fp16": "fp16"}[spec.get("amp")]
    acc = Accelerator(mixed_precision=mp, cpu=dev.type != "cuda")
    model, opt = acc.prepare(built.model, opt)
    extra["optimizer"] = opt
    b, t = spec["batch"], spec.get("seq")
    kept: list = []
    for _ in range(spec.get("iters", 3)):
        tracker.begin(b, t)
        code_lines.setdefault("zero_grad", here())
        opt.zero_grad(set_to_none=spec.get("set_to_none", True))
        code_lines.setdefault("batch", here())
        batch = built.make_batch(b, t, acc.device)
        code_lines.setdefault("forward", here())
        loss, logits = built.loss_of(model, batch)
        code_lines.setdefault("backward", here())
        acc.backward(loss)
        code_lines.setdefault("optimizer_step", here())
        opt.step()
        if spec.get("leak"):
            code_lines.setdefault("leak", here())
            kept.append(logits.detach().clone())
        value = float(loss.detach())
        del batch, loss, logits
        if spec.get("validate"):
            # The evaluation of an accelerate loop: the prepared model (its forward under
            # the accelerator's autocast) on a larger batch, with or without no_grad.
            vb = built.make_batch(b * int(spec.get("val_scale", 1)), t, acc.device)
            grad = spec["validate"] == "grad"
            with contextlib.nullcontext() if grad else torch.no_grad():
                code_lines.setdefault("validate", here())
                extra.setdefault("val_losses", []).append(built.loss_of(model, vb)[0].item())
            del vb
        tracker.end(value)
    if kept:
        extra["kept"] = storages(kept, cuda_only=dev.type == "cuda")


class _Rows(object):
    """A map-style dataset of random rows on the CPU (the loaders collate and move them)."""

    def __init__(self, built: Built, n: int, t) -> None:
        import torch

        self.rows = built.make_batch(n, t, torch.device("cpu"))
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {k: v[i] for k, v in self.rows.items()}


def trainer_loop(spec, built, opt, tracker, dev, torch, code_lines, extra) -> None:
    """The transformers ``Trainer`` (its own optimizer, precision flags and accumulation)."""
    import transformers

    b, t = spec["batch"], spec.get("seq")
    accum = spec.get("accum", 1)
    iters = spec.get("iters", 3)
    optim = {
        "adamw": "adamw_torch",
        "adamw_fused": "adamw_torch_fused",
        "adafactor": "adafactor",
        "sgd": "sgd",
    }[spec.get("optimizer", "adamw")]

    class Steps(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            tracker.begin(b, t)

        def on_step_end(self, args, state, control, **kw):
            tracker.end(None)

    out = tempfile.mkdtemp(prefix="zoo_trainer_")
    args = transformers.TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=b,
        gradient_accumulation_steps=accum,
        max_steps=iters,
        learning_rate=spec.get("lr", 1e-4),
        optim=optim,
        bf16=spec.get("amp") == "bf16",
        fp16=spec.get("amp") == "fp16",
        gradient_checkpointing=bool(spec.get("ckpt")),
        gradient_checkpointing_kwargs={"use_reentrant": False},
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        eval_strategy="no",
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        use_cpu=dev.type != "cuda",
        disable_tqdm=True,
        remove_unused_columns=False,
        seed=1234,
    )
    ds = _Rows(built, b * accum * iters, t)
    trainer = transformers.Trainer(
        model=built.model, args=args, train_dataset=ds, callbacks=[Steps()]
    )
    code_lines.setdefault("train", here())
    trainer.train()
    extra["optimizer"] = trainer.optimizer


def lightning_loop(spec, built, opt, tracker, dev, torch, code_lines, extra) -> None:
    """A PyTorch Lightning loop: automatic optimisation runs ``training_step`` (forward and
    backward) inside ``optimizer.step(closure)``."""
    import pytorch_lightning as pl

    b, t = spec["batch"], spec.get("seq")
    iters = spec.get("iters", 3)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = built.model

        def training_step(self, batch, idx):
            loss, _ = built.loss_of(self.net, batch)
            return loss

        def configure_optimizers(self):
            return opt

    class Steps(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, idx):
            tracker.begin(b, t)

        def on_train_batch_end(self, trainer, module, outputs, batch, idx):
            tracker.end(float(outputs["loss"]) if outputs else None)
            # fit() ends by moving the module and its optimizer state to the CPU: the state
            # the program trained with is the one at the end of its last step.
            cuda = dev.type == "cuda"
            extra["param_storages"] = storages(module.parameters(), cuda_only=cuda)
            for key, want in (("trainable_storages", True), ("frozen_storages", False)):
                extra[key] = storages(
                    [p for p in module.parameters() if p.requires_grad is want], cuda_only=cuda
                )
            extra["optimizer_storages"] = storages(
                [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)],
                cuda_only=cuda,
            )

    precision = {None: "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}[spec.get("amp")]
    trainer = pl.Trainer(
        accelerator="gpu" if dev.type == "cuda" else "cpu",
        devices=1,
        max_steps=iters,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Steps()],
    )
    loader = torch.utils.data.DataLoader(_Rows(built, b * iters, t), batch_size=b)
    code_lines.setdefault("fit", here())
    trainer.fit(Module(), loader)
    extra["optimizer"] = trainer.optimizers[0] if trainer.optimizers else opt


LOOPS = {
    "plain": plain_loop,
    "accelerate": accelerate_loop,
    "trainer": trainer_loop,
    "lightning": lightning_loop,
}


def run(spec: dict, out: Path, device: str) -> int:
    import torch

    name = spec["name"]
    cuda = device.startswith("cuda")
    dev = torch.device(device)
    if cuda and dev.index is None:
        dev = torch.device("cuda", 0)
    torch.manual_seed(spec.get("seed", 1234))
    out.mkdir(parents=True, exist_ok=True)
    total = None
    rec = capture = None
    max_entries = spec.get("max_entries", 1_000_000)
    if cuda:
        torch.cuda.init()
        total = torch.cuda.mem_get_info(dev)[1]
        capture = import_capture()
        rec = capture.record(
            out=str(out),
            max_entries=max_entries,
            stacks="python",
            context="all",
            oom=False,
            dump_on_exit=False,
            dump_signal=None,
        )
        rec.start()

    loop = spec.get("loop", "plain")
    built = build(spec, dev, torch)
    if spec.get("peft"):
        apply_peft(spec, built)
    if spec.get("train_only"):
        train_only(spec, built, torch)
    if spec.get("ckpt") and loop != "trainer":  # the Trainer turns it on from its arguments
        enable_ckpt(built.model)
    built.model.train()
    if spec.get("compile"):
        mode = spec["compile"]
        built.model.compile(mode=None if mode == "default" else mode)
    params = list(built.model.parameters())
    trainable = [p for p in params if p.requires_grad]
    frozen = [p for p in params if not p.requires_grad]
    tracker = Tracker(torch, dev, params)
    opt = None if loop == "trainer" else make_optimizer(spec, trainable, torch)
    if cuda:
        torch.cuda.synchronize(dev)
    peak_before = {
        "allocated": torch.cuda.max_memory_allocated(dev) if cuda else 0,
        "reserved": torch.cuda.max_memory_reserved(dev) if cuda else 0,
    }
    code_lines: dict = {}
    extra: dict = {}
    oom = None
    try:
        LOOPS[loop](spec, built, opt, tracker, dev, torch, code_lines, extra)
    except torch.OutOfMemoryError as exc:
        oom = {"iteration": len(tracker.stats), "batch_size": spec["batch"]}
        oom.update({"message": str(exc).splitlines()[0], "unix_us": now_us()})
    gc.collect()
    if cuda:
        torch.cuda.synchronize(dev)

    optim = unwrap_optimizer(extra.get("optimizer", opt))
    opt_tensors, cpu_state = optimizer_state_tensors(optim, cuda)
    param_st = extra.get("param_storages") or storages(params, cuda_only=cuda)
    opt_st = extra.get("optimizer_storages") or storages(opt_tensors, cuda_only=cuda)
    saved = extra.get("saved", {})
    act = {p: n for p, n in saved.items() if p not in param_st}
    snapshot_us = now_us()
    sidecar: dict = {}
    if rec is not None:
        got = dump_xz(
            rec,
            capture,
            out,
            name,
            workload=spec.get("workload", ""),
            truth_file=f"{name}.truth.json",
        )
        if got is None:
            return 1
        sidecar = got
    n_trace = sidecar.get("n_trace")
    ms = sidecar.get("memory_stats") or {}
    stats = tracker.stats
    overall_alloc = max([peak_before["allocated"]] + [s["max_memory_allocated"] for s in stats])
    overall_res = max([peak_before["reserved"]] + [s["max_memory_reserved"] for s in stats])
    amp = spec.get("amp")
    truth = {
        "schema": SCHEMA,
        "name": name,
        "kind": "train",
        "workload": spec.get("workload", ""),
        "family": spec.get("family"),
        "program": spec.get("program"),
        "settings": spec,
        "loop": loop,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "device": dev.index if cuda else None,
        "gpu_total_memory": total,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_limit_bytes": None,
        "memory_fraction": None,
        "model": built.name,
        "model_config": built.config,
        "optimizer": type(optim).__name__ if optim is not None else None,
        "optimizer_kwargs": {"name": spec.get("optimizer", "adamw"), "lr": spec.get("lr", 1e-4)},
        "dtype": spec.get("dtype", "float32"),
        "autocast": {"bf16": "bfloat16", "fp16": "float16"}.get(amp) if amp else None,
        "grad_scaler": amp == "fp16",
        "grad_checkpointing": bool(spec.get("ckpt")),
        "compiled": spec.get("compile"),
        "peft": spec.get("peft"),
        "attn_implementation": spec.get("attn", "sdpa") if spec["model"] in HF_CONFIGS else None,
        "set_to_none": spec.get("set_to_none", True),
        "batch_size": spec["batch"],
        "seq_len": spec.get("seq"),
        "image_size": spec.get("image", 224) if built.task == "image" else None,
        "iterations": len(stats),
        "recording": {
            "max_entries": max_entries,
            "stacks": "python",
            "context": "all",
            "trace_entries": n_trace,
            "ring_wrapped": bool(n_trace is not None and n_trace >= max_entries),
        },
        "code_lines": code_lines,
        "parameters": summary(param_st),
        "parameters_trainable": summary(
            extra.get("trainable_storages") or storages(trainable, cuda_only=cuda)
        ),
        "parameters_frozen": summary(
            extra.get("frozen_storages") or storages(frozen, cuda_only=cuda)
        ),
        "gradients": summary(tracker.last_grads),
        "optimizer_state": summary(opt_st, cpu_tensors=cpu_state),
        # Lightning: parameters and optimizer state as of the last step's end (fit() moves
        # them to the CPU before the snapshot); every other loop: at snapshot time.
        "state_taken_at": "last_step_end" if "param_storages" in extra else "snapshot",
        "activations": summary(act, saved_parameter_storages=len(saved) - len(act)),
        "activations_seen": loop == "plain" and not spec.get("compile"),
        "inputs": summary(extra.get("inputs", {})),
        "iterations_stats": stats,
        "peaks_reset_per_iteration": False,
        "peak_before_loop": peak_before,
        "overall_peak_allocated": overall_alloc,
        "overall_peak_reserved": overall_res,
        "peak_reserved_bytes": ms.get("reserved_bytes.all.peak", overall_res),
        "peak_allocated_bytes": ms.get("allocated_bytes.all.peak", overall_alloc),
        "memory_stats_end": ms or None,
        "memory_stats_by_device": _stats_by_device(torch) if cuda else {},
        "oom": oom,
        "snapshot_unix_us": snapshot_us,
        "pair": spec.get("pair"),
    }
    if spec.get("leak"):
        kept = extra.get("kept", {})
        truth["leak"] = dict(code_lines.get("leak", {}))
        truth["leak"].update(
            {
                "total_kept_bytes": sum(kept.values()),
                "kept_blocks": sorted([p, n] for p, n in kept.items()),
            }
        )
    if spec.get("validate"):
        truth["validate"] = {
            "no_grad": spec["validate"] == "no_grad",
            "batch_scale": int(spec.get("val_scale", 1)),
        }
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1, default=str))
    print(
        f"{name}: iters={len(stats)} oom={bool(oom)} params={truth['parameters']['bytes']} "
        f"trainable={truth['parameters_trainable']['bytes']} "
        f"grads={truth['gradients']['bytes']} opt={truth['optimizer_state']['bytes']} "
        f"peak_reserved={truth['peak_reserved_bytes']} trace={n_trace}"
    )
    return 0 if stats else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--spec", required=True, help="JSON dict of the recording")
    ap.add_argument("--out", default=".", help="directory for the files")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    rc = run(json.loads(args.spec), Path(args.out), args.device)
    print(f"seconds {time.monotonic() - t0:.1f}")
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
