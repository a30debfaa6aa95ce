"""The whole GPU at the snapshot's instant: who holds the device's memory.

The snapshot shows only this process's caching allocator.  The capture
module's sidecar adds ``gpu_memory`` (the device's total and free memory from
``cudaMemGetInfo`` and, from NVML or nvidia-smi, every process on the device
with its memory), taken right after the snapshot.  This module adds it up::

    device total = this process's reserved (the snapshot's segments)
                 + this process's memory outside the allocator
                   (NVML's figure for this pid minus reserved: the CUDA context,
                   cuBLAS/cuDNN workspaces, NCCL buffers, other libraries)
                 + each other process's memory
                 + unexplained
                 + free

``unexplained`` is the residual, shown and never hidden: NVML's figures leave
out memory no process is charged for (the driver's own reservations), whole
MiB where nvidia-smi answered, processes whose memory the driver does not
report.  A file whose sidecar has no ``gpu_memory`` (an older capture, another
tool) gives ``known=False``: nothing is guessed.

Pure Python: the live panel adds up NVML's readings with :func:`split_gpu` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..core.snapshot import Snapshot
from ..core.units import format_bytes as fb
from ..core.units import plural
from .figures import Selection, memory_stats

#: The sidecar's field written by the capture module (``capture/gpu.py``).
SIDECAR_KEY = "gpu_memory"
#: The residual is named in an OOM verdict from this size on (the table always shows it).
VERDICT_RESIDUAL_BYTES = 64 << 20
#: Other processes named one by one in a verdict; the rest are summed.
VERDICT_HOLDERS = 3
OUTSIDE_WHAT = "CUDA context, cuBLAS/cuDNN, NCCL, other libraries"


@dataclass(frozen=True)
class GpuHolder:
    """One other process on the device."""

    pid: int
    used_bytes: int | None  # None: the driver does not report it (in the residual)
    command: str | None  # its command line (``python3 train_old.py``), else its executable

    def label(self) -> str:
        return f"pid {self.pid} `{self.command}`" if self.command else f"pid {self.pid}"

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_bytes": self.used_bytes, "command": self.command}


def holders_words(holders: "Iterable[GpuHolder]") -> str:
    """``pid 4121 `python3 hold.py` holds 18.20 GiB, pid 7 ... holds 1.00 GiB`` (the
    first :data:`VERDICT_HOLDERS` named, the rest counted), largest first as given."""
    holders = list(holders)
    named = [f"{h.label()} holds {fb(h.used_bytes or 0)}" for h in holders[:VERDICT_HOLDERS]]
    rest = holders[VERDICT_HOLDERS:]
    if rest:
        named.append(
            f"{plural(len(rest), 'more process', 'more processes')} hold "
            f"{fb(sum(h.used_bytes or 0 for h in rest))}"
        )
    return ", ".join(named)


@dataclass(frozen=True)
class GpuAccounting:
    """The device's memory split by holder; the rows add up to ``total_bytes`` exactly."""

    known: bool
    reason: str | None = None  # known=False: why
    device: int | None = None
    taken_at: str | None = None  # the dump's reason ("oom", "exit", ...): its instant
    source: str | None = None  # where the process list came from: "nvml", "nvidia-smi", None
    total_bytes: int = 0
    free_bytes: int = 0
    reserved_bytes: int = 0  # this process's caching allocator (the snapshot's segments)
    this_process_bytes: int | None = None  # the driver's figure for this process
    outside_allocator_bytes: int | None = None  # this_process_bytes - reserved_bytes
    others: tuple[GpuHolder, ...] = ()
    unexplained_bytes: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def used_bytes(self) -> int:
        return self.total_bytes - self.free_bytes

    @property
    def others_bytes(self) -> int:
        return sum(h.used_bytes or 0 for h in self.others)

    def rows(self) -> list[tuple[str, int, dict[str, Any]]]:
        """(what, bytes, extra) from this process to free; the bytes add up to the total."""
        if not self.known:
            return []
        out: list[tuple[str, int, dict[str, Any]]] = [
            ("this process: reserved by PyTorch", self.reserved_bytes, {"kind": "reserved"})
        ]
        if self.outside_allocator_bytes is not None:
            out.append(
                (
                    f"this process: outside the allocator ({OUTSIDE_WHAT})",
                    self.outside_allocator_bytes,
                    {"kind": "outside_allocator"},
                )
            )
        for h in self.others:
            if h.used_bytes is not None:
                out.append((h.label(), h.used_bytes, {"kind": "process", **h.to_dict()}))
        out.append(("unexplained", self.unexplained_bytes, {"kind": "unexplained"}))
        out.append(("free", self.free_bytes, {"kind": "free"}))
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "known": self.known,
            "reason": self.reason,
            "device": self.device,
            "taken_at": self.taken_at,
            "source": self.source,
        }
        if self.known:
            d.update(
                total_bytes=self.total_bytes,
                free_bytes=self.free_bytes,
                used_bytes=self.used_bytes,
                reserved_bytes=self.reserved_bytes,
                this_process_bytes=self.this_process_bytes,
                outside_allocator_bytes=self.outside_allocator_bytes,
                others=[h.to_dict() for h in self.others],
                others_bytes=self.others_bytes,
                unexplained_bytes=self.unexplained_bytes,
                rows=[{"what": what, "bytes": n, **extra} for what, n, extra in self.rows()],
            )
        d["notes"] = list(self.notes)
        return d

    def lines(self) -> list[str]:
        """The split as a small table (one row per holder), then the notes."""
        return format_lines(self.to_dict())

    def holders_by_size(self) -> tuple[GpuHolder, ...]:
        """The other processes holding memory on the device, the largest first."""
        return tuple(
            sorted((h for h in self.others if h.used_bytes), key=lambda h: -(h.used_bytes or 0))
        )

    def holders_phrase(self) -> str:
        """Who holds the device, for an OOM verdict: ``18.20 GiB held by pid 4121
        `python train_old.py`; this process 1.00 GiB (...)``."""
        parts = []
        others = self.holders_by_size()
        if others:
            named = [
                f"{fb(h.used_bytes or 0)} {'held ' if i == 0 else ''}by {h.label()}"
                for i, h in enumerate(others[:VERDICT_HOLDERS])
            ]
            rest = others[VERDICT_HOLDERS:]
            if rest:
                named.append(
                    f"{fb(sum(h.used_bytes or 0 for h in rest))} by "
                    f"{plural(len(rest), 'more process', 'more processes')}"
                )
            parts.append(", ".join(named))
        elif self.source is not None and self.this_process_bytes is not None:
            parts.append("no other process holds memory on it")
        mine = f"this process {fb(self.reserved_bytes)} reserved by PyTorch"
        if self.outside_allocator_bytes is not None:
            mine = (
                f"this process {fb(self.reserved_bytes + self.outside_allocator_bytes)} "
                f"({fb(self.reserved_bytes)} reserved by PyTorch, "
                f"{fb(self.outside_allocator_bytes)} outside the allocator)"
            )
        parts.append(mine)
        if self.source is None:
            parts.append(
                f"{fb(self.unexplained_bytes)} held by processes not known (no process list)"
            )
        elif abs(self.unexplained_bytes) >= VERDICT_RESIDUAL_BYTES:
            parts.append(f"{fb(self.unexplained_bytes)} unexplained")
        return "; ".join(parts)


