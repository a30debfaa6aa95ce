"""Record the zoo: real training programs of several libraries, each at several batch sizes
(language models also at several sequence lengths), plus before/after pairs for the remedies
that ``vramscope advise`` offers, each recording a fresh process (zoo_one.py), several at once
on the one GPU.

    PYTHONUNBUFFERED=1 python3 tests/workloads/zoo.py --out $OUT          # on the GPU machine
    python3 tests/workloads/zoo.py --dry-run                              # the plan
    python3 tests/workloads/zoo.py --unpack FETCHED_DIR --dest /work/zoo  # back here

Every recording has its own timeout inside one total budget (what would not finish in time is
skipped; a failure never stops the others).  The files come back packed: ``zoo_meta.tar.xz``
(every truth file, sidecar and log), ``zoo_snap_NN.tar`` (the ``.pickle.xz`` snapshots, each
tar within 15 MiB) and ``zoo_report.json`` (status of every recording).  ``--unpack`` writes
``DEST/<program>/NAME.{pickle.xz,json,truth.json}``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "truth"))

#: Batch sizes of every program: each is half, 1.5x and 2x (or a third, 3x) of another.
LM_BATCHES = (4, 8, 12)
IMAGE_BATCHES = (16, 32, 48)
#: Sequence lengths of the language models, recorded at the middle batch.
SEQS = (128, 256, 512)
MID_SEQ = 256

LM = "lm"
IMAGE = "image"


def P(program: str, family: str, kind: str, **settings) -> dict:
    """One training program: its id, family, input kind and settings (zoo_one.py's spec)."""
    return {"program": program, "family": family, "input": kind, **settings}


#: The programs, by family.  Models are built from configurations (no downloads).
PROGRAMS: list[dict] = [
    # Hugging Face decoder language models, hand-written loop.
    P("dec_gpt2_sdpa_adamw_fp32", "hf_decoder", LM, model="gpt2"),
    P("dec_gpt2_eager_adamw_bf16", "hf_decoder", LM, model="gpt2", attn="eager", amp="bf16"),
    P(
        "dec_llama_sdpa_fusedadamw_bf16",
        "hf_decoder",
        LM,
        model="llama",
        optimizer="adamw_fused",
        amp="bf16",
    ),
    P(
        "dec_llama_eager_sgdm_fp32",
        "hf_decoder",
        LM,
        model="llama",
        attn="eager",
        optimizer="sgd_momentum",
        lr=1e-2,
    ),
    P("dec_llama_ckpt_adamw_bf16", "hf_decoder", LM, model="llama", ckpt=True, amp="bf16"),
    P(
        "dec_gpt2_ckpt_adafactor_fp32",
        "hf_decoder",
        LM,
        model="gpt2",
        ckpt=True,
        optimizer="adafactor",
    ),
    P("dec_qwen2_adamw_bf16weights", "hf_decoder", LM, model="qwen2", dtype="bfloat16"),
    # Part of a bf16 model fine-tuned in fp32 under autocast (a frozen half-precision
    # base, as under LoRA, without peft).
    P(
        "dec_llama_partial_bf16base",
        "hf_decoder",
        LM,
        model="llama",
        dtype="bfloat16",
        amp="bf16",
        train_only=["lm_head", "layers.3."],
        lr=1e-3,
    ),
    P("dec_neox_adamw_fp16scaler", "hf_decoder", LM, model="gpt_neox", amp="fp16"),
    # timm image models.
    P("timm_convnext_atto_adamw_fp16scaler", "timm", IMAGE, model="timm:convnext_atto", amp="fp16"),
    P("timm_vit_tiny_adamw_bf16", "timm", IMAGE, model="timm:vit_tiny_patch16_224", amp="bf16"),
    P(
        "timm_swin_tiny_sgdm_fp32",
        "timm",
        IMAGE,
        model="timm:swin_tiny_patch4_window7_224",
        optimizer="sgd_momentum",
        lr=1e-2,
    ),
    P(
        "timm_resnet26d_sgdm_bf16",
        "timm",
        IMAGE,
        model="timm:resnet26d",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="bf16",
    ),
    P(
        "timm_vit_small_ckpt_fusedadamw_bf16",
        "timm",
        IMAGE,
        model="timm:vit_small_patch16_224",
        ckpt=True,
        optimizer="adamw_fused",
        amp="bf16",
    ),
    P(
        "timm_deit_tiny_adafactor_fp32",
        "timm",
        IMAGE,
        model="timm:deit_tiny_patch16_224",
        optimizer="adafactor",
        lr=1e-3,
    ),
    P(
        "timm_efficientnet_b0_adamw_bf16weights",
        "timm",
        IMAGE,
        model="timm:efficientnet_b0",
        dtype="bfloat16",
    ),
    # torch.compile in its three modes.
    P("cmp_default_gpt2_adamw_fp32", "compile", LM, model="gpt2", compile="default", iters=4),
    P(
        "cmp_mat_vit_tiny_adamw_bf16",
        "compile",
        IMAGE,
        model="timm:vit_tiny_patch16_224",
        compile="max-autotune-no-cudagraphs",
        amp="bf16",
        iters=4,
        timeout=300,
    ),
    P(
        "cmp_ro_encoder_adamw_fp32",
        "compile",
        LM,
        model="encoder",
        compile="reduce-overhead",
        iters=5,
    ),
    P(
        "cmp_default_resnet18_sgdm_bf16",
        "compile",
        IMAGE,
        model="tv:resnet18",
        compile="default",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="bf16",
        iters=4,
    ),
    P(
        "cmp_default_llama_fusedadamw_bf16",
        "compile",
        LM,
        model="llama",
        compile="default",
        optimizer="adamw_fused",
        amp="bf16",
        iters=4,
    ),
    # The transformers Trainer.
    P(
        "trn_gpt2_fusedadamw_bf16_accum2",
        "hf_trainer",
        LM,
        model="gpt2",
        loop="trainer",
        optimizer="adamw_fused",
        amp="bf16",
        accum=2,
    ),
    P("trn_bert_adamw_fp32", "hf_trainer", LM, model="bert", loop="trainer"),
    P(
        "trn_llama_ckpt_adamw_bf16",
        "hf_trainer",
        LM,
        model="llama",
        loop="trainer",
        ckpt=True,
        amp="bf16",
    ),
    P(
        "trn_t5_adafactor_fp32",
        "hf_trainer",
        LM,
        model="t5",
        loop="trainer",
        optimizer="adafactor",
        lr=1e-3,
    ),
    # Hugging Face encoders and encoder-decoders, hand-written loop.
    P("enc_bert_mlm_adamw_fp32", "hf_encdec", LM, model="bert"),
    P("enc_bert_ckpt_adamw_bf16", "hf_encdec", LM, model="bert", ckpt=True, amp="bf16"),
    P(
        "enc_roberta_cls_sgdm_fp16scaler",
        "hf_encdec",
        LM,
        model="roberta",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="fp16",
    ),
    P("enc_distilbert_eager_adamw_fp32", "hf_encdec", LM, model="distilbert", attn="eager"),
    P("s2s_t5_adamw_fp32", "hf_encdec", LM, model="t5"),
    P(
        "s2s_t5_ckpt_adafactor_bf16",
        "hf_encdec",
        LM,
        model="t5",
        ckpt=True,
        optimizer="adafactor",
        lr=1e-3,
        amp="bf16",
    ),
    P(
        "s2s_bart_fusedadamw_bf16weights",
        "hf_encdec",
        LM,
        model="bart",
        optimizer="adamw_fused",
        dtype="bfloat16",
    ),
    # torchvision image models.
    P(
        "tv_resnet18_sgdm_fp32",
        "torchvision",
        IMAGE,
        model="tv:resnet18",
        optimizer="sgd_momentum",
        lr=1e-2,
    ),
    P(
        "tv_resnet50_sgdm_bf16",
        "torchvision",
        IMAGE,
        model="tv:resnet50",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="bf16",
    ),
    P(
        "tv_mobilenet_v3_adamw_fp16scaler",
        "torchvision",
        IMAGE,
        model="tv:mobilenet_v3_large",
        amp="fp16",
    ),
    P("tv_efficientnet_b0_adamw_fp32", "torchvision", IMAGE, model="tv:efficientnet_b0"),
    P(
        "tv_convnext_tiny_fusedadamw_bf16",
        "torchvision",
        IMAGE,
        model="tv:convnext_tiny",
        optimizer="adamw_fused",
        amp="bf16",
    ),
    P("tv_swin_t_adamw_bf16", "torchvision", IMAGE, model="tv:swin_t", amp="bf16"),
    P(
        "tv_regnet_y_800mf_sgd_fp32",
        "torchvision",
        IMAGE,
        model="tv:regnet_y_800mf",
        optimizer="sgd",
        lr=1e-2,
    ),
    # peft adapters on a frozen base.
    P(
        "peft_lora_llama_bf16base",
        "peft",
        LM,
        model="llama",
        peft="lora",
        dtype="bfloat16",
        amp="bf16",
        lr=1e-3,
    ),
    P("peft_lora_gpt2_fp32", "peft", LM, model="gpt2", peft="lora", lr=1e-3),
    # Eager attention in held-out families (the sequence what-if's square rule is judged
    # on programs it was not chosen on).
    P(
        "peft_lora_gpt2_eagerattn_bf16",
        "peft",
        LM,
        model="gpt2",
        peft="lora",
        attn="eager",
        amp="bf16",
        lr=1e-3,
    ),
    P("s2s_bart_eagerattn_adamw_fp32", "hf_encdec", LM, model="bart", attn="eager"),
    P(
        "peft_lora_roberta_fp16scaler",
        "peft",
        LM,
        model="roberta",
        peft="lora",
        amp="fp16",
        lr=1e-3,
    ),
    P(
        "peft_ia3_t5_adafactor_fp32",
        "peft",
        LM,
        model="t5",
        peft="ia3",
        optimizer="adafactor",
        lr=1e-3,
    ),
    P(
        "peft_lora_vit_small_bf16",
        "peft",
        IMAGE,
        model="timm:vit_small_patch16_224",
        peft="lora",
        amp="bf16",
        lr=1e-3,
    ),
    P(
        "peft_lora_llama_ckpt_bf16base",
        "peft",
        LM,
        model="llama",
        peft="lora",
        dtype="bfloat16",
        amp="bf16",
        ckpt=True,
        lr=1e-3,
    ),
    # PyTorch Lightning (training_step inside optimizer.step(closure)) and accelerate loops.
    P(
        "lit_vit_tiny_adamw_fp32",
        "lightning_accelerate",
        IMAGE,
        model="timm:vit_tiny_patch16_224",
        loop="lightning",
    ),
    P(
        "lit_gpt2_adamw_bf16",
        "lightning_accelerate",
        LM,
        model="gpt2",
        loop="lightning",
        amp="bf16",
    ),
    P(
        "lit_resnet18_sgdm_fp16",
        "lightning_accelerate",
        IMAGE,
        model="tv:resnet18",
        loop="lightning",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="fp16",
    ),
    P(
        "acc_llama_adamw_bf16",
        "lightning_accelerate",
        LM,
        model="llama",
        loop="accelerate",
        amp="bf16",
    ),
    P(
        "acc_resnet34_sgdm_fp16",
        "lightning_accelerate",
        IMAGE,
        model="tv:resnet34",
        loop="accelerate",
        optimizer="sgd_momentum",
        lr=1e-2,
        amp="fp16",
    ),
    P("acc_bert_adamw_fp32", "lightning_accelerate", LM, model="bert", loop="accelerate"),
]

#: Remedy pairs: (remedy id in advise, program, change before, change after).  An empty
#: change is the program's own recording at its middle batch.
PAIRS: list[tuple[str, str, dict, dict]] = []
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "timm_vit_tiny_adamw_bf16",
    "enc_bert_mlm_adamw_fp32",
    "s2s_t5_adamw_fp32",
    "peft_lora_gpt2_fp32",
    "lit_vit_tiny_adamw_fp32",
    "acc_bert_adamw_fp32",
):
    PAIRS.append(("gradient_checkpointing", _prog, {}, {"ckpt": True}))
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "timm_deit_tiny_adafactor_fp32",
    "enc_bert_mlm_adamw_fp32",
    "tv_resnet18_sgdm_fp32",
    "tv_efficientnet_b0_adamw_fp32",
    "peft_lora_gpt2_fp32",
    "lit_vit_tiny_adamw_fp32",
    "acc_bert_adamw_fp32",
):
    PAIRS.append(("bf16_autocast", _prog, {}, {"amp": "bf16"}))
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "enc_bert_mlm_adamw_fp32",
    "s2s_t5_adamw_fp32",
    "tv_efficientnet_b0_adamw_fp32",
    "acc_bert_adamw_fp32",
):
    # No 8-bit optimizer on the GPU machine: the remedy's range reaches down to SGD without
    # momentum (no state), which is the run recorded after.
    PAIRS.append(("8bit_optimizer", _prog, {}, {"optimizer": "sgd", "lr": 1e-2}))
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "enc_bert_mlm_adamw_fp32",
    "tv_resnet18_sgdm_fp32",
    "peft_lora_gpt2_fp32",
    "acc_bert_adamw_fp32",
):
    PAIRS.append(("set_to_none", _prog, {"set_to_none": False}, {}))
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "enc_bert_mlm_adamw_fp32",
    "tv_resnet18_sgdm_fp32",
    "peft_lora_gpt2_fp32",
):
    PAIRS.append(("no_grad_forward", _prog, {"validate": "grad"}, {"validate": "no_grad"}))
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "enc_bert_mlm_adamw_fp32",
    "tv_resnet18_sgdm_fp32",
    "peft_lora_gpt2_fp32",
    "acc_bert_adamw_fp32",
):
    PAIRS.append(("free_kept", _prog, {"leak": True}, {}))
