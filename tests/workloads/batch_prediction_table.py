"""Batch-size what-if against the truth runs: predicted vs real peak reserved, and the
largest batch that fits a limit.

The truth kit (tests/workloads/truth/, README there) records the same workload at several
batch sizes, each in a fresh process, with ``memory_stats``.  From each recording this
predicts the peak reserved bytes of the others (``vramscope whatif FILE --batch-scale F``)
and, from a sweep recording and from the limit recordings, the largest batch that fits the
2 GiB limit (``vramscope advise FILE --batch N --memory-limit ...``)::

    .venv/bin/python tests/workloads/batch_prediction_table.py [--workspaces] [TRUTH_DIR ...]
    .venv/bin/python tests/workloads/batch_prediction_table.py --compiled [TRUTH_DIR ...]

``--workspaces`` first prints the workspace study: at half and 1.5x the recorded batch,
each cuDNN workspace's recorded size, its real size in the other run, the estimate and the
proportional size, then per pair how many are exact.  ``--compiled`` prints only the
compiled sweeps (``compiled_*_b*``, torch.compile): every pair, its label and range.

Default directories: tests/data/truth and /work/shared/truth (the first holding a file wins).
The tests (tests/model/test_remedies_truth.py) use the same functions.
"""

from __future__ import annotations

import json
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRS = [ROOT / "tests" / "data" / "truth", ROOT.parent / "shared" / "truth"]


def find(name: str, dirs=None) -> Path | None:
    """``NAME.pickle.xz`` (or .pickle) in the first directory that has it."""
    for d in dirs or DIRS:
        for ext in (".pickle.xz", ".pickle"):
            p = Path(d) / (name + ext)
            if p.is_file():
                return p
    return None


def truth_of(path: Path) -> dict:
    stem = path.name.split(".pickle")[0]
    return json.loads((path.parent / f"{stem}.truth.json").read_text())


def sidecar_of(path: Path) -> dict:
    stem = path.name.split(".pickle")[0]
    return json.loads((path.parent / f"{stem}.json").read_text())


def sweeps(dirs=None) -> dict[str, dict[int, Path]]:
    """family -> batch -> recording, for the sweep recordings present."""
    out: dict[str, dict[int, Path]] = {}
    for d in dirs or DIRS:
        for p in sorted(Path(d).glob("sweep_*_b*.pickle*")) if Path(d).is_dir() else []:
            m = re.fullmatch(r"sweep_([a-z0-9]+)_b(\d+)\.pickle(\.xz)?", p.name)
            if m and (p.parent / (p.name.split(".pickle")[0] + ".truth.json")).is_file():
                out.setdefault(m.group(1), {}).setdefault(int(m.group(2)), p)
    return out


def compiled_sweeps(dirs=None) -> dict[str, dict[int, Path]]:
    """family -> batch -> recording, for the compiled sweeps present (``compiled_*_b*``:
    the same program under ``torch.compile`` at several batch sizes)."""
    out: dict[str, dict[int, Path]] = {}
    for d in dirs or DIRS:
        for p in sorted(Path(d).glob("compiled_*_b*.pickle*")) if Path(d).is_dir() else []:
            m = re.fullmatch(r"compiled_([a-z0-9]+)_b(\d+)\.pickle(\.xz)?", p.name)
            if m and (p.parent / (p.name.split(".pickle")[0] + ".truth.json")).is_file():
                out.setdefault(m.group(1), {}).setdefault(int(m.group(2)), p)
    return out


def prediction_of(src: Path, batch: int):
    """The batch prediction at ``batch`` from ``src`` as the what-if gives it
    (:class:`~vramscope.viewer.model.remedies.batch_scale.BatchPrediction`: its peak, whether
    it is an estimate, and the range)."""
    from vramscope.viewer.model.remedies import batch_scale

    case, j, truth = case_of(src)
    b0 = int(truth["batch_size"])
    return batch_scale.predict(case, j, Fraction(batch, b0), recorded_batch=b0)