@dataclass(frozen=True)
class GpuShortfall:
    """Why the device had no room at an OOM, when other memory than the allocator's own
    held it: the holders whose bytes, had they been free, would have made room.

    ``blamed``: "other processes", "outside the allocator" (this process's memory outside
    PyTorch's allocator) or "both".  Judged on the request's new segment (``need_bytes``)
    against the device's free memory recorded at the OOM."""

    accounting: GpuAccounting
    free_bytes: int  # free on the device at the OOM (after the allocator's own release)
    need_bytes: int  # the new segment (or pages) the allocator asked the device for
    blamed: str
    holders: tuple[GpuHolder, ...]  # the other processes blamed, largest first
    outside_bytes: int  # this process's memory outside the allocator blamed (0: not)

    @property
    def freed_bytes(self) -> int:
        """What the blamed holders held: free too without them."""
        return sum(h.used_bytes or 0 for h in self.holders) + self.outside_bytes

    @property
    def could_have_bytes(self) -> int:
        """What the allocator could have had: its reserved plus the device's free memory."""
        return self.accounting.reserved_bytes + self.free_bytes

    def who(self) -> str:
        """The blamed holders in a few words: ``pid 4121`` / ``them`` / ``that memory``."""
        if self.blamed == "outside the allocator":
            return "that memory"
        if self.blamed == "other processes" and len(self.holders) == 1:
            return f"pid {self.holders[0].pid}"
        return "them"

    def holders_words(self) -> str:
        """``pid 4121 `python3 hold.py` holds 18.20 GiB, pid 7 ... holds 1.00 GiB``."""
        return holders_words(self.holders)

    def words(self) -> str:
        """The verdict's first part: who held the device, what the allocator could have
        had, and that the request would have fitted without them."""
        acc = self.accounting
        outside = acc.outside_allocator_bytes
        mine = (
            f"this process {fb(outside)} outside the allocator"
            if outside is not None and outside > 0
            else None
        )
        if self.blamed == "outside the allocator":
            parts = [
                f"this process holds {fb(self.outside_bytes)} of the GPU outside "
                f"PyTorch's allocator ({OUTSIDE_WHAT})"
            ]
            others = [h for h in acc.others if h.used_bytes]
            if others:
                parts.append(f"other processes {fb(sum(h.used_bytes or 0 for h in others))}")
            head = "the GPU was full"
        else:
            parts = [self.holders_words()]
            if mine is not None:
                parts.append(mine)
            head = (
                "the GPU was full because of another process"
                if self.blamed == "other processes" and len(self.holders) == 1
                else "the GPU was full because of other processes"
                if self.blamed == "other processes"
                else "the GPU was full"
            )
        if abs(acc.unexplained_bytes) >= VERDICT_RESIDUAL_BYTES:
            parts.append(f"{fb(acc.unexplained_bytes)} unexplained")
        parts.append(f"{fb(self.free_bytes)} free")
        return (
            f"{head}: {', '.join(parts)}; the allocator could have had "
            f"{fb(self.could_have_bytes)} ({fb(acc.reserved_bytes)} reserved + "
            f"{fb(self.free_bytes)} free), and without {self.who()} its new "
            f"{fb(self.need_bytes)} segment would have fitted "
            f"({fb(self.free_bytes + self.freed_bytes)} free)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "blamed": self.blamed,
            "holders": [h.to_dict() for h in self.holders],
            "outside_allocator_bytes": self.outside_bytes,
            "freed_bytes": self.freed_bytes,
            "free_bytes": self.free_bytes,
            "need_bytes": self.need_bytes,
            "reserved_bytes": self.accounting.reserved_bytes,
            "could_have_bytes": self.could_have_bytes,
            "free_without_bytes": self.free_bytes + self.freed_bytes,
        }