# Where the remedies matter: at the middle batch above, the training step's own peak hides
# both.  An evaluation at twice the training batch with grad enabled holds its whole graph
# at its peak; a small batch makes the gradients zeroed in place a large share of the
# forward's peak.  Plain and accelerate loops (the ones that validate).
for _prog in (
    "dec_gpt2_sdpa_adamw_fp32",
    "timm_vit_tiny_adamw_bf16",
    "enc_bert_mlm_adamw_fp32",
    "s2s_t5_adamw_fp32",
    "tv_resnet18_sgdm_fp32",
    "peft_lora_gpt2_fp32",
    "acc_llama_adamw_bf16",
    "acc_bert_adamw_fp32",
    "tv_swin_t_adamw_bf16",
    "s2s_bart_eagerattn_adamw_fp32",
):
    PAIRS.append(
        (
            "no_grad_forward",
            _prog,
            {"validate": "grad", "val_scale": 2},
            {"validate": "no_grad", "val_scale": 2},
        )
    )
for _prog, _small in (
    ("dec_gpt2_sdpa_adamw_fp32", 1),
    ("timm_vit_tiny_adamw_bf16", 2),
    ("enc_bert_mlm_adamw_fp32", 1),
    ("s2s_t5_adamw_fp32", 1),
    ("tv_resnet18_sgdm_fp32", 2),
    ("peft_lora_gpt2_fp32", 1),
    ("acc_llama_adamw_bf16", 1),
    ("acc_bert_adamw_fp32", 1),
):
    PAIRS.append(("set_to_none", _prog, {"set_to_none": False, "batch": _small}, {"batch": _small}))
