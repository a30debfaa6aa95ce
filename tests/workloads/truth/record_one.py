"""One ground-truth recording (or one probe) in this process; record_all.py runs each fresh.

    python tests/workloads/truth/record_one.py --out DIR --spec '{"name": "gpt2_adamw_fp32", ...}'
    python tests/workloads/truth/record_one.py --probe --result R.json --spec '{...}'

A recording writes ``NAME.pickle.xz`` (the snapshot, via vramscope.capture),
``NAME.json`` (its sidecar) and ``NAME.truth.json`` (what this program knows
about its own memory; schema in README.md).  A probe records nothing and
writes whether the run fitted and its peaks.  ``--device cpu`` runs the same
loop on the CPU without snapshot (a smoke test of this code off the GPU).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import linecache
import lzma
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import models
from _shim import import_capture

SCHEMA = "vramscope-truth/1"


def now_us() -> int:
    """Unix time in microseconds (the snapshot trace's ``time_us`` clock)."""
    return time.time_ns() // 1000


def here(offset: int = 1) -> dict:
    """The caller's file and the line ``offset`` lines below the call (the statement it marks)."""
    frame = inspect.currentframe().f_back  # type: ignore[union-attr]
    path = os.path.abspath(frame.f_code.co_filename)
    line = frame.f_lineno + offset
    return {"file": path, "line": line, "code": linecache.getline(path, line).strip()}


def storages(tensors, cuda_only: bool = True) -> dict[int, int]:
    """data_ptr -> nbytes of the unique untyped storages behind ``tensors``."""
    out: dict[int, int] = {}
    for t in tensors:
        if t is None or (cuda_only and not t.is_cuda):
            continue
        flatten = getattr(t, "__tensor_flatten__", None)
        if flatten is not None:  # a tensor subclass (e.g. 8-bit optimizer state): its parts
            out.update(storages([getattr(t, a) for a in flatten()[0]], cuda_only))
            continue
        try:
            s = t.untyped_storage()
            if s.data_ptr() != 0:
                out[s.data_ptr()] = s.nbytes()
        except Exception:  # sparse or otherwise storage-less
            continue
    return out


def optimizer_state_tensors(opt, cuda: bool) -> tuple[list, int]:
    """The optimizer's state tensors on the GPU (every one when ``cuda`` is off), and how
    many it keeps on the CPU instead (offloaded state the recording cannot see)."""
    import torch

    tensors, on_cpu = [], 0
    if opt is not None:
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    if v.is_cuda or not cuda:
                        tensors.append(v)
                    else:
                        on_cpu += 1
    return tensors, on_cpu


def summary(st: dict[int, int], **extra) -> dict:
    return {
        "bytes": sum(st.values()),
        "count": len(st),
        "blocks": sorted([p, n] for p, n in st.items()),
        **extra,
    }


def dump_xz(rec, capture, out: Path, name: str, **sidecar_fields) -> dict | None:
    """Write ``NAME.pickle.xz`` and its sidecar (``sidecar_fields`` added to it), then stop
    recording; the sidecar's contents, or None when no snapshot was written."""
    path = rec.dump(str(out / f"{name}.pickle"))
    if path is None:
        print(f"{name}: no snapshot written", file=sys.stderr)
        return None
    side_path = capture.files.sidecar_path(path)
    if sidecar_fields:
        capture.files.update_sidecar(side_path, **sidecar_fields)
    sidecar = json.loads(Path(side_path).read_text())
    rec.stop()
    Path(str(path) + ".xz").write_bytes(lzma.compress(Path(path).read_bytes(), preset=6))
    os.unlink(path)
    return sidecar


class SavedCollector:
    """Storages autograd saves for backward (saved_tensors_hooks), per iteration."""

    def __init__(self, device_type: str) -> None:
        self.current: dict[int, int] = {}
        self.device_type = device_type  # CPU scalars saved on a CUDA run are not GPU memory

    def hooks(self):
        import torch

        def pack(t):
            if t.device.type == self.device_type:
                try:
                    s = t.untyped_storage()
                    if s.data_ptr() != 0:
                        self.current[s.data_ptr()] = s.nbytes()
                except Exception:
                    pass
            return t

        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="JSON dict of the recording")
    ap.add_argument("--out", default=".", help="directory for NAME.pickle.xz/.json/.truth.json")
    ap.add_argument("--probe", action="store_true", help="no snapshot; write --result")
    ap.add_argument("--result", help="probe result JSON path")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    spec = json.loads(args.spec)
    return run(spec, Path(args.out), probe=args.probe, result=args.result, device=args.device)


