"""Record every ground-truth run on the GPU machine, each in a fresh process.

    PYTHONUNBUFFERED=1 python3 tests/workloads/truth/record_all.py --out $OUT 2>&1
    python3 tests/workloads/truth/record_all.py --dry-run          # the plan; no CUDA needed

Runs the recordings of README.md (record_one.py, a few at a time: they are
small, and every figure in them is per process), each with its own timeout and
within one total budget: what would not finish in time is skipped, a failure
never stops the others.  One status line per recording.  Then packs
``$OUT/truth_*.tar`` (each <= 14 MiB; snapshots inside are .pickle.xz) and
writes ``$OUT/driver_report.json``.  ``unpack.py`` unpacks them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RECORD_ONE = HERE / "record_one.py"

GPT2 = {
    "family": "gpt2",
    "seq": 256,
    "batch": 4,
    "iters": 6,
    "optimizer": "AdamW",
    "optimizer_kwargs": {"lr": 1e-4},
}
LIMIT_BYTES = 2 << 30  # limit_sweep_gpt2 / remedy
EXPANDABLE_LIMIT = 1536 << 20  # expandable_oom
SHAPES = [[8, 128], [2, 512], [4, 256], [1, 1024], [6, 192], [3, 384]]


def spec(name: str, kind: str, base: dict | None = None, **kw) -> dict:
    d = dict(base or {})
    d.update(kw)
    d.update(name=name, kind=kind)
    return d


def simple_specs() -> list[dict]:
    """The recordings that need no other run first, most valuable first."""
    s = [
        spec("gpt2_adamw_fp32", "train", GPT2, workload="GPT-2 fp32 AdamW training, 6 iterations"),
        spec(
            "gpt2_adamw_bf16",
            "train",
            GPT2,
            autocast="bfloat16",
            workload="GPT-2 AdamW training under bf16 autocast",
        ),
        spec(
            "bert_adam_fp32",
            "train",
            family="bert",
            seq=256,
            batch=8,
            iters=6,
            optimizer="Adam",
            optimizer_kwargs={"lr": 1e-4},
            workload="BertForMaskedLM fp32 Adam",
        ),
        spec(
            "resnet_sgd_fp32",
            "train",
            family="resnet",
            image=224,
            batch=32,
            iters=6,
            optimizer="SGD",
            optimizer_kwargs={"lr": 0.1, "momentum": 0.9},
            workload="torchvision resnet18 SGD momentum",
        ),
        spec(
            "vit_checkpoint_adamw_bf16",
            "train",
            family="vit",
            vit="vit_small_patch16_224",
            image=224,
            batch=32,
            iters=6,
            grad_checkpointing=True,
            autocast="bfloat16",
            optimizer="AdamW",
            optimizer_kwargs={"lr": 1e-4},
            workload="timm vit_small with gradient checkpointing, AdamW, bf16 autocast",
        ),
        spec(
            "mlp_sgd_plain",
            "train",
            family="mlp",
            batch=256,
            iters=6,
            optimizer="SGD",
            optimizer_kwargs={"lr": 0.01},
            workload="MLP, plain SGD (no optimizer state)",
        ),
        spec(
            "gpt2_leak",
            "leak",
            GPT2,
            seq=128,
            iters=8,
            leak="clone",
            workload="GPT-2 training keeping logits.detach().clone() (31.25 MiB) each iteration",
        ),
        spec(
            "gpt2_leak_loss",
            "leak",
            GPT2,
            seq=128,
            iters=8,
            leak="loss",
            workload="GPT-2 training keeping the un-detached loss each iteration (backward "
            "freed its graph: one small tensor per iteration)",
        ),
        spec(
            "eval_keeps_outputs",
            "eval",
            GPT2,
            batch=8,
            optimizer=None,
            keep_outputs=True,
            workload="GPT-2 eval without no_grad, keeping outputs (graphs) in a list",
        ),
        spec(
            "eval_no_grad",
            "eval",
            GPT2,
            batch=8,
            optimizer=None,
            keep_outputs=False,
            workload="GPT-2 eval under no_grad keeping loss.item()",
        ),
        spec(
            "expandable_oom",
            "allocator",
            GPT2,
            batch=2,
            grow=2,
            iters=8,
            alloc_conf="expandable_segments:True",
            limit_bytes=EXPANDABLE_LIMIT,
            expected="num_ooms >= 1 with expandable segments; snapshot after the caught OOM",
            workload="GPT-2 with doubling batch under a 1.5 GiB limit until OOM",
        ),
        spec(
            "empty_cache_mid",
            "allocator",
            GPT2,
            empty_cache_at=[1, 3],
            expected="num_device_free > 0 from torch.cuda.empty_cache()",
            workload="GPT-2 training with empty_cache() after iterations 2 and 4",
        ),
    ]
    for b in (4, 8, 12, 16):
        s.append(
            spec(
                f"sweep_gpt2_b{b:02d}",
                "sweep",
                GPT2,
                batch=b,
                iters=3,
                sweep={"family": "gpt2", "batch_sizes": [4, 8, 12, 16]},
                workload=f"GPT-2 fp32 AdamW batch {b}",
            )
        )
    for b in (16, 32, 48, 64):
        s.append(
            spec(
                f"sweep_resnet_b{b:02d}",
                "sweep",
                family="resnet",
                image=224,
                batch=b,
                iters=3,
                optimizer="SGD",
                optimizer_kwargs={"lr": 0.1, "momentum": 0.9},
                sweep={"family": "resnet", "batch_sizes": [16, 32, 48, 64]},
                workload=f"resnet18 SGD momentum batch {b}",
            )
        )
    # Held-out convolutional sweeps (cuDNN picks workspaces per batch): more batches of
    # resnet18, and two other torchvision nets, to check the batch-scale model on runs
    # it was not developed on.
    for b in (8, 24, 96):
        s.append(
            spec(
                f"sweep_resnet_b{b:02d}",
                "sweep",
                family="resnet",
                image=224,
                batch=b,
                iters=3,
                optimizer="SGD",
                optimizer_kwargs={"lr": 0.1, "momentum": 0.9},
                sweep={"family": "resnet", "batch_sizes": [8, 16, 24, 32, 48, 64, 96]},
                workload=f"resnet18 SGD momentum batch {b}",
            )
        )
    # The second set (mobilenet's other batches, efficientnet, densenet, convnext) was
    # recorded after MobileNet at batch 64 showed cuDNN switching its algorithm by batch:
    # where it switches, and how large a workspace it takes when it does.
    for arch, tag, sizes in (
        ("resnet50", "resnet50", (16, 24, 32, 48)),
        ("mobilenet_v3_large", "mobilenet", (16, 24, 32, 40, 48, 56, 64, 80, 96, 128)),
        ("efficientnet_b0", "efficientnet", (16, 32, 48, 64)),
        ("densenet121", "densenet", (16, 24, 32, 48)),
        ("convnext_tiny", "convnext", (16, 32, 48)),
    ):
        for b in sizes:
            s.append(
                spec(
                    f"sweep_{tag}_b{b:02d}",
                    "sweep",
                    family="resnet",
                    arch=arch,
                    image=224,
                    batch=b,
                    iters=3,
                    optimizer="SGD",
                    optimizer_kwargs={"lr": 0.1, "momentum": 0.9},
                    sweep={"family": tag, "batch_sizes": list(sizes)},
                    workload=f"torchvision {arch} SGD momentum batch {b}",
                )
            )
    for b in (8, 16, 32):
        s.append(
            spec(
                f"sweep_vit_b{b:02d}",
                "sweep",
                family="vit",
                vit="vit_tiny_patch16_224",
                image=224,
                batch=b,
                iters=3,
                optimizer="AdamW",
                optimizer_kwargs={"lr": 1e-4},
                sweep={"family": "vit", "batch_sizes": [8, 16, 32]},
                workload=f"timm vit_tiny fp32 AdamW batch {b}",
            )
        )
    s += [
        spec(
            "stacks_all",
            "allocator",
            GPT2,
            small=True,
            batch=2,
            seq=128,
            iters=2,
            stacks="all",
            expected="C++ frames in the stacks (stacks='all')",
            workload="small GPT-2, stacks=all",
        ),
        spec(
            "ring_wrap",
            "ring",
            GPT2,
            iters=4,
            max_entries=3000,
            workload="GPT-2 training with max_entries=3000: the ring buffer wraps",
        ),
        spec(
            "profiler_gpt2",
            "profiler",
            GPT2,
            iters=3,
            profiler=True,
            workload="GPT-2 under torch.profiler(profile_memory, record_shapes, with_stack)",
        ),
        spec("clock_check", "clock", workload="allocations at known unix times"),
    ]
    s += pair_specs()
    s += generate_specs()
    s += validate_specs()
    return s


def generate_specs() -> list[dict]:
    """Inference: ``model.generate(use_cache=True)`` under inference_mode, a few requests
    ([batch, prompt length, new tokens]) of different shapes, no optimizer."""
    return [
        spec(
            "generate_gpt2_fp32",
            "generate",
            family="gpt2",
            dtype="float32",
            requests=[[1, 16, 96], [4, 64, 128], [2, 200, 64]],
            workload="GPT-2 (6 layers) fp32 generate() with a DynamicCache, 3 requests",
        ),
        spec(
            "generate_llama_bf16",
            "generate",
            family="llama",
            dtype="bfloat16",
            requests=[[2, 48, 80], [1, 300, 48], [6, 24, 112]],
            workload="Llama (4 layers, 8 heads, 4 key/value heads) bf16 generate(), 3 requests",
        ),
    ]


#: Before/after pairs for the aligned diff: (A, B, the change, the truth.json
#: code_lines key of the line the change touched, or None when no single line did).
PAIRS = (
    ("gpt2_leak", "pair_gpt2_noleak", "leak removed", "leak"),
    ("gpt2_adamw_fp32", "pair_gpt2_b2", "smaller_batch", None),
    ("gpt2_adamw_fp32", "pair_gpt2_expandable", "allocator:expandable_segments:True", None),
    ("gpt2_adamw_fp32", "pair_gpt2_ckpt", "gradient_checkpointing", None),
    ("gpt2_adamw_fp32", "gpt2_adamw_bf16", "bf16_autocast", None),
    ("pair_vit_no_ckpt", "vit_checkpoint_adamw_bf16", "gradient_checkpointing", None),
    ("resnet_sgd_fp32", "pair_resnet_bf16", "bf16_autocast", None),
    ("eval_keeps_outputs", "eval_no_grad", "no_grad", None),
    # A validation forward each iteration without torch.no_grad() (graph built, dropped
    # after .item()), then with it: advise's no_grad_forward remedy at code_lines["validate"].
    ("gpt2_val_grad", "gpt2_val_nograd", "no_grad_forward", "validate"),
    ("vit_val_grad", "vit_val_nograd", "no_grad_forward", "validate"),
    # The optimizer's state changed: none (SGD without momentum), or 8-bit moments
    # (torchao's AdamW8bit): advise's 8bit_optimizer remedy and its range.
    ("gpt2_adamw_fp32", "pair_gpt2_sgd", "8bit_optimizer", None),
    ("gpt2_adamw_fp32", "pair_gpt2_torchao8bit", "8bit_optimizer", None),
)


def pair_specs() -> list[dict]:
    """The B sides of :data:`PAIRS` not recorded for another purpose: the same program as
    their A with one change a user makes after ``advise``."""
    resnet = dict(
        family="resnet",
        image=224,
        batch=32,
        iters=6,
        optimizer="SGD",
        optimizer_kwargs={"lr": 0.1, "momentum": 0.9},
    )
    return [
        spec(
            "pair_gpt2_noleak",
            "train",
            GPT2,
            seq=128,
            iters=8,
            workload="gpt2_leak's program without the leak (nothing kept per iteration)",
        ),
        spec(
            "pair_gpt2_b2",
            "train",
            GPT2,
            batch=2,
            workload="gpt2_adamw_fp32's program at half the batch (2)",
        ),
        spec(
            "pair_gpt2_expandable",
            "train",
            GPT2,
            alloc_conf="expandable_segments:True",
            workload="gpt2_adamw_fp32's program with expandable segments",
        ),
        spec(
            "pair_gpt2_ckpt",
            "train",
            GPT2,
            grad_checkpointing=True,
            workload="gpt2_adamw_fp32's program with gradient checkpointing",
        ),
        spec(
            "pair_vit_no_ckpt",
            "train",
            family="vit",
            vit="vit_small_patch16_224",
            image=224,
            batch=32,
            iters=6,
            autocast="bfloat16",
            optimizer="AdamW",
            optimizer_kwargs={"lr": 1e-4},
            workload="vit_checkpoint_adamw_bf16's program without gradient checkpointing",
        ),
        spec(
            "pair_resnet_bf16",
            "train",
            resnet,
            autocast="bfloat16",
            workload="resnet_sgd_fp32's program under bf16 autocast",
        ),
    ]


def validate_specs() -> list[dict]:
    """Training with a validation forward after every step (kind ``train_validate``), each
    program without and with ``torch.no_grad()`` around the validation: the validation batch
    is twice the training batch (no gradients to hold, as evaluation loops do), so the
    validation's graph, not the training step, makes the peak without no_grad.  Two
    programs: GPT-2 (transformers; ``model(...).loss.item()``, model left in train mode) and
    a timm ViT (``cross_entropy(model(x), y).item()`` between ``model.eval()`` and
    ``model.train()``)."""
    gpt2 = dict(GPT2, iters=4, val_batch=8)
    vit = dict(
        family="vit",
        vit="vit_tiny_patch16_224",
        image=224,
        batch=16,
        iters=4,
        optimizer="AdamW",
        optimizer_kwargs={"lr": 1e-4},
        val_batch=32,
        val_eval_mode=True,
    )
    out = []
    for tag, base, what in (
        ("gpt2", gpt2, "GPT-2 fp32 AdamW batch 4, validation batch 8"),
        ("vit", vit, "timm vit_tiny fp32 AdamW batch 16, validation batch 32 in eval mode"),
    ):
        out.append(
            spec(
                f"{tag}_val_grad",
                "train_validate",
                base,
                val_no_grad=False,
                workload=f"{what}: a validation forward after every step without "
                "torch.no_grad() (its graph built, dropped after .item())",
            )
        )
        out.append(
            spec(
                f"{tag}_val_nograd",
                "train_validate",
                base,
                val_no_grad=True,
                workload=f"{tag}_val_grad's program with the validation forward under "
                "torch.no_grad()",
            )
        )
    return out


class Driver:
    """Runs record_one.py subprocesses within one budget; collects the report."""

    def __init__(
        self, out: Path, budget: float, per_run: float, jobs: int, device: str = "cuda"
    ) -> None:
        self.device = device
        self.out = out
        self.work = out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + budget
        self.per_run = per_run
        self.jobs = jobs
        self.report: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, msg: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def run(self, sp: dict, probe: bool = False) -> dict | None:
        """Run one recording (or probe); returns the probe result (or {} for a recording)."""
        label = ("probe:" if probe else "") + sp["name"]
        timeout = min(sp.get("timeout", self.per_run), self.left())
        if timeout < 15:
            self.report[label] = {"status": "skipped", "seconds": 0, "error_tail": "budget spent"}
            self.log(f"SKIP    {label} (budget)")
            return None
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            OMP_NUM_THREADS="2",
        )
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        if sp.get("alloc_conf"):
            env["PYTORCH_CUDA_ALLOC_CONF"] = sp["alloc_conf"]
        result = self.work / f"{label.replace(':', '_')}.result.json"
        cmd = [
            sys.executable,
            str(RECORD_ONE),
            "--out",
            str(self.work),
            "--spec",
            json.dumps(sp),
            "--device",
            self.device,
        ]
        if probe:
            cmd += ["--probe", "--result", str(result)]
        t = time.monotonic()
        status, rc, text = "ok", None, ""
        try:
            p = subprocess.run(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
            rc, text = p.returncode, p.stdout.decode("utf-8", "replace")
            if rc != 0:
                status = "failed"
        except subprocess.TimeoutExpired as exc:
            status, text = "timeout", (exc.output or b"").decode("utf-8", "replace")
        except Exception as exc:  # never stop the driver
            status, text = "failed", f"{type(exc).__name__}: {exc}"
        secs = round(time.monotonic() - t, 1)
        (self.work / f"{label.replace(':', '_')}.log").write_text(text[-200_000:])
        entry = {
            "status": status,
            "seconds": secs,
            "returncode": rc,
            "error_tail": text[-2500:] if status != "ok" else "",
            "last_line": text.strip().splitlines()[-1][:300] if text.strip() else "",
        }
        self.report[label] = entry
        self.log(f"{status.upper():7s} {label} {secs}s  {entry['last_line'][:160]}")
        if status != "ok":
            return None
        if probe:
            try:
                return json.loads(result.read_text())
            except Exception:
                return None
        return {}


def limit_task(d: Driver) -> None:
    """Largest GPT-2 batch under LIMIT_BYTES (fresh-process probes), its fit/OOM, and a remedy."""
    base = dict(GPT2, iters=3, limit_bytes=LIMIT_BYTES)
    probes: dict[int, dict] = {}

    def probe(b: int, **kw) -> dict | None:
        r = d.run(
            spec(
                f"limitprobe_gpt2_b{b}" + "".join(f"_{k}" for k in kw), "limit", base, batch=b, **kw
            ),
            probe=True,
        )
        if r is not None and not kw:
            probes[b] = r
        return r

    lo, hi = 0, None  # lo fits (0 trivially), hi does not
    b = 8
    while hi is None and b <= 256:
        r = probe(b)
        if r is None:
            return
        if r["fits"]:
            lo, b = b, b * 2
        else:
            hi = b
    if hi is None:
        d.log("limit search: batch 256 still fits; giving up")
        return
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = probe(mid)
        if r is None:
            return
        lo, hi = (mid, hi) if r["fits"] else (lo, mid)
    search = {
        "workload": "GPT-2 fp32 AdamW T 256, 3 iterations",
        "memory_limit_bytes": probes[hi].get("memory_limit_bytes"),
        "probes": [
            dict(
                batch_size=k,
                **{x: v.get(x) for x in ("fits", "peak_allocated", "peak_reserved", "oom_message")},
            )
            for k, v in sorted(probes.items())
        ],
        "largest_batch_that_fits": lo,
    }
    (d.work / "limit_sweep_gpt2.search.json").write_text(json.dumps(search, indent=1))
    d.log(f"limit search: largest batch that fits {LIMIT_BYTES} B is {lo}")
    if lo:
        d.run(
            spec(
                "limit_sweep_gpt2_fit",
                "limit",
                base,
                batch=lo,
                search=search,
                workload=f"GPT-2 at the largest batch ({lo}) that fits the limit",
            )
        )
    d.run(
        spec(
            "limit_sweep_gpt2_oom",
            "limit",
            base,
            batch=hi,
            search=search,
            workload=f"GPT-2 at batch {hi}: the smallest that does not fit (OOM caught)",
        )
    )
    # The remedy: the same batch hi, first remedy that fits.
    baseline = {
        "dtype": "float32",
        "autocast": None,
        "grad_checkpointing": False,
        **{
            x: probes[hi].get(x) for x in ("fits", "peak_allocated", "peak_reserved", "oom_message")
        },
        "recording": "limit_sweep_gpt2_oom",
    }
    candidates = []
    for rname, kw in (
        ("bf16_autocast", {"autocast": "bfloat16"}),
        ("grad_checkpointing", {"grad_checkpointing": True}),
        ("bf16_and_checkpointing", {"autocast": "bfloat16", "grad_checkpointing": True}),
    ):
        r = probe(hi, **kw)
        if r is None:
            continue
        cand = {
            "name": rname,
            "dtype": "float32",
            "autocast": kw.get("autocast"),
            "grad_checkpointing": bool(kw.get("grad_checkpointing")),
            **{x: r.get(x) for x in ("fits", "peak_allocated", "peak_reserved", "oom_message")},
        }
        candidates.append(cand)
        if r["fits"]:
            remedy = {
                "batch_size": hi,
                "memory_limit_bytes": r.get("memory_limit_bytes"),
                "baseline": baseline,
                "remedy": cand,
                "candidates": candidates,
            }
            d.run(
                spec(
                    "remedy_gpt2_fits",
                    "remedy",
                    base,
                    batch=hi,
                    remedy=remedy,
                    **kw,
                    workload=f"GPT-2 batch {hi} under the limit: OOM in fp32, fits with {rname}",
                )
            )
            return
    d.log("remedy: no candidate fitted")


def allocator_limit_task(d: Driver) -> None:
    """cache_release_limit and gc_threshold: limits just above this schedule's allocated peak."""
    base = dict(GPT2, shapes=SHAPES, iters=len(SHAPES))
    r = d.run(spec("allocprobe_gpt2_shapes", "allocator", base), probe=True)
    if r is None:
        return
    peak = r["peak_allocated"]
    d.run(
        spec(
            "cache_release_limit",
            "allocator",
            base,
            limit_bytes=int(peak * 1.15),
            expected="num_alloc_retries > 0: cudaMalloc over the limit, cached blocks released",
            workload=f"GPT-2, shapes {SHAPES}, limit 1.15 x allocated peak ({peak} B)",
        )
    )
    d.run(
        spec(
            "gc_threshold",
            "allocator",
            base,
            limit_bytes=int(peak * 1.3),
            alloc_conf="garbage_collection_threshold:0.6",
            expected="garbage_collection_threshold:0.6 frees cached blocks above 60% of the limit",
            workload=f"GPT-2, shapes {SHAPES}, limit 1.3 x allocated peak ({peak} B)",
        )
    )