for _prog in (
    "dec_llama_sdpa_fusedadamw_bf16",
    "enc_bert_mlm_adamw_fp32",
    "tv_resnet50_sgdm_bf16",
    "peft_lora_llama_bf16base",
    "lit_gpt2_adamw_bf16",
):
    PAIRS.append(
        (
            "allocator:expandable_segments:True",
            _prog,
            {},
            {"alloc_conf": "expandable_segments:True"},
        )
    )


def program(pid: str) -> dict:
    for p in PROGRAMS:
        if p["program"] == pid:
            return p
    raise KeyError(pid)


def batches(p: dict) -> tuple[int, ...]:
    return LM_BATCHES if p["input"] == LM else IMAGE_BATCHES


def mid_batch(p: dict) -> int:
    return batches(p)[1]


def rec_name(pid: str, b: int, seq: int | None = None) -> str:
    return f"{pid}_b{b}" + (f"_t{seq}" if seq is not None and seq != MID_SEQ else "")


def pair_names(remedy: str, pid: str, before: dict, after: dict) -> tuple[str, str]:
    """The recordings (before, after) of one pair: the program's own where unchanged."""
    p = program(pid)
    own = rec_name(pid, mid_batch(p))
    tag = re.sub(r"[^a-z0-9]+", "_", remedy.lower()).strip("_")
    # A second pair of one remedy and program, where it is made to matter, is named apart.
    if "val_scale" in before:
        tag += f"_val{before['val_scale']}x"
    if "batch" in before:
        tag += f"_b{before['batch']}"
    return (
        own if not before else f"pair_{tag}_{pid}_before",
        own if not after else f"pair_{tag}_{pid}_after",
    )


