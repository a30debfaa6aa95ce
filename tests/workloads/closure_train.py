"""A plain torch training loop whose forward, loss and backward run inside
``optimizer.step(closure)`` (the way PyTorch Lightning's automatic optimisation and
LBFGS-style code train), recorded at several batch sizes, each in a fresh process, with the
program's own truth beside each snapshot (the zoo's recorder, zoo_one.py, with one more loop).

    PYTHONUNBUFFERED=1 python3 tests/workloads/closure_train.py --out $OUT   # on the GPU machine
    python3 tests/workloads/closure_train.py --out /tmp/c --device cpu --batches 2   # smoke test

Writes ``closure_encoder_adamw_b{B}.{pickle.xz,json,truth.json}`` (tests/data/closure/ keeps
them): ``nn.TransformerEncoder`` (torch only, no downloads), AdamW, fp32, 3 iterations.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "truth"))

import zoo_one  # noqa: E402
from record_one import SavedCollector, here, storages  # noqa: E402

PROGRAM = "closure_encoder_adamw"
BATCHES = (4, 8, 12)
SEQ = 128


def closure_loop(spec, built, opt, tracker, dev, torch, code_lines, extra) -> None:
    """zero_grad, batch, then ``opt.step(closure)``: the closure runs the forward, the loss
    (the user's code) and ``backward()`` inside the optimizer's step."""
    model = built.model
    b, t = spec["batch"], spec.get("seq")
    saved = SavedCollector(dev.type)
    for _ in range(spec.get("iters", 3)):
        tracker.begin(b, t)
        saved.current = {}
        code_lines.setdefault("zero_grad", here())
        opt.zero_grad(set_to_none=True)
        code_lines.setdefault("batch", here())
        batch = built.make_batch(b, t, dev)
        holder: dict = {}

        def closure(batch=batch, holder=holder):
            with saved.hooks():
                code_lines.setdefault("forward", here())
                loss, _logits = built.loss_of(model, batch)
            code_lines.setdefault("backward", here())
            loss.backward()
            holder["loss"] = loss.detach()
            return loss

        code_lines.setdefault("optimizer_step", here())
        opt.step(closure)
        value = float(holder["loss"])
        extra["saved"] = dict(saved.current)
        extra["inputs"] = storages(batch.values(), cuda_only=dev.type == "cuda")
        del batch, holder
        tracker.end(value)


zoo_one.LOOPS["closure"] = closure_loop


def spec(batch: int) -> dict:
    name = f"{PROGRAM}_b{batch}"
    return {
        "program": PROGRAM,
        "family": "closure",
        "input": "lm",
        "model": "encoder",
        "loop": "closure",
        "optimizer": "adamw",
        "name": name,
        "batch": batch,
        "seq": SEQ,
        "iters": 3,
        "workload": f"{PROGRAM} (closure) batch {batch} seq {SEQ}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--one", help="record this one spec (JSON) in this process")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.one:
        return zoo_one.run(json.loads(args.one), out, args.device)

    def one(b: int) -> int:
        cmd = [sys.executable, __file__, "--out", str(out), "--device", args.device]
        cmd += ["--one", json.dumps(spec(b))]
        return subprocess.run(cmd, check=False).returncode

    batches = [int(x) for x in args.batches.split(",")]
    with ThreadPoolExecutor(len(batches)) as pool:  # side by side on the one GPU
        rcs = list(pool.map(one, batches))
    print("rc", dict(zip(batches, rcs)))
    return max(rcs)


if __name__ == "__main__":
    sys.exit(main())