def run(spec: dict, out: Path, *, probe: bool, result: str | None, device: str) -> int:
    import torch

    name = spec["name"]
    kind = spec.get("kind", "train")
    cuda = device.startswith("cuda")
    dev = torch.device(device)
    if cuda and dev.index is None:
        dev = torch.device("cuda", 0)  # set_per_process_memory_fraction needs an index
    torch.manual_seed(spec.get("seed", 1234))
    out.mkdir(parents=True, exist_ok=True)

    limit = fraction = total = None
    if cuda:
        torch.cuda.init()
        total = torch.cuda.mem_get_info(dev)[1]
        if spec.get("limit_bytes"):
            fraction = min(1.0, spec["limit_bytes"] / total)
            torch.cuda.set_per_process_memory_fraction(fraction, dev)
            limit = int(fraction * total)  # what the allocator computes (setMemoryFraction)

    # Recording starts after CUDA init (so it starts at once) and before any allocation.
    rec = None
    capture = None
    max_entries = spec.get("max_entries", 1_000_000)
    stacks = spec.get("stacks", "python")
    if cuda and not probe:
        capture = import_capture()
        rec = capture.record(
            out=str(out),
            max_entries=max_entries,
            stacks=stacks,
            context="all",
            oom=False,
            dump_on_exit=False,
            dump_signal=None,
        )
        rec.start()

    def max_alloc() -> int:
        return torch.cuda.max_memory_allocated(dev) if cuda else 0

    def max_res() -> int:
        return torch.cuda.max_memory_reserved(dev) if cuda else 0

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    truth: dict = {
        "schema": SCHEMA,
        "name": name,
        "kind": kind,
        "workload": spec.get("workload", ""),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev) if cuda else None,
        "device": dev.index if cuda else None,
        "gpu_total_memory": total,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_limit_bytes": limit,
        "memory_fraction": fraction,
    }
    for k in ("sweep", "search", "remedy", "expected"):
        if k in spec:
            truth[k] = spec[k]

    if kind == "clock":
        return clock_case(spec, out, rec, capture, truth, torch, dev)
    if kind == "generate":
        return generate_case(spec, out, rec, capture, truth, torch, dev)

    family = spec["family"]
    wl = models.build(
        family,
        dev,
        seq=spec.get("seq"),
        image=spec.get("image"),
        vit=spec.get("vit", "vit_small_patch16_224"),
        small=spec.get("small", False),
        arch=spec.get("arch"),
    )
    model = wl.model
    compiled = bool(spec.get("compile"))
    if compiled:
        model.compile()  # Inductor; the module's own __call__ runs the compiled forward
    if spec.get("grad_checkpointing"):
        if wl.enable_checkpointing is None:
            raise SystemExit(f"{family} has no gradient checkpointing here")
        wl.enable_checkpointing()
    eval_mode = kind == "eval"
    if eval_mode:
        model.eval()
    else:
        model.train()
    opt_name = spec.get("optimizer")
    opt_kwargs = dict(spec.get("optimizer_kwargs", {}))
    opt = None
    if opt_name:
        if "." in opt_name:  # another library's optimizer, e.g. bitsandbytes.optim.AdamW8bit
            import importlib

            mod, cls = opt_name.rsplit(".", 1)
            opt = getattr(importlib.import_module(mod), cls)(model.parameters(), **opt_kwargs)
        else:
            opt = getattr(torch.optim, opt_name)(model.parameters(), **opt_kwargs)
    autocast = spec.get("autocast")
    batch_size = spec["batch"]
    iters = spec.get("iters", 6)
    shapes = spec.get("shapes")  # per-iteration [batch, seq] schedule
    grow = spec.get("grow")  # batch multiplier per iteration (expandable_oom)
    leak = spec.get("leak")  # "clone" | "loss" | None
    keep = spec.get("keep_outputs")  # eval: keep outputs (True) or .item() under no_grad (False)
    reset_peaks = spec.get("reset_peaks", kind in ("train", "leak", "eval"))
    empty_cache_at = set(spec.get("empty_cache_at", []))
    # train_validate: after each training step a validation forward on its own batch,
    # reduced with .item(); under no_grad (val_no_grad) or building the graph nothing uses.
    validate = kind == "train_validate"
    val_batch = spec.get("val_batch", batch_size)
    val_no_grad = bool(spec.get("val_no_grad"))
    val_eval_mode = bool(spec.get("val_eval_mode"))
    val_losses: list = []

    param_st = storages(model.parameters(), cuda_only=cuda)
    sync()
    peak_before = {"allocated": max_alloc(), "reserved": max_res()}
    code_lines: dict = {}
    iter_stats: list = []
    kept: list = []
    kept_per_iter: list = []
    leak_line = None
    empty_cache_calls: list = []
    saved = SavedCollector(dev.type)
    last_saved: dict[int, int] = {}
    last_inputs: dict[int, int] = {}
    oom = None
    losses: list = []
    used_shapes: list = []
    prof = None
    if spec.get("profiler") and cuda:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        )
        prof.__enter__()

    b, t = batch_size, None
    for it in range(iters):
        if shapes:
            b, t = shapes[it % len(shapes)]
        elif grow and it:
            b = int(b * grow)
        used_shapes.append([b, t or wl.seq_len])
        if reset_peaks and cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        start = now_us()
        saved.current = {}
        loss_value = None
        try:
            if opt is not None:
                code_lines.setdefault("zero_grad", here())
                opt.zero_grad(set_to_none=True)
            code_lines.setdefault("batch", here())
            batch = wl.make_batch(b, t)
            ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if autocast else _null()
            grad_ctx = torch.no_grad() if (eval_mode and not keep) else _null()
            # Compiled graphs do not run Python saved-tensor hooks: no activation truth.
            with grad_ctx, ctx, _null() if compiled else saved.hooks():
                code_lines.setdefault("forward", here())
                loss, output = wl.forward(batch)
            if not eval_mode:
                code_lines.setdefault("backward", here())
                loss.backward()
                code_lines.setdefault("optimizer_step", here())
                opt.step()
            if leak == "clone":
                leak_line = leak_line or here()
                kept.append(output.detach().clone())
                kept_per_iter.append(storages([kept[-1]], cuda_only=cuda))
            elif leak == "loss":
                # backward() already freed the graph's saved tensors: only the loss stays.
                leak_line = leak_line or here()
                kept.append(loss)
                kept_per_iter.append(storages([loss], cuda_only=cuda))
            elif eval_mode and keep:
                # Keeping (loss, logits) without backward keeps the whole forward graph.
                leak_line = leak_line or here()
                kept.append((loss, output))
                kept_per_iter.append(_graph_kept(saved.current, param_st, [loss, output]))
            else:
                code_lines.setdefault("item", here())
                loss_value = loss.item()
                losses.append(loss_value)
            if loss_value is None:
                loss_value = float(loss.detach())
            last_saved = dict(saved.current)
            last_inputs = storages(batch.values(), cuda_only=cuda)
            del batch, loss, output
            if validate:
                val_losses.append(
                    _validate(
                        wl, model, val_batch, t, val_no_grad, val_eval_mode, code_lines, torch
                    )
                )
            if it in empty_cache_at:
                code_lines.setdefault("empty_cache", here())
                torch.cuda.empty_cache()
                empty_cache_calls.append({"iteration": it, "unix_us": now_us()})
            sync()
        except torch.OutOfMemoryError as exc:
            oom = {
                "iteration": it,
                "batch_size": b,
                "message": str(exc).splitlines()[0],
                "unix_us": now_us(),
            }
        iter_stats.append(
            {
                "iter": it,
                "start_us": start,
                "end_us": now_us(),
                "max_memory_allocated": max_alloc(),
                "max_memory_reserved": max_res(),
                "memory_allocated_end": torch.cuda.memory_allocated(dev) if cuda else 0,
                "memory_reserved_end": torch.cuda.memory_reserved(dev) if cuda else 0,
                "loss": loss_value,
                "batch_size": b,
                "seq_len": t or wl.seq_len,
            }
        )
        if oom:
            break
        if prof is not None:
            prof.step()
    gc.collect()
    sync()

    if probe:
        res = {
            "name": name,
            "fits": oom is None,
            "peak_allocated": max(s["max_memory_allocated"] for s in iter_stats),
            "peak_reserved": max(s["max_memory_reserved"] for s in iter_stats),
            "oom_message": oom["message"] if oom else None,
            "batch_size": batch_size,
            "memory_limit_bytes": limit,
        }
        Path(result).write_text(json.dumps(res, indent=1))
        print(f"probe {name}: fits={res['fits']} peak_allocated={res['peak_allocated']}")
        return 0

    profiler_info = None
    if prof is not None:
        prof.__exit__(None, None, None)
        profiler_info = {"memory_timeline_json": None, "memory_timeline_raw": None, "error": None}
        for key, fname in (
            ("memory_timeline_json", f"{name}.memory_timeline.json.gz"),
            ("memory_timeline_raw", f"{name}.memory_timeline.raw.json.gz"),
        ):
            try:
                prof.export_memory_timeline(str(out / fname), device=str(dev))
                profiler_info[key] = fname
            except Exception as exc:  # a second opinion; never fatal
                profiler_info["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        prof = None

    grads = storages([p.grad for p in model.parameters()], cuda_only=cuda)
    opt_tensors, cpu_state = optimizer_state_tensors(opt, cuda)
    opt_st = storages(opt_tensors, cuda_only=cuda)
    act = {p: n for p, n in last_saved.items() if p not in param_st}
    act_params = sum(1 for p in last_saved if p in param_st)
    kept_now: dict[int, int] = {}
    for d in kept_per_iter:
        kept_now.update(d)

    snapshot_us = now_us()
    sidecar = {}
    if rec is not None:
        got = dump_xz(
            rec,
            capture,
            out,
            name,
            memory_limit_bytes=limit,
            memory_fraction=fraction,
            workload=spec.get("workload", ""),
            truth_file=f"{name}.truth.json",
        )
        if got is None:
            return 1
        sidecar = got
    n_trace = sidecar.get("n_trace")

    overall_alloc = max(
        [peak_before["allocated"]] + [s["max_memory_allocated"] for s in iter_stats]
    )
    overall_res = max([peak_before["reserved"]] + [s["max_memory_reserved"] for s in iter_stats])
    truth.update(
        {
            "model": wl.model_name,
            "model_config": wl.model_config,
            "optimizer": opt_name,
            "optimizer_kwargs": opt_kwargs,
            "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
            "autocast": "bfloat16" if autocast else None,
            "grad_checkpointing": bool(spec.get("grad_checkpointing")),
            "compiled": compiled,
            "batch_size": batch_size,
            "seq_len": wl.seq_len,
            "image_size": wl.image_size,
            "iterations": len(iter_stats),
            "recording": {
                "max_entries": max_entries,
                "stacks": stacks,
                "context": "all",
                "trace_entries": n_trace,
                "ring_wrapped": bool(n_trace is not None and n_trace >= max_entries),
            },
            "code_lines": code_lines,
            "parameters": summary(param_st),
            "gradients": summary(grads),
            "optimizer_state": summary(opt_st, cpu_tensors=cpu_state),
            "activations": summary(act, saved_parameter_storages=act_params),
            "inputs": summary(last_inputs),
            "iterations_stats": iter_stats,
            "peaks_reset_per_iteration": bool(reset_peaks),
            "peak_before_loop": peak_before,
            "overall_peak_allocated": overall_alloc,
            "overall_peak_reserved": overall_res,
            "memory_stats_end": sidecar.get("memory_stats"),
            "memory_stats_by_device": _stats_by_device(torch) if cuda else {},
            "oom": oom,
            "snapshot_unix_us": snapshot_us,
            "shapes": used_shapes,
        }
    )
    if leak or (eval_mode and keep):
        lk = dict(leak_line or {})
        per = [[sum(d.values()), len(d)] for d in kept_per_iter]
        lk.update(
            {
                "bytes_per_iteration": per[0][0] if per else 0,
                "per_iteration": per,
                "kept_blocks": sorted([p, n] for p, n in kept_now.items()),
                "total_kept_bytes": sum(kept_now.values()),
            }
        )
        truth["leak"] = lk
        code_lines["keep_outputs" if eval_mode else "leak"] = {
            k: lk[k] for k in ("file", "line", "code") if k in lk
        }
    elif kind in ("leak", "eval"):
        truth["leak"] = None
        truth["kept"] = len(losses)
    if empty_cache_at:
        truth["empty_cache_calls"] = empty_cache_calls
    if validate:
        ms = sidecar.get("memory_stats") or {}
        truth["validate"] = {
            "batch_size": val_batch,
            "no_grad": val_no_grad,
            "eval_mode": val_eval_mode,
            "losses": val_losses,
            # The whole run's peaks (this kind never resets them): what the pair compares.
            "peak_reserved_bytes": ms.get("reserved_bytes.all.peak", overall_res),
            "peak_allocated_bytes": ms.get("allocated_bytes.all.peak", overall_alloc),
        }
    if profiler_info is not None:
        truth["profiler"] = profiler_info
    if "expected" in spec and sidecar:
        ms = sidecar.get("memory_stats", {})
        truth["observed"] = {
            k: ms.get(k)
            for k in (
                "num_alloc_retries",
                "num_device_alloc",
                "num_device_free",
                "num_ooms",
                "num_sync_all_streams",
            )
        }
    Path(out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1, default=str))
    print(
        f"{name}: iters={len(iter_stats)} oom={bool(oom)} params={truth['parameters']['bytes']} "
        f"grads={truth['gradients']['bytes']} opt={truth['optimizer_state']['bytes']} "
        f"act={truth['activations']['bytes']} peak_alloc={overall_alloc} trace={n_trace}"
    )
    return 0