def _spec(p: dict, name: str, batch: int, seq: int | None, **change) -> dict:
    sp = {k: v for k, v in p.items() if k not in ("input", "timeout")}
    sp.update(name=name, batch=batch, iters=p.get("iters", 3))
    if p["input"] == LM:
        sp["seq"] = seq or MID_SEQ
    else:
        sp["image"] = 224
    sp.update(change)
    sp["workload"] = f"{p['program']} ({p['family']}) batch {batch}" + (
        f" seq {sp['seq']}" if "seq" in sp else ""
    )
    sp["timeout"] = p.get("timeout", 150)
    return sp


def plan() -> list[dict]:
    """Every recording's spec, most needed first: the compiled programs (slowest) at once,
    then every program's batches, the remedy pairs, the sequence lengths."""
    first, batch_specs, pair_specs, seq_specs = [], [], [], []
    for p in PROGRAMS:
        for b in batches(p):
            sp = _spec(p, rec_name(p["program"], b), b, None)
            (first if p.get("compile") else batch_specs).append(sp)
        if p["input"] == LM:
            for t in SEQS:
                if t != MID_SEQ:
                    seq_specs.append(
                        _spec(p, rec_name(p["program"], mid_batch(p), t), mid_batch(p), t)
                    )
    for remedy, pid, before, after in PAIRS:
        p = program(pid)
        names = pair_names(remedy, pid, before, after)
        for role, change, name in (("before", before, names[0]), ("after", after, names[1])):
            if change:
                change = dict(change)
                sp = _spec(p, name, change.pop("batch", mid_batch(p)), None, **change)
                sp["pair"] = {
                    "remedy": remedy,
                    "role": role,
                    "program": pid,
                    "other": names[1 - ("before", "after").index(role)],
                }
                pair_specs.append(sp)

    # Every program's middle batch first (the compiled ones, slowest, leading), so that each
    # program has one recording early; then the other batches.
    def mid(s: dict) -> bool:
        return s["batch"] in (LM_BATCHES[1], IMAGE_BATCHES[1])

    ordered = [s for s in first if mid(s)] + [s for s in batch_specs if mid(s)]
    ordered += [s for s in first if not mid(s)] + [s for s in batch_specs if not mid(s)]
    return ordered + pair_specs + seq_specs