def shortfall(acc: GpuAccounting, free: int, need: int) -> GpuShortfall | None:
    """Who kept the device from giving ``need`` bytes when it had ``free`` left: the other
    processes when freeing them alone makes room, else this process's memory outside the
    allocator, else both together; None when the device had room (the process was at its
    own limit), when nothing known held it, or when even without them it had too little
    (a GPU too small for the run, not a GPU taken by others)."""
    if not acc.known or free < 0 or free >= need:
        return None
    others = acc.holders_by_size()
    held = sum(h.used_bytes or 0 for h in others)
    outside = max(acc.outside_allocator_bytes or 0, 0)
    if others and free + held >= need:
        return GpuShortfall(acc, free, need, "other processes", others, 0)
    if outside and free + outside >= need:
        return GpuShortfall(acc, free, need, "outside the allocator", (), outside)
    if (others or outside) and free + held + outside >= need:
        return GpuShortfall(acc, free, need, "both", others, outside)
    return None


def format_lines(d: Mapping[str, Any]) -> list[str]:
    """:meth:`GpuAccounting.lines` from its ``to_dict()`` (what ``summary --json`` holds)."""
    if not d.get("known"):
        return [f"the whole GPU: not known ({d.get('reason')})"]
    when = f"at the {d['taken_at']} dump" if d.get("taken_at") else "at the dump"
    src = {"nvml": "NVML", "nvidia-smi": "nvidia-smi"}.get(d.get("source") or "")
    where = f"device {d.get('device')}, {when}" + (f", processes from {src}" if src else "")
    lines = [f"the whole GPU ({where}): {fb(d['total_bytes'])}"]
    rows = d.get("rows") or []
    if rows:
        width = max(len(fb(r["bytes"])) for r in rows)
        lines.extend(f"  {fb(r['bytes']):>{width}}  {r['what']}" for r in rows)
    lines.extend(f"  note: {n}" for n in d.get("notes") or [])
    return lines