def compiled_specs() -> list[dict]:
    """``torch.compile`` (Inductor) training at three batches each, fresh processes:
    what the batch what-if predicts from one of them is held to the others."""
    out = []
    for b in (4, 8, 12):
        out.append(
            spec(
                f"compiled_gpt2_b{b:02d}",
                "train",
                GPT2,
                batch=b,
                iters=4,
                compile=True,
                timeout=300,
                reset_peaks=False,
                compiled_sweep={"family": "gpt2", "batch_sizes": [4, 8, 12]},
                workload=f"GPT-2 fp32 AdamW under torch.compile, batch {b}",
            )
        )
    for b in (16, 32, 48):
        out.append(
            spec(
                f"compiled_vit_b{b:02d}",
                "train",
                family="vit",
                vit="vit_small_patch16_224",
                image=224,
                batch=b,
                iters=4,
                optimizer="AdamW",
                optimizer_kwargs={"lr": 1e-4},
                compile=True,
                timeout=300,
                reset_peaks=False,
                compiled_sweep={"family": "vit", "batch_sizes": [16, 32, 48]},
                workload=f"timm vit_small fp32 AdamW under torch.compile, batch {b}",
            )
        )
    return out


def optimizer_pair_specs() -> list[dict]:
    """gpt2_adamw_fp32's program with an optimizer that keeps less state."""
    return [
        spec(
            "pair_gpt2_sgd",
            "train",
            GPT2,
            optimizer="SGD",
            optimizer_kwargs={"lr": 1e-3},
            workload="gpt2_adamw_fp32's program with SGD without momentum (no state)",
        ),
        spec(
            "pair_gpt2_adamw8bit",
            "train",
            GPT2,
            optimizer="bitsandbytes.optim.AdamW8bit",
            optimizer_kwargs={"lr": 1e-4},
            workload="gpt2_adamw_fp32's program with bitsandbytes' 8-bit AdamW",
        ),
        spec(
            "pair_gpt2_torchao8bit",
            "train",
            GPT2,
            optimizer="torchao.optim.AdamW8bit",
            optimizer_kwargs={"lr": 1e-4},
            workload="gpt2_adamw_fp32's program with torchao's 8-bit AdamW",
        ),
    ]


