"""Compare vramscope's memory categories and leaks with what a program knew about its
own memory (the ground-truth recordings of tests/workloads/truth, schema
``vramscope-truth/1``: NAME.truth.json beside NAME.pickle.xz).

Used by tests/model/test_categories_truth.py and by the table script
tests/workloads/categories_vs_truth.py.  Truth files live in tests/data/truth;
a snapshot too big for the repository lies in ../shared/truth beside the checkout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRUTH_DIRS = (ROOT / "tests" / "data" / "truth", ROOT.parent / "shared" / "truth")
# Kinds whose loop is a plain training / eval loop (the categories are judged on them).
LOOP_KINDS = ("train", "leak", "eval", "sweep", "remedy", "ring")


def truth_files() -> list[Path]:
    """Every NAME.truth.json found (first directory wins for a name)."""
    seen: dict[str, Path] = {}
    for d in TRUTH_DIRS:
        if d.is_dir():
            for p in sorted(d.glob("*.truth.json")):
                seen.setdefault(p.name, p)
    return [seen[k] for k in sorted(seen)]


def snapshot_for(truth_path: Path) -> Path | None:
    """NAME.pickle.xz (or .pickle) in any truth directory."""
    name = truth_path.name[: -len(".truth.json")]
    for d in (truth_path.parent, *TRUTH_DIRS):
        for suffix in (".pickle.xz", ".pickle"):
            p = d / f"{name}{suffix}"
            if p.is_file():
                return p
    return None


@dataclass
class Comparison:
    """One recording: our figures beside the program's own."""

    name: str
    kind: str
    truth: dict
    peak_event: int | None = None
    peak_bytes: int = 0
    ours_at_peak: dict = field(default_factory=dict)
    truth_live_at_peak: dict = field(default_factory=dict)  # truth blocks live at our peak
    truth_bytes: dict = field(default_factory=dict)  # the program's exact bytes
    address_mismatch: dict = field(default_factory=dict)  # bytes of truth blocks we label otherwise
    ours_at_end: dict = field(default_factory=dict)
    # beside it: what CUDA graphs' outputs hold in their pools, counted free by the allocator
    graph_held_at_end: dict = field(default_factory=dict)
    iterations_found: int = 0
    leaked_at_peak: int = 0  # of the peak, bytes kept by the leaks found
    act_at_last_backward: int = 0  # our activations when the last backward pass starts
    leaks: list = field(default_factory=list)
    error: str | None = None

    def unknown_share(self) -> float:
        return self.ours_at_peak.get("unknown", 0) / self.peak_bytes if self.peak_bytes else 0.0


TRUTH_KEYS = {
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer_state",
    "activation": "activations",
    "input": "inputs",
}


def compare(truth_path: Path) -> Comparison:
    """Load the snapshot of ``truth_path``, classify it, set the figures side by side."""
    from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay.timeline import build_timeline

    truth = json.loads(truth_path.read_text())
    name = truth.get("name", truth_path.name[: -len(".truth.json")])
    cmp = Comparison(name=name, kind=truth.get("kind", ""), truth=truth)
    snap_path = snapshot_for(truth_path)
    if snap_path is None:
        cmp.error = "snapshot not found"
        return cmp
    snap = load_snapshot(snap_path, use_cache=False)
    timeline = build_timeline(snap, keyframes=False)
    device = int(truth.get("device") or 0)
    if timeline.replay(device) is None:
        device = min(timeline.devices) if timeline.devices else device
    if timeline.replay(device) is None:
        cmp.error = "no trace events"
        return cmp
    bd = MemoryBreakdown.build(snap, timeline, device)
    k = int(np.argmax(bd.requested)) if bd.n_events else None
    cmp.peak_event = k
    cmp.peak_bytes = int(bd.requested[k]) if k is not None else 0
    cmp.ours_at_peak = bd.split_at(k) if k is not None else {}
    cmp.ours_at_end = bd.split_at(bd.n_events - 1) if bd.n_events else {}
    cmp.graph_held_at_end = bd.graph_held_at(bd.n_events - 1) if bd.n_events else {}
    cmp.iterations_found = len(bd.iterations)
    cmp.leaks = bd.leaks
    cmp.leaked_at_peak = bd.leaked_bytes_at(k) if k is not None else 0
    train = [it for it in bd.iterations if it.complete and it.kind == "train"]
    if train:
        last = train[-1]
        seg = np.flatnonzero(bd.phases.phase[last.start : last.end + 1] == 2)  # backward
        if len(seg):
            cmp.act_at_last_backward = bd.split_at(last.start + int(seg[0]) - 1)["activation"]
    iv = bd.intervals
    live_peak = (iv.start <= k) & (iv.end > k) if k is not None else np.zeros(len(iv), bool)
    live_end = iv.end >= bd.n_events
    for ours, key in TRUTH_KEYS.items():
        t = truth.get(key) or {}
        cmp.truth_bytes[ours] = int(t.get("bytes", 0) or 0)
        blocks = np.array(t.get("blocks") or [], np.int64).reshape(-1, 2)
        cmp.truth_live_at_peak[ours] = _live_bytes(iv, live_peak, blocks, live_end)
        if ours in ("parameter", "optimizer_state"):
            # Truth at snapshot time: the blocks alive at the end must carry our category.
            cat = CATEGORY_NAMES.index(ours)
            cmp.address_mismatch[ours] = _mislabelled(iv, live_end, bd.category, cat, blocks)
    return cmp