def split_gpu(
    total: int,
    free: int,
    reserved: int,
    this_process: int | None,
    others: Iterable[GpuHolder],
    *,
    source: str | None = None,
    device: int | None = None,
    taken_at: str | None = None,
    notes: Iterable[str] = (),
) -> GpuAccounting:
    """Add up one reading (bytes).  ``this_process``: the driver's figure for this process
    (None: not known, its memory outside the allocator then lies in the residual)."""
    others = tuple(others)
    outside = this_process - reserved if this_process is not None else None
    mine = this_process if this_process is not None else reserved
    unexplained = (total - free) - mine - sum(h.used_bytes or 0 for h in others)
    notes = list(notes)
    if outside is not None and outside < 0:
        notes.append(
            f"the driver reports {fb(this_process or 0)} for this process, "
            f"{fb(-outside)} less than PyTorch reserved"
        )
    silent = [h for h in others if h.used_bytes is None]
    if silent:
        notes.append(
            f"the driver does not report the memory of "
            f"{plural(len(silent), 'process', 'processes')} "
            f"({', '.join(h.label() for h in silent)}): it is in the residual"
        )
    return GpuAccounting(
        True,
        None,
        device,
        taken_at,
        source,
        total,
        free,
        reserved,
        this_process,
        outside,
        others,
        unexplained,
        tuple(notes),
    )


def not_known(reason: str) -> GpuAccounting:
    return GpuAccounting(False, reason)


def gpu_accounting(snap: Snapshot) -> GpuAccounting:
    """The whole GPU at the instant of ``snap``'s dump, from its sidecar."""
    side = snap.sidecar
    if not isinstance(side, Mapping):
        return not_known(
            "the snapshot has no sidecar, the NAME.json beside it where the "
            "capture module records the whole GPU"
        )
    g = side.get(SIDECAR_KEY)
    if not isinstance(g, Mapping):
        return not_known(
            "its sidecar has no record of the whole GPU: written before "
            "vramscope recorded it, or by another tool"
        )
    return from_record(g, snap, side.get("reason"))


def from_record(g: Mapping[str, Any], snap: Snapshot, taken_at: Any = None) -> GpuAccounting:
    """Add up a sidecar's ``gpu_memory`` with ``snap``'s segments on its device."""
    total, free, device = g.get("total_bytes"), g.get("free_bytes"), g.get("device")
    if not (isinstance(total, int) and isinstance(free, int) and isinstance(device, int)):
        return not_known(
            "the capture could not read the device's memory"
            + (f": {g['error']}" if g.get("error") else "")
        )
    taken = str(taken_at) if taken_at else None
    reserved = memory_stats(snap, Selection(device=device)).reserved_bytes
    procs = g.get("processes")
    source = g.get("source") if isinstance(g.get("source"), str) else None
    if not isinstance(procs, list):
        why = g.get("processes_missing") or "the capture recorded no process list"
        return split_gpu(
            total,
            free,
            reserved,
            None,
            (),
            source=None,
            device=device,
            taken_at=taken,
            notes=[
                f"the processes on the device are not known ({why}): the "
                "residual is every other process and this process's memory "
                "outside the allocator together"
            ],
        )
    pid = g.get("pid")
    mine: list[Mapping[str, Any]] = []
    others: list[GpuHolder] = []
    for p in procs:
        if not isinstance(p, Mapping) or not _is_int(p.get("pid")):
            continue
        if p.get("this_process") or p.get("pid") == pid:
            mine.append(p)
        else:
            used = p.get("used_bytes")
            others.append(
                GpuHolder(int(p["pid"]), used if isinstance(used, int) else None, _command(p))
            )
    notes = []
    this_process: int | None = None
    if mine and all(_is_int(p.get("used_bytes")) for p in mine):
        this_process = sum(int(p["used_bytes"]) for p in mine)
    elif mine:
        notes.append(
            "the driver does not report this process's memory: its memory outside "
            "the allocator is in the residual"
        )
    else:
        notes.append(
            f"this process (pid {pid}) is not among the "
            f"{plural(len(others), 'process', 'processes')} {source or 'the driver'} "
            "lists: their pids may be of another PID namespace (a container), one of "
            "them this process itself, counted twice then (the residual is negative "
            "by about its size)"
            if others
            else f"{source or 'the driver'} lists no process on the device, not even this "
            "one (a container, or a driver that does not say): the residual holds "
            "every process's memory beyond PyTorch's reserved"
        )
    if source == "nvidia-smi":
        notes.append("nvidia-smi reports whole MiB: the residual includes the rounding")
    return split_gpu(
        total,
        free,
        reserved,
        this_process,
        others,
        source=source,
        device=device,
        taken_at=taken,
        notes=notes,
    )