def limit_grid_task(tag: str, base: dict, limit: int, batches: list[int], what: str):
    """The largest batch of ``base`` under ``limit`` from fresh-process probes of
    ``batches`` run side by side (chosen around the boundary the sweeps show), then the
    recordings at the largest that fits and the smallest that does not."""

    def task(d: Driver) -> None:
        b0 = dict(base, iters=3, limit_bytes=limit)
        with ThreadPoolExecutor(max_workers=d.jobs) as pool:
            got = list(
                pool.map(
                    lambda b: d.run(
                        spec(f"limitprobe_{tag}_b{b}", "limit", b0, batch=b), probe=True
                    ),
                    batches,
                )
            )
        probes = {b: r for b, r in zip(batches, got) if r is not None}
        fits = sorted(b for b, r in probes.items() if r["fits"])
        fails = sorted(b for b, r in probes.items() if not r["fits"])
        if not fits or not fails or fits[-1] > fails[0] or fails[0] - fits[-1] != 1:
            d.log(f"limit grid {tag}: not bracketed (fits {fits}, fails {fails})")
            return
        lo, hi = fits[-1], fails[0]
        search = {
            "workload": what,
            "memory_limit_bytes": probes[hi].get("memory_limit_bytes"),
            "probes": [
                dict(
                    batch_size=k,
                    **{
                        x: v.get(x)
                        for x in ("fits", "peak_allocated", "peak_reserved", "oom_message")
                    },
                )
                for k, v in sorted(probes.items())
            ],
            "largest_batch_that_fits": lo,
        }
        (d.work / f"limit_{tag}.search.json").write_text(json.dumps(search, indent=1))
        d.run(
            spec(
                f"limit_{tag}_fit",
                "limit",
                b0,
                batch=lo,
                search=search,
                workload=f"{what} at the largest batch ({lo}) that fits the limit",
            )
        )
        d.run(
            spec(
                f"limit_{tag}_oom",
                "limit",
                b0,
                batch=hi,
                search=search,
                workload=f"{what} at batch {hi}: the smallest that does not fit",
            )
        )

    task.__doc__ = f"Largest batch under {limit} B from probes of {batches}: {what}."
    return task