def pack(out: Path, work: Path, max_tar: int = 15 << 20, max_total: int = 60 << 20) -> dict:
    """zoo_meta.tar.xz (all JSON and logs) and zoo_snap_NN.tar (the .pickle.xz), within caps."""
    meta = sorted(p for p in work.iterdir() if p.is_file() and not p.name.endswith(".pickle.xz"))
    with tarfile.open(out / "zoo_meta.tar.xz", "w:xz") as tf:
        for p in meta:
            tf.add(p, arcname=p.name)
    total = (out / "zoo_meta.tar.xz").stat().st_size
    order = {s["name"]: i for i, s in enumerate(plan())}
    snaps = sorted(
        (p for p in work.iterdir() if p.name.endswith(".pickle.xz")),
        key=lambda p: order.get(p.name[: -len(".pickle.xz")], 10**6),
    )
    packed: dict = {"tars": ["zoo_meta.tar.xz"], "dropped": []}
    groups: list[list[Path]] = []
    size = max_tar
    for p in snaps:
        n = p.stat().st_size + 1024
        if (
            n > max_tar - 20_000
            or total + n > max_total
            or (size + n > max_tar - 20_000 and len(groups) >= 6)
        ):
            packed["dropped"].append([p.name, n])
            continue
        total += n
        if size + n > max_tar - 20_000:
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += n
    for i, g in enumerate(groups, 1):
        name = f"zoo_snap_{i:02d}.tar"
        with tarfile.open(out / name, "w") as tf:
            for p in g:
                tf.add(p, arcname=p.name)
        packed["tars"].append(name)
    packed["total_bytes"] = sum((out / t).stat().st_size for t in packed["tars"])
    return packed