def _validate(
    wl, model, b: int, t, no_grad: bool, eval_mode: bool, code_lines: dict, torch
) -> float:
    """One validation forward on a fresh batch, reduced with ``.item()`` in the statement
    that runs the model (its output and graph go when the statement ends).  The model is
    called on this line itself, not through ``wl.forward``, so that the validation's
    allocations have this line as their innermost program frame (``code_lines["validate"]``)."""
    vb = wl.make_batch(b, t)
    if eval_mode:
        model.eval()
    with torch.no_grad() if no_grad else _null():
        if "input_ids" in vb:
            code_lines.setdefault("validate", here())
            value = model(input_ids=vb["input_ids"], labels=vb["input_ids"]).loss.item()
        else:  # images (vit, resnet), or x (mlp: the CPU smoke test)
            x = vb["images"] if "images" in vb else vb["x"]
            code_lines.setdefault("validate", here())
            value = torch.nn.functional.cross_entropy(model(x), vb["targets"]).item()
    if eval_mode:
        model.train()
    del vb
    return value


def _graph_kept(saved: dict[int, int], param_st: dict[int, int], roots) -> dict[int, int]:
    """Storages a kept graph holds: what it saved (parameters excluded) plus its root tensors."""
    kept = {p: n for p, n in saved.items() if p not in param_st}
    kept.update(storages(roots, cuda_only=roots[0].is_cuda))
    return kept