def at_oom(snap: Snapshot, device: int, device_free: int) -> GpuAccounting | None:
    """The whole GPU at the instant of ``snap``'s OOM on ``device`` (whose trace event
    recorded ``device_free``): only from an OOM dump's sidecar, taken inside the OOM
    observer, never from a later dump; None otherwise."""
    side = snap.sidecar
    if not isinstance(side, Mapping) or side.get("reason") != "oom":
        return None
    g = side.get(SIDECAR_KEY)
    if not isinstance(g, Mapping) or g.get("device") != device:
        return None
    if side.get("oom_device", device) != device:
        return None
    if side.get("outside_allocator_oom"):
        return None  # the dump of a later OOM outside the allocator, not of this one
    recorded = side.get("oom_device_free")
    if _is_int(recorded) and device_free >= 0 and recorded != device_free:
        return None  # the sidecar's OOM is another one than this event
    acc = from_record(g, snap, "oom")
    return acc if acc.known else None


def run_need_bytes(snap: Snapshot, device: int, acc: GpuAccounting, at_least: int) -> int:
    """What the program needs of a device to run through: its peak reserved (the
    recording's counter, ``reserved_bytes.all.peak``, when the sidecar's is of ``device``;
    never less than ``at_least``, what the failed moment needed) plus this process's
    memory outside the allocator (CUDA context, libraries), as the sidecar recorded it."""
    peak = snap.sidecar_stats(device).get("reserved_bytes.all.peak")
    need = max(peak if isinstance(peak, int) and _is_int(peak) else 0, int(at_least))
    return need + max(acc.outside_allocator_bytes or 0, 0)


def other_device(snap: Snapshot, need: int) -> dict[str, Any] | None:
    """The freest other device in the sidecar's list of every NVML device (``devices``,
    free memory taken with the dump's), and whether ``need`` bytes fitted on it; None
    where the capture recorded no such list.  ``index`` is NVML's (nvidia-smi's) number,
    the one ``CUDA_VISIBLE_DEVICES`` takes in PCI bus order.  ``words``: the one phrase
    the verdict and advise say."""
    side = snap.sidecar if isinstance(snap.sidecar, Mapping) else {}
    g = side.get(SIDECAR_KEY)
    if not isinstance(g, Mapping) or not isinstance(g.get("devices"), list):
        return None
    devices, mine, nv = g["devices"], g.get("uuid"), g.get("nvml_device")
    own_index = nv.get("index") if isinstance(nv, Mapping) else None
    others = [
        d
        for d in devices
        if isinstance(d, Mapping)
        and _is_int(d.get("index"))
        and _is_int(d.get("free_bytes"))
        and not d.get("this_device")
        and not (mine and d.get("uuid") == mine)
        and d.get("index") != own_index
    ]
    if not others:
        return {
            "index": None,
            "name": None,
            "uuid": None,
            "free_bytes": None,
            "need_bytes": need,
            "fits": False,
            "words": f"no other device had room for the run's {fb(need)} (NVML lists "
            "no other device)",
        }
    best = max(others, key=lambda d: (d["free_bytes"], -d["index"]))
    index, free = int(best["index"]), int(best["free_bytes"])
    name = best.get("name") if isinstance(best.get("name"), str) else None
    label = f"device {index}" + (f" ({name})" if name else "")
    fits = free >= need
    words = (
        f"{label} has {fb(free)} free: CUDA_VISIBLE_DEVICES={index}"
        if fits
        else f"no other device had room for the run's {fb(need)} (the freest, {label}, had "
        f"{fb(free)} free)"
    )
    return {
        "index": index,
        "name": name,
        "uuid": best.get("uuid"),
        "free_bytes": free,
        "need_bytes": need,
        "fits": fits,
        "words": words,
    }


def _command(p: Mapping[str, Any]) -> str | None:
    for key in ("cmdline", "name"):
        v = p.get(key)
        if isinstance(v, str) and v.strip():
            return v.strip()
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
