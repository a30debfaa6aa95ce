"""Which ingredient makes checkpointed backward fail under memory-history recording?

    PYTHONUNBUFFERED=1 python3 tests/workloads/checkpoint_diag.py --out $OUT [--jobs 6]

Runs ``checkpoint_trainer.py`` in many variants at once (each a small GPT-2 on the
same GPU): with and without recording, reentrant and not, each recording setting and
ingredient switched off in turn, the plain loop, and the capture's runner.  Prints one
line per variant (ok with its losses, or the error) and writes ``checkpoint_diag.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = str(HERE / "checkpoint_trainer.py")

REC = ["--self-record", "all:python"]
# transformers' defaults: GPT2Config() (124M, dropout 0.1), sdpa attention, no determinism.
ISSUE = [
    "--layers",
    "12",
    "--hidden",
    "768",
    "--heads",
    "12",
    "--vocab",
    "50257",
    "--seq",
    "256",
    "--dropout",
    "0.1",
    "--attn",
    "sdpa",
    "--nondeterministic",
]
SMALL_ISSUE = ["--dropout", "0.1", "--attn", "sdpa", "--nondeterministic"]
VARIANTS: dict[str, list[str]] = {
    "issue_re": ["--reentrant", *ISSUE],
    "issue_nr": ISSUE,
    "issue_rec_re": ["--reentrant", *ISSUE, *REC],
    "issue_rec_nr": [*ISSUE, *REC],
    "issue_capture_re": ["@capture", "--reentrant", *ISSUE],
    "issue_capture_nr": ["@capture", *ISSUE],
    "small_rec_re": ["--reentrant", *SMALL_ISSUE, *REC],
    "small_rec_nr": [*SMALL_ISSUE, *REC],
    "small_rec_nr_no_dropout": ["--attn", "sdpa", "--nondeterministic", *REC],
    "small_rec_nr_eager": ["--dropout", "0.1", "--nondeterministic", *REC],
    "small_rec_nr_deterministic": ["--dropout", "0.1", "--attn", "sdpa", *REC],
    "small_rec_nr_ctx_alloc": [*SMALL_ISSUE, "--self-record", "alloc:python"],
    "small_rec_nr_ctx_state": [*SMALL_ISSUE, "--self-record", "state:python"],
    "small_rec_nr_ctx_none": [*SMALL_ISSUE, "--self-record", "none:python"],
    "small_rec_nr_stacks_all": [*SMALL_ISSUE, "--self-record", "all:all"],
    "small_rec_nr_no_early_stop": [*SMALL_ISSUE, *REC, "--no-early-stop"],
    "small_rec_nr_monitor": [*SMALL_ISSUE, *REC, "--monitor"],
    "small_rec_re_monitor": ["--reentrant", *SMALL_ISSUE, *REC, "--monitor"],
    "small_rec_nr_no_bf16": [*SMALL_ISSUE, *REC, "--no-bf16"],
    "small_plain_rec_nr": ["--plain", *SMALL_ISSUE, *REC],
    "small_plain_rec_re": ["--plain", "--reentrant", *SMALL_ISSUE, *REC],
    # The first round's settings (eager, no dropout, deterministic): recorded fine.
    "det_rec_re": ["--reentrant", *REC],
    "det_capture_nr": ["@capture"],
}


def run(name: str, extra: list[str], timeout: float) -> dict:
    cmd = [sys.executable]
    if extra and extra[0].startswith("@capture"):
        opts = [o for o in extra[0].split(":")[1:]]
        out = tempfile.mkdtemp(prefix=f"diag-{name}-")
        cmd += ["-m", "vramscope.capture", "--out", out, *opts]
        extra = extra[1:]
    cmd += [PROGRAM, *extra]
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out_s, err_s = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out_s, err_s = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    result: dict = {}
    for line in out_s.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    return {
        "name": name,
        "cmd": cmd[1:],
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "result": result,
        "stderr_tail": err_s[-2500:],
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=6)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--only", default=None, help="comma-separated variant names")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(VARIANTS)
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, n, VARIANTS[n], args.timeout) for n in names]
        for fut in as_completed(futures):
            r = fut.result()
            results.append(r)
            res = r["result"]
            if res.get("losses") is not None:
                what = f"ok losses={res['losses']} weights_sum={res.get('weights_sum')}"
            else:
                what = f"FAIL {res.get('error') or r['stderr_tail'][-300:]!r}"
            print(f"{r['name']:28s} rc={r['rc']} {r['seconds']:6.1f}s {what}", flush=True)
            events = [
                e
                for e in res.get("raised_in_other_threads") or []
                if " KeyError " not in e and " StopIteration " not in e
            ]
            for ev in events[:40]:
                print(f"    {ev}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "checkpoint_diag.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