def _stats_by_device(torch) -> dict:
    out = {}
    for d in range(torch.cuda.device_count()):
        try:
            if torch.cuda.memory_stats(d):
                out[str(d)] = dict(torch.cuda.memory_stats(d))
        except Exception:
            pass
    return out


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def clock_case(spec, out, rec, capture, truth, torch, dev) -> int:
    """Allocations at known unix times, to map the trace clock onto unix time."""
    held, marks = [], []
    for i in range(10):
        before = now_us()
        x = torch.empty((i + 1) << 20, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize(dev)
        after = now_us()
        held.append(x)
        marks.append(
            {
                "data_ptr": x.untyped_storage().data_ptr(),
                "nbytes": x.untyped_storage().nbytes(),
                "before_us": before,
                "after_us": after,
            }
        )
        time.sleep(0.02)
    truth["clock"] = marks
    truth["code_lines"] = {}
    truth["snapshot_unix_us"] = now_us()
    if rec is not None:
        side = dump_xz(rec, capture, out, spec["name"])
        if side is None:
            return 1
        truth["memory_stats_end"] = side.get("memory_stats")
        truth["recording"] = {
            "max_entries": spec.get("max_entries", 1_000_000),
            "stacks": "python",
            "context": "all",
            "trace_entries": side.get("n_trace"),
            "ring_wrapped": False,
        }
    Path(out / f"{spec['name']}.truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{spec['name']}: {len(marks)} clock marks")
    return 0


#: A small Llama (grouped-query attention: fewer key/value heads than query heads).
LLAMA_CONFIG = dict(
    vocab_size=16000,
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
)


def _causal_lm(family: str, dev, dtype):
    """(model, config dict, name) of a causal language model built from a config."""
    if family == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = dict(models.GPT2_CONFIG)
        return (
            GPT2LMHeadModel(GPT2Config(**cfg)).to(device=dev, dtype=dtype),
            cfg,
            "transformers.GPT2LMHeadModel",
        )
    if family == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = dict(LLAMA_CONFIG)
        return (
            LlamaForCausalLM(LlamaConfig(**cfg)).to(device=dev, dtype=dtype),
            cfg,
            "transformers.LlamaForCausalLM",
        )
    raise SystemExit(f"no causal LM {family!r} for kind generate")


def cache_tensors(cache) -> list:
    """The key and value tensors of a transformers cache (DynamicCache's layers, the older
    key_cache/value_cache lists, or a legacy tuple of (key, value) per layer)."""
    if cache is None:
        return []
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [
            t
            for layer in layers
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
        ]
    if hasattr(cache, "key_cache"):
        return list(cache.key_cache) + list(cache.value_cache)
    return [t for layer in cache for t in layer]


def cache_of(output):
    """The cache an output of a model or of generate() carries (``cache`` in recent
    transformers, ``past_key_values`` before)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def generate_case(spec, out, rec, capture, truth, torch, dev) -> int:
    """``model.generate(use_cache=True)`` under inference_mode, one request per entry of
    ``spec["requests"]`` ([batch, prompt length, new tokens]); the truth: per request its
    times, forward passes and the KV cache's bytes after every forward pass."""
    import transformers

    dtype = getattr(torch, spec.get("dtype", "float32"))
    model, cfg, model_name = _causal_lm(spec["family"], dev, dtype)
    model.eval()
    param_st = storages(model.parameters(), cuda_only=dev.type == "cuda")
    forwards: list[dict] = []  # per forward pass of the current request

    def after_forward(module, args, kwargs, output):
        st = storages(cache_tensors(cache_of(output)), cuda_only=dev.type == "cuda")
        forwards.append({"end_us": now_us(), "kv_bytes": sum(st.values()), "kv_storages": len(st)})

    hook = model.register_forward_hook(after_forward, with_kwargs=True)
    code_lines: dict = {}
    requests = []
    vocab = cfg["vocab_size"]
    for r, (b, t, new) in enumerate(spec["requests"]):
        forwards.clear()
        ids = torch.randint(3, vocab, (b, t), device=dev)
        mask = torch.ones_like(ids)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = now_us()
        with torch.inference_mode():
            code_lines.setdefault("generate", here())
            res = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                use_cache=True,
                pad_token_id=0,
                return_dict_in_generate=True,
            )
            kv = storages(cache_tensors(cache_of(res)), cuda_only=dev.type == "cuda")
            sequences = tuple(res.sequences.shape)
            code_lines.setdefault("request_end", here())
            del res  # the cache goes with the output: the request ends here
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        end = now_us()
        del ids, mask
        requests.append(
            {
                "request": r,
                "batch_size": b,
                "prompt_len": t,
                "max_new_tokens": new,
                "sequences_shape": list(sequences),
                "forward_passes": len(forwards),
                "decode_steps": len(forwards) - 1,
                "start_us": start,
                "end_us": end,
                "prefill_end_us": forwards[0]["end_us"] if forwards else None,
                "last_forward_end_us": forwards[-1]["end_us"] if forwards else None,
                # The cache after the last forward pass, read from generate's output.
                "kv_cache_bytes": sum(kv.values()),
                "kv_cache_storages": len(kv),
                "kv_cache_blocks": sorted([p, n] for p, n in kv.items()),
                # After every forward pass (the forward hook): [end_us, bytes, storages].
                "kv_bytes_per_forward": [
                    [f["end_us"], f["kv_bytes"], f["kv_storages"]] for f in forwards
                ],
            }
        )
        if dev.type == "cuda":
            time.sleep(0.01)  # a gap between requests on the trace's clock
    hook.remove()
    truth.update(
        {
            "model": model_name,
            "model_config": cfg,
            "dtype": spec.get("dtype", "float32"),
            "transformers": transformers.__version__,
            "optimizer": None,
            # One generation request is one "iteration" of the loop tests.
            "iterations": len(requests),
            "generation": requests,
            "parameters": summary(param_st),
            "code_lines": code_lines,
            "leak": None,
        }
    )
    if dev.type == "cuda":
        truth["overall_peak_allocated"] = torch.cuda.max_memory_allocated(dev)
    truth["snapshot_unix_us"] = now_us()
    n_trace = None
    if rec is not None:
        side = dump_xz(
            rec,
            capture,
            out,
            spec["name"],
            workload=spec.get("workload", ""),
            truth_file=f"{spec['name']}.truth.json",
        )
        if side is None:
            return 1
        n_trace = side.get("n_trace")
        truth["memory_stats_end"] = side.get("memory_stats")
    max_entries = spec.get("max_entries", 1_000_000)
    truth["recording"] = {
        "max_entries": max_entries,
        "stacks": spec.get("stacks", "python"),
        "context": "all",
        "trace_entries": n_trace,
        "ring_wrapped": bool(n_trace is not None and n_trace >= max_entries),
    }
    Path(out / f"{spec['name']}.truth.json").write_text(json.dumps(truth, indent=1))
    print(
        f"{spec['name']}: {len(requests)} requests, decode steps "
        f"{[q['decode_steps'] for q in requests]}, kv bytes "
        f"{[q['kv_cache_bytes'] for q in requests]}, trace={n_trace}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