_SAFE = re.compile(r"^[A-Za-z0-9_.+-]+$")


def unpack(src: Path, dest: Path) -> int:
    """Files of the fetched tars into DEST/<program>/ (plain names only)."""
    progs = sorted((p["program"] for p in PROGRAMS), key=len, reverse=True)
    n = 0
    for tar_path in sorted(src.glob("zoo_*.tar*")):
        with tarfile.open(tar_path) as tf:
            for m in tf.getmembers():
                if not m.isfile() or not _SAFE.match(m.name):
                    continue
                f = tf.extractfile(m)
                if f is None:
                    continue
                prog = next((p for p in progs if p in m.name), "_driver")
                d = dest / prog
                d.mkdir(parents=True, exist_ok=True)
                (d / m.name).write_bytes(f.read())
                n += 1
    rep = src / "zoo_report.json"
    if rep.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "zoo_report.json").write_bytes(rep.read_bytes())
    print(f"unpacked {n} files into {dest}")
    return 0 if n else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="output directory ($OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan")
    ap.add_argument("--unpack", help="a fetched $OUT directory to unpack into --dest")
    ap.add_argument("--dest", default="/work/zoo")
    ap.add_argument("--budget", type=float, default=540, help="seconds for all recordings")
    ap.add_argument("--jobs", type=int, default=14, help="processes at a time")
    ap.add_argument("--only", help="comma-separated name substrings to run")
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test off the GPU")
    args = ap.parse_args(argv)
    specs = plan()
    if args.only:
        keys = args.only.split(",")
        specs = [s for s in specs if any(k in s["name"] for k in keys)]
    if args.dry_run:
        fams = sorted({p["family"] for p in PROGRAMS})
        print(
            f"{len(PROGRAMS)} programs, {len(fams)} families ({', '.join(fams)}), "
            f"{len(PAIRS)} remedy pairs, {len(specs)} recordings"
        )
        for s in specs:
            print(f"  {s['name']}")
        return 0
    if args.unpack:
        return unpack(Path(args.unpack), Path(args.dest))
    if not args.out:
        ap.error("--out is needed")
    import record_all

    record_all.RECORD_ONE = HERE / "zoo_one.py"  # the driver runs our recorder
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    d = record_all.Driver(out, args.budget - 30, 150, args.jobs, args.device)
    d.log(f"{len(specs)} recordings, {args.jobs} at a time, budget {args.budget}s")

    def one(sp: dict) -> None:
        try:
            d.run(sp)
        except Exception as exc:  # never stop the driver
            d.report[sp["name"]] = {"status": "failed", "seconds": 0, "error_tail": repr(exc)}

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, specs))
    try:
        packed = pack(out, d.work)
    except Exception as exc:
        packed = {"error": f"{type(exc).__name__}: {exc}"}
    counts: dict[str, int] = {}
    for e in d.report.values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    report = {
        "seconds": round(time.monotonic() - d.t0, 1),
        "counts": counts,
        "packed": packed,
        "recordings": d.report,
    }
    (out / "zoo_report.json").write_text(json.dumps(report, indent=1))
    if "error" not in packed:
        import shutil

        shutil.rmtree(d.work, ignore_errors=True)
    # The summary table: one line per program, which of its recordings succeeded.
    buf = io.StringIO()
    for p in PROGRAMS:
        mine = {
            k: v["status"]
            for k, v in d.report.items()
            if k.startswith(p["program"]) or p["program"] + "_" in k
        }
        ok = sum(1 for v in mine.values() if v == "ok")
        bad = [k for k, v in mine.items() if v != "ok"]
        buf.write(f"{p['program']:44s} {ok}/{len(mine)} ok {' '.join(bad)[:200]}\n")
    print(buf.getvalue())
    d.log(
        f"done: {counts}; packed {packed.get('tars')} "
        f"({packed.get('total_bytes', 0) / 2**20:.1f} MiB), "
        f"dropped {len(packed.get('dropped', []))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