def _live_bytes(iv, live: np.ndarray, blocks: np.ndarray, at_end: np.ndarray) -> int:
    """Bytes of the truth blocks (taken at the end) whose allocation - the one alive at the
    end at that address, not an earlier one that reused it - is live at that moment."""
    if not len(blocks):
        return 0
    ids = np.flatnonzero(at_end)
    hit = np.isin(blocks[:, 0], iv.addr[ids[live[ids]]])
    return int(blocks[hit, 1].sum())


def _mislabelled(iv, live: np.ndarray, category: np.ndarray, cat: int, blocks: np.ndarray) -> int:
    """Bytes of truth blocks whose live allocation (by address) is not labelled ``cat``."""
    if not len(blocks):
        return 0
    ids = np.flatnonzero(live)
    order = np.argsort(iv.addr[ids])
    addrs = iv.addr[ids][order]
    pos = np.searchsorted(addrs, blocks[:, 0])
    pos_c = np.minimum(pos, max(len(addrs) - 1, 0))
    found = (
        (pos < len(addrs)) & (addrs[pos_c] == blocks[:, 0])
        if len(addrs)
        else np.zeros(len(blocks), bool)
    )
    wrong = ~found.copy()
    wrong[found] = category[ids[order][pos_c[found]]] != cat
    return int(blocks[wrong, 1].sum())


def leak_line(truth: dict) -> tuple[str, int] | None:
    lk = truth.get("leak")
    if not lk or not lk.get("file"):
        return None
    return lk["file"], int(lk["line"])


def table(comparisons: list[Comparison]) -> str:
    """A Markdown table: ours at the peak vs the program's bytes, per recording."""
    from vramscope.viewer.model.core.units import format_bytes as fb

    head = (
        "| recording | peak | parameter ours / truth | optimizer_state ours / truth "
        "| gradient ours (peak, end) / truth | activation ours (peak, last backward start) "
        "/ truth (saved by the last forward) "
        "| unknown | iterations ours / truth | leak ours / truth |"
    )
    lines = [head, "|" + "---|" * 9]
    for c in comparisons:
        if c.error:
            lines.append(f"| {c.name} | {c.error} |" + " |" * 7)
            continue
        o, t, tl = c.ours_at_peak, c.truth_bytes, c.truth_live_at_peak

        def pair(key, at_peak=True, o=o, t=t, tl=tl):
            ours = o.get(key, 0)
            ref = tl.get(key, 0) if at_peak else t.get(key, 0)
            dev = f" ({(ours - ref) / ref:+.1%})" if ref else ""
            return f"{fb(ours)} / {fb(ref)}{dev}"

        truth_lk = c.truth.get("leak")
        ours_lk = (
            "; ".join(f"{lk.frame} {fb(lk.bytes_per_iteration)}/it" for lk in c.leaks[:2]) or "none"
        )
        truth_s = (
            "none"
            if not truth_lk
            else f"{Path(truth_lk['file']).name}:{truth_lk['line']} "
            f"{fb(int(truth_lk.get('bytes_per_iteration') or 0))}/it"
        )
        grad = (
            f"{fb(o.get('gradient', 0))}, {fb(c.ours_at_end.get('gradient', 0))} / "
            f"{fb(t.get('gradient', 0))}"
        )
        lines.append(
            f"| {c.name} | {fb(c.peak_bytes)} | {pair('parameter')} | {pair('optimizer_state')} "
            f"| {grad} | {fb(o.get('activation', 0))}, {fb(c.act_at_last_backward)} / "
            f"{fb(t.get('activation', 0))} "
            f"| {c.unknown_share():.1%} | {c.iterations_found} / "
            f"{c.truth.get('iterations', '?')} | {ours_lk} / {truth_s} |"
        )
    return "\n".join(lines)


# torch.profiler's export_memory_timeline JSON: [times, sizes]; sizes[t][0] is a base (0),
# then one column per category in torch's _CATEGORY_TO_INDEX order.
PROFILER_COLUMNS = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)


def profiler_split_at_peak(c: Comparison) -> dict | None:
    """torch.profiler's own split at its peak (a second opinion, not the truth), from the
    memory timeline the recording wrote beside it (None when there is none)."""
    import gzip

    name = (c.truth.get("profiler") or {}).get("memory_timeline_json")
    if not name:
        return None
    for d in TRUTH_DIRS:
        p = d / name
        if p.is_file():
            _times, sizes = json.loads(gzip.decompress(p.read_bytes()))
            arr = np.asarray(sizes, np.int64)
            k = int(np.argmax(arr.sum(axis=1)))
            return dict(zip(PROFILER_COLUMNS, arr[k, 1:].tolist()))
    return None


def profiler_table(comparisons: list[Comparison]) -> str:
    """Ours at our peak beside torch.profiler's categories at its peak."""
    from vramscope.viewer.model.core.units import format_bytes as fb

    lines = []
    for c in comparisons:
        prof = None if c.error else profiler_split_at_peak(c)
        if prof is None:
            continue
        total = sum(prof.values())
        lines.append(
            f"{c.name}: torch.profiler at its peak ({fb(total)}): "
            + ", ".join(f"{k} {fb(v)} ({v / total:.0%})" for k, v in prof.items() if v)
        )
        lines.append(
            f"{c.name}: vramscope at its peak ({fb(c.peak_bytes)}): "
            + ", ".join(
                f"{k} {fb(v)} ({v / c.peak_bytes:.0%})" for k, v in c.ours_at_peak.items() if v
            )
        )
    return "\n".join(lines)