def compiled_rows(dirs=None) -> list[dict]:
    """Every (family, from, to) pair of the compiled sweeps, from != to: predicted vs real
    peak reserved, whether the prediction is an estimate, and its range."""
    rows = []
    for family, by_batch in sorted(compiled_sweeps(dirs).items()):
        for b0, src in sorted(by_batch.items()):
            for b1, dst in sorted(by_batch.items()):
                if b1 == b0:
                    continue
                p = prediction_of(src, b1)
                real = real_peak_reserved(dst)
                lo, hi = p.range if p.range else (p.peak, p.peak)
                rows.append(
                    {
                        "family": family,
                        "from_batch": b0,
                        "to_batch": b1,
                        "scale": b1 / b0,
                        "predicted": p.peak,
                        "real": real,
                        "error": p.peak / real - 1.0,
                        "is_estimate": p.is_estimate,
                        "low": lo,
                        "high": hi,
                    }
                )
    return rows


def print_compiled(dirs=None) -> None:
    """The compiled sweeps' table (``--compiled``)."""
    from vramscope.viewer.model.core.units import format_bytes as fb

    print("compiled (torch.compile) batch what-if: predicted vs real peak reserved")
    print(
        f"{'family':<8}{'from':>6}{'to':>6}{'scale':>7}{'predicted':>13}{'real':>13}"
        f"{'error':>9}{'estimate':>10}   {'range':<28}{'real in it':>10}"
    )
    for r in compiled_rows(dirs):
        print(
            f"{r['family']:<8}{r['from_batch']:>6}{r['to_batch']:>6}{r['scale']:>7.2f}"
            f"{fb(r['predicted']):>13}{fb(r['real']):>13}{r['error'] * 100:>+8.1f}%"
            f"{'yes' if r['is_estimate'] else 'no':>10}   "
            + f"{fb(r['low'])} .. {fb(r['high'])}".ljust(28)
            + f"{'yes' if r['low'] <= r['real'] <= r['high'] else 'NO':>10}"
        )


_CASES: dict[str, tuple] = {}
_EVIDENCE: dict[str, object] = {}


def evidence_of(path: Path):
    """The :class:`~vramscope.viewer.model.remedies.evidence.Evidence` of a truth recording."""
    case_of(path)
    return _EVIDENCE[str(path)]


def case_of(path: Path):
    """(what-if case, judgement) of a truth recording, with its recorded batch."""
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.remedies import evidence, scaling
    from vramscope.viewer.model.whatif import prepare

    key = str(path)
    if key not in _CASES:
        truth = truth_of(path)
        case = prepare(load_snapshot(str(path), use_cache=False))
        evd = evidence.gather(case)
        j = scaling.judge(case, int(truth["batch_size"]), evd)
        _CASES[key] = (case, j, truth)
        _EVIDENCE[key] = evd
    return _CASES[key]


def _memory_stats(path: Path) -> dict:
    return sidecar_of(path).get("memory_stats") or truth_of(path).get("memory_stats_end") or {}


def real_peak_reserved(path: Path) -> int:
    return int(_memory_stats(path)["reserved_bytes.all.peak"])


def request_counts(path: Path) -> tuple[int, int]:
    """(allocations, frees) the recorded run made: the allocator's own counters, taken
    right after the snapshot (a sweep records from before its first allocation, so they
    count the recorded requests).  Read from the sidecar, not the snapshot, so that the
    tests can tell at collection time which runs of one program are comparable request
    by request; the tests then check the streams themselves."""
    stats = _memory_stats(path)
    return int(stats["allocation.all.allocated"]), int(stats["allocation.all.freed"])


def predict_peak(src: Path, batch: int, proportional: bool = False) -> int:
    """Peak reserved predicted for ``batch`` from the recording ``src``; ``proportional``:
    with every workspace scaled in proportion (no fixed weight part: the model before)."""
    import dataclasses

    from vramscope.viewer.model.remedies import batch_scale

    case, j, truth = case_of(src)
    if proportional:
        j = dataclasses.replace(j, fixed=None)
    f = Fraction(batch, int(truth["batch_size"]))
    return batch_scale.scaled_case(case, j, f).simulate().peak_reserved_until_oom