VIT_TINY = dict(
    family="vit",
    vit="vit_tiny_patch16_224",
    image=224,
    optimizer="AdamW",
    optimizer_kwargs={"lr": 1e-4},
)


def plan() -> list[tuple[str, object]]:
    """(label, task) in start order; a task is a spec dict or a function of the driver."""
    simple = simple_specs()
    tasks: list[tuple[str, object]] = [("limit_sweep_gpt2 + remedy", limit_task)]
    tasks += [(s["name"], s) for s in compiled_specs()]
    tasks += [
        (
            "limit_vit_1536",
            limit_grid_task(
                "vit_1536",
                VIT_TINY,
                1536 << 20,
                list(range(44, 48)),
                "timm vit_tiny fp32 AdamW, 3 iterations, limit 1.5 GiB",
            ),
        )
    ]
    tasks += [
        (
            "limit_gpt2_3072",
            limit_grid_task(
                "gpt2_3072",
                GPT2,
                3 << 30,
                list(range(17, 26)),
                "GPT-2 fp32 AdamW T 256, 3 iterations, limit 3 GiB",
            ),
        )
    ]
    tasks += [(s["name"], s) for s in optimizer_pair_specs()]
    tasks += [(s["name"], s) for s in simple[:6]]
    tasks.append(("cache_release_limit + gc_threshold", allocator_limit_task))
    tasks += [(s["name"], s) for s in simple[6:]]
    return tasks


