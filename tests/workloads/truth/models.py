"""Small models built from configs (no downloads) and their synthetic batches.

Each family gives a :class:`Workload`: the model, a function that makes one
random batch on the device, and ``forward(batch) -> (loss, output)`` where
``output`` is the tensor an eval loop or a leak would keep (the logits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: GPT-2 shape used by every GPT-2 recording (vocab 16000: B 4 x T 128 logits = 31.25 MiB fp32).
GPT2_CONFIG = dict(
    vocab_size=16000,
    n_layer=6,
    n_embd=384,
    n_head=6,
    n_positions=1024,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    bos_token_id=0,
    eos_token_id=0,
)
BERT_CONFIG = dict(
    vocab_size=8000,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=512,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


@dataclass
class Workload:
    model: Any
    make_batch: Callable[[int, int | None], dict]
    forward: Callable[[dict], tuple]
    model_name: str
    model_config: dict = field(default_factory=dict)
    seq_len: int | None = None
    image_size: int | None = None
    enable_checkpointing: Callable[[], None] | None = None


def build(
    family: str,
    device: Any,
    *,
    seq: int | None = None,
    image: int | None = None,
    vit: str = "vit_small_patch16_224",
    small: bool = False,
    arch: str | None = None,
) -> Workload:
    """The model of ``family`` (gpt2, bert, resnet, vit, mlp) on ``device``; ``arch``: the
    torchvision convolutional net of family "resnet" (default resnet18)."""
    import torch

    if family == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = dict(GPT2_CONFIG)
        if small:
            cfg.update(n_layer=2, n_embd=128, n_head=2)
        model = GPT2LMHeadModel(GPT2Config(**cfg)).to(device)
        vocab = cfg["vocab_size"]
        t_default = seq or 256

        def make_batch(b: int, t: int | None = None) -> dict:
            ids = torch.randint(0, vocab, (b, t or t_default), device=device)
            return {"input_ids": ids}

        def forward(batch: dict):
            out = model(input_ids=batch["input_ids"], labels=batch["input_ids"])
            return out.loss, out.logits

        return Workload(
            model,
            make_batch,
            forward,
            "transformers.GPT2LMHeadModel",
            cfg,
            seq_len=t_default,
            enable_checkpointing=model.gradient_checkpointing_enable,
        )

    if family == "bert":
        from transformers import BertConfig, BertForMaskedLM

        cfg = dict(BERT_CONFIG)
        model = BertForMaskedLM(BertConfig(**cfg)).to(device)
        t_default = seq or 256

        def make_batch(b: int, t: int | None = None) -> dict:
            ids = torch.randint(0, cfg["vocab_size"], (b, t or t_default), device=device)
            labels = torch.where(
                torch.rand(ids.shape, device=device) < 0.15, ids, torch.full_like(ids, -100)
            )
            return {"input_ids": ids, "labels": labels}

        def forward(batch: dict):
            out = model(input_ids=batch["input_ids"], labels=batch["labels"])
            return out.loss, out.logits

        return Workload(
            model,
            make_batch,
            forward,
            "transformers.BertForMaskedLM",
            cfg,
            seq_len=t_default,
            enable_checkpointing=model.gradient_checkpointing_enable,
        )

    if family in ("resnet", "vit"):
        size = image or 224
        if family == "resnet":
            import torchvision

            arch = arch or "resnet18"
            cfg = {"arch": arch, "num_classes": 100}
            model = getattr(torchvision.models, arch)(weights=None, num_classes=100).to(device)
            name = f"torchvision.{arch}"
            ckpt = None
        else:
            import timm

            cfg = {"arch": vit, "num_classes": 100, "pretrained": False}
            model = timm.create_model(vit, pretrained=False, num_classes=100).to(device)
            name = f"timm.{vit}"

            def ckpt() -> None:
                model.set_grad_checkpointing(True)

        def make_batch(b: int, t: int | None = None) -> dict:
            return {
                "images": torch.randn(b, 3, size, size, device=device),
                "targets": torch.randint(0, 100, (b,), device=device),
            }

        def forward(batch: dict):
            logits = model(batch["images"])
            return torch.nn.functional.cross_entropy(logits, batch["targets"]), logits

        return Workload(
            model, make_batch, forward, name, cfg, image_size=size, enable_checkpointing=ckpt
        )

    if family == "mlp":
        width = 2048
        cfg = {"layers": 4, "width": width, "in": 1024, "classes": 100}
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 100),
        ).to(device)

        def make_batch(b: int, t: int | None = None) -> dict:
            return {
                "x": torch.randn(b, 1024, device=device),
                "targets": torch.randint(0, 100, (b,), device=device),
            }

        def forward(batch: dict):
            logits = model(batch["x"])
            return torch.nn.functional.cross_entropy(logits, batch["targets"]), logits

        return Workload(model, make_batch, forward, "mlp", cfg)

    raise ValueError(f"unknown family {family!r}")