def predict_range(src: Path, batch: int):
    """The estimate's range (:class:`~vramscope.viewer.model.remedies.batch_scale.PeakEstimate`)
    of peak reserved at ``batch`` from ``src``; None when no workspace is uncertain."""
    from vramscope.viewer.model.remedies import batch_scale

    case, j, truth = case_of(src)
    return batch_scale.estimate_range(case, j, Fraction(batch, int(truth["batch_size"])))


def sweep_rows(dirs=None) -> list[dict]:
    """Every (family, from, to) pair of the sweeps: predicted vs real peak reserved."""
    rows = []
    for family, by_batch in sorted(sweeps(dirs).items()):
        for b0, src in sorted(by_batch.items()):
            for b1, dst in sorted(by_batch.items()):
                pred = predict_peak(src, b1)
                real = real_peak_reserved(dst)
                est = predict_range(src, b1) if b1 != b0 else None
                prop = predict_peak(src, b1, proportional=True) if est else pred
                rows.append(
                    {
                        "family": family,
                        "from_batch": b0,
                        "to_batch": b1,
                        "scale": b1 / b0,
                        "predicted": pred,
                        "real": real,
                        "error": pred / real - 1.0,
                        "proportional_error": prop / real - 1.0,
                        "estimate_low": est.low if est else pred,
                        "estimate_high": est.high if est else pred,
                        "workspaces": est.workspaces if est else 0,
                    }
                )
    return rows


def limit_rows(dirs=None) -> list[dict]:
    """Largest batch under the limit search's limit, predicted from several recordings."""
    from vramscope.viewer.model.remedies import batch_scale

    fit = find("limit_sweep_gpt2_fit", dirs)
    oom = find("limit_sweep_gpt2_oom", dirs)
    src_truth = truth_of(fit or oom) if (fit or oom) else None
    if src_truth is None:
        return []
    search = src_truth["search"]
    limit = int(search["memory_limit_bytes"])
    real = int(search["largest_batch_that_fits"])
    sources = [p for p in (fit, oom) if p is not None]
    sources += [p for b, p in sorted(sweeps(dirs).get("gpt2", {}).items())]
    rows = []
    for src in sources:
        case, j, truth = case_of(src)
        found = batch_scale.largest_fitting_scale(
            case, j, limit, recorded_batch=int(truth["batch_size"])
        )
        rows.append(
            {
                "from": src.name.split(".pickle")[0],
                "from_batch": truth["batch_size"],
                "limit": limit,
                "predicted": found.batch,
                "real": real,
            }
        )
    return rows


def advice_of(path: Path, limit: int | None = None):
    """``vramscope advise`` on a truth recording (its own batch and limit)."""
    from vramscope.viewer.model.remedies.advise import advise

    case, _, truth = case_of(path)
    return advise(case, int(truth["batch_size"]), limit)


def remedy_rows(dirs=None) -> list[dict]:
    """Remedies predicted from one recording vs the real run with that change made.

    ``eval_keeps_outputs`` -> ``eval_no_grad`` (free what is kept), and the fp32 OOM at the
    limit -> the remedy run that fitted (``remedy_gpt2_fits``: bf16 / checkpointing)."""
    rows = []
    keep, nograd = find("eval_keeps_outputs", dirs), find("eval_no_grad", dirs)
    if keep and nograd:
        a = advice_of(keep)
        r = next((r for r in a.remedies if r.remedy == "free_kept"), None)
        rows.append(
            {
                "from": "eval_keeps_outputs",
                "remedy": "free_kept",
                "to": "eval_no_grad",
                "method": r.method if r else None,
                "predicted": r.predicted_peak_reserved_bytes if r else None,
                "real": real_peak_reserved(nograd),
            }
        )
    fixed = find("remedy_gpt2_fits", dirs)
    if fixed:
        t = truth_of(fixed)["remedy"]
        base = find(t.get("recording", "limit_sweep_gpt2_oom"), dirs) or find(
            "limit_sweep_gpt2_oom", dirs
        )
        if base:
            a = advice_of(base, t.get("memory_limit_bytes"))
            name = t["remedy"]["name"]
            want = {
                "bf16_autocast": "bf16_autocast",
                "grad_checkpointing": "gradient_checkpointing",
            }.get(name)
            r = next((r for r in a.remedies if r.remedy == want), None)
            rows.append(
                {
                    "from": base.name.split(".pickle")[0],
                    "remedy": name,
                    "to": "remedy_gpt2_fits",
                    "method": r.method if r else None,
                    "predicted": r.predicted_peak_reserved_bytes if r else None,
                    "real": int(t["remedy"]["peak_reserved"]),
                }
            )
    return rows