def pack(out: Path, work: Path, max_tar: int, max_total: int) -> dict:
    """truth_meta.tar (all JSON and logs) and truth_snap_NN.tar (the .pickle.xz), within caps."""
    meta = sorted(p for p in work.iterdir() if p.is_file() and not p.name.endswith(".pickle.xz"))
    snaps = [p for p in work.iterdir() if p.name.endswith(".pickle.xz")]
    order = {s["name"]: i for i, s in enumerate(simple_specs())}
    snaps.sort(key=lambda p: (order.get(p.name[: -len(".pickle.xz")], -1), p.name))
    packed: dict = {"tars": [], "dropped": []}
    with tarfile.open(out / "truth_meta.tar", "w") as tf:
        for p in meta:
            tf.add(p, arcname=p.name)
    total = (out / "truth_meta.tar").stat().st_size
    packed["tars"].append("truth_meta.tar")
    groups: list[list[Path]] = []
    size = math.inf
    for p in snaps:
        n = p.stat().st_size
        if n > max_tar - 20_000 or total + n > max_total:
            packed["dropped"].append([p.name, n])
            continue
        total += n
        if size + n > max_tar - 20_000:
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += n + 1024
    for i, g in enumerate(groups, 1):
        name = f"truth_snap_{i:02d}.tar"
        with tarfile.open(out / name, "w") as tf:
            for p in g:
                tf.add(p, arcname=p.name)
        packed["tars"].append(name)
    packed["total_bytes"] = sum((out / t).stat().st_size for t in packed["tars"])
    return packed


def dry_run() -> int:
    print("plan (each a fresh process; probes too):")
    for label, task in plan():
        if isinstance(task, dict):
            extra = {
                k: task[k]
                for k in ("family", "batch", "iters", "autocast", "alloc_conf", "limit_bytes")
                if k in task
            }
            print(f"  {label:32s} {task['kind']:9s} {extra}")
        else:
            print(f"  {label:32s} {(task.__doc__ or '').strip().splitlines()[0]}")
    sys.path.insert(0, str(HERE))
    from _shim import import_capture

    cap = import_capture()
    print(f"vramscope.capture from {Path(cap.__file__).parent}")
    import record_one  # noqa: F401  (imports models, the shim)

    for mod in ("torch", "transformers", "timm", "torchvision"):
        try:
            m = __import__(mod)
            print(f"  {mod} {getattr(m, '__version__', '?')}")
        except Exception as exc:
            print(f"  {mod} missing ({type(exc).__name__})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output directory ($OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, check the imports")
    ap.add_argument("--budget", type=float, default=420, help="seconds for all recordings")
    ap.add_argument("--per-run", type=float, default=120, help="timeout of one process (s)")
    ap.add_argument("--jobs", type=int, default=4, help="processes at a time")
    ap.add_argument("--only", help="comma-separated labels to run (substring match)")
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test the driver off the GPU")
    ap.add_argument("--max-tar", type=int, default=14 << 20)
    ap.add_argument("--max-total", type=int, default=58 << 20)
    args = ap.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if not args.out:
        ap.error("--out is needed")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pack_reserve = 25.0
    d = Driver(out, args.budget - pack_reserve, args.per_run, args.jobs, args.device)
    tasks = plan()
    if args.only:
        keys = args.only.split(",")
        tasks = [t for t in tasks if any(k in t[0] for k in keys)]
    d.log(
        f"{len(tasks)} tasks, {args.jobs} at a time, budget {args.budget}s; "
        f"python {sys.version.split()[0]}"
    )

    def run_task(item) -> None:
        label, task = item
        try:
            if isinstance(task, dict):
                d.run(task)
            else:
                task(d)
        except Exception as exc:  # never crash the driver
            d.report[label] = {
                "status": "failed",
                "seconds": 0,
                "error_tail": f"driver: {type(exc).__name__}: {exc}",
            }
            d.log(f"FAILED  {label}: driver error {exc}")

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(run_task, tasks))
    try:
        packed = pack(out, d.work, args.max_tar, args.max_total)
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
    (out / "driver_report.json").write_text(json.dumps(report, indent=1))
    if "error" not in packed:
        import shutil

        shutil.rmtree(d.work, ignore_errors=True)
    d.log(
        f"done: {counts}; packed {packed.get('tars')} "
        f"({packed.get('total_bytes', 0) / 2**20:.1f} MiB), dropped {packed.get('dropped')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