def workspace_rows(dirs=None) -> list[dict]:
    """Per sweep pair whose runs made the same requests: every workspace's recorded size,
    its real size at the other batch, the estimate (fixed weight part + per-sample part,
    viewer/model/remedies/workspaces.py) and the proportional size."""
    import dataclasses

    import numpy as np

    out = []
    for family, by_batch in sorted(sweeps(dirs).items()):
        for b0, src in sorted(by_batch.items()):
            case, j, _ = case_of(src)
            w = np.flatnonzero(j.workspace)
            if not len(w):
                continue
            evd = evidence_of(src)
            how = j.fixed_how
            for b1, dst in sorted(by_batch.items()):
                other = case_of(dst)[0].requests
                if (
                    b1 == b0
                    or len(other) != len(case.requests)
                    or not (other.kind == case.requests.kind).all()
                ):
                    continue
                f = Fraction(b1, b0)
                est = j.scaled_sizes(f)[w]
                prop = dataclasses.replace(j, fixed=None).scaled_sizes(f)[w]
                out.append(
                    {
                        "family": family,
                        "from_batch": b0,
                        "to_batch": b1,
                        "request": w,
                        "phase": evd.phase[w],
                        "iteration": evd.iteration[w],
                        "recorded": j.size[w],
                        "fixed": j.fixed[w],
                        "how": how[w],
                        "real": other.size[w].astype(np.int64),
                        "estimate": est,
                        "proportional": prop,
                    }
                )
    return out


def print_workspaces(dirs=None, scales=(0.5, 1.5)) -> None:
    """The workspace study: each workspace of the first iteration that has them, at half
    and 1.5x the recorded batch, then a summary line per pair."""
    import numpy as np

    from vramscope.viewer.model.remedies import evidence, workspaces

    rows = workspace_rows(dirs)
    for r in rows:
        if r["to_batch"] / r["from_batch"] not in scales:
            continue
        print(
            f"\n{r['family']} {r['from_batch']} -> {r['to_batch']}: workspaces of the first "
            "iteration (bytes; how: D decomposed s x W + k x O + d, W weight beside it "
            "fixed, - proportional)"
        )
        print(
            f"{'request':>8} {'phase':<9}{'recorded':>12}{'fixed':>10}{'real':>12}"
            f"{'estimate':>12}{'error':>8}{'proportional':>14}{'error':>8}  how"
        )
        it = r["iteration"]
        first = it == it.min()
        for k in np.flatnonzero(first):
            real = int(r["real"][k])
            print(
                f"{int(r['request'][k]):>8} {evidence.PHASES[r['phase'][k]]:<9}"
                f"{int(r['recorded'][k]):>12}{int(r['fixed'][k]):>10}{real:>12}"
                f"{int(r['estimate'][k]):>12}{r['estimate'][k] / real - 1:>+8.1%}"
                f"{int(r['proportional'][k]):>14}{r['proportional'][k] / real - 1:>+8.1%}  "
                + "-DW"[int(r["how"][k])]
            )
    print(
        "\nworkspaces per pair: exact (within 2 KiB) and the summed miss, estimate vs proportional"
    )
    for r in rows:
        e = np.abs(r["estimate"] - r["real"])
        p = np.abs(r["proportional"] - r["real"])
        n = len(e)
        print(
            f"  {r['family']:<8}{r['from_batch']:>4} -> {r['to_batch']:<4} exact "
            f"{(e < 2048).sum():>4} / {n} (proportional {(p < 2048).sum():>4}), miss "
            f"{e.sum() / 2**20:8.1f} MiB (proportional {p.sum() / 2**20:8.1f} MiB); "
            f"decomposed {(r['how'] == workspaces.DECOMPOSED).sum()}, "
            f"weight beside {(r['how'] == workspaces.WEIGHT_BESIDE).sum()}"
        )


def main(argv: list[str]) -> int:
    from vramscope.viewer.model.core.units import format_bytes as fb

    study = "--workspaces" in argv
    compiled = "--compiled" in argv
    argv = [a for a in argv if a not in ("--workspaces", "--compiled")]
    dirs = [Path(a) for a in argv] or None
    if compiled:
        print_compiled(dirs)
        return 0
    rows = sweep_rows(dirs)
    if not rows:
        print("no sweep recordings found in", ", ".join(str(d) for d in dirs or DIRS))
        return 1
    if study:
        print_workspaces(dirs)
        print()
    print(
        "batch-size what-if: peak reserved predicted from one recording vs the real run "
        "(proportional: the error with every workspace scaled in proportion)"
    )
    print(
        f"{'family':<8}{'from':>6}{'to':>6}{'scale':>7}{'predicted':>13}{'real':>13}{'error':>9}"
        f"{'proportional':>14}   {'estimate range (workspaces)':<30}{'real in it':>10}"
    )
    for r in rows:
        if r["from_batch"] == r["to_batch"]:
            continue
        print(
            f"{r['family']:<8}{r['from_batch']:>6}{r['to_batch']:>6}{r['scale']:>7.2f}"
            f"{fb(r['predicted']):>13}{fb(r['real']):>13}{r['error'] * 100:>+8.1f}%"
            f"{r['proportional_error'] * 100:>+13.1f}%   "
            + (
                f"{fb(r['estimate_low'])} .. {fb(r['estimate_high'])}"
                if r["workspaces"]
                else "(no workspaces: exact)"
            ).ljust(30)
            + f"{'yes' if r['estimate_low'] <= r['real'] <= r['estimate_high'] else 'NO':>10}"
        )
    half = [r for r in rows if r["scale"] in (0.5, 1.5)]
    if half:
        print(
            f"at 0.5x and 1.5x: {len(half)} predictions, max |error| "
            f"{max(abs(r['error']) for r in half) * 100:.1f}% (proportional "
            f"{max(abs(r['proportional_error']) for r in half) * 100:.1f}%)"
        )
    moved = [r for r in rows if r["from_batch"] != r["to_batch"]]
    print(
        f"all {len(moved)} pairs: mean |error| "
        f"{sum(abs(r['error']) for r in moved) / len(moved) * 100:.1f}%, max "
        f"{max(abs(r['error']) for r in moved) * 100:.1f}% (proportional "
        f"{sum(abs(r['proportional_error']) for r in moved) / len(moved) * 100:.1f}%, "
        f"{max(abs(r['proportional_error']) for r in moved) * 100:.1f}%)"
    )
    lrows = limit_rows(dirs)
    if lrows:
        print(f"\nlargest batch that fits {fb(lrows[0]['limit'])} (real: {lrows[0]['real']})")
        for r in lrows:
            print(
                f"  from {r['from']:<24} (batch {r['from_batch']:>3}): predicted {r['predicted']}"
            )
    rrows = remedy_rows(dirs)
    if rrows:
        print("\nremedies: predicted peak reserved vs the real run with the change made")
        for r in rrows:
            pred = fb(r["predicted"]) if r["predicted"] is not None else "(not offered)"
            err = f"{r['predicted'] / r['real'] - 1:+.1%}" if r["predicted"] else ""
            print(
                f"  {r['from']} + {r['remedy']} ({r['method']}): predicted {pred}, "
                f"real ({r['to']}) {fb(r['real'])} {err}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
