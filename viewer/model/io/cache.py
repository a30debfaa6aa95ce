"""A columnar cache of loaded snapshots: re-opening a big file takes a blink.

Parsing a pickle is the slow part of opening a snapshot; the columns it yields
are plain numpy arrays.  They are stored in the user's cache directory, keyed
by the file's identity: its size, mtime and a hash of its first and last MiB,
plus :data:`CACHE_VERSION`.  An entry (``KEY.cols``) is a JSON header (names,
dtypes, offsets; metadata) followed by the raw arrays, 64-byte aligned: writing
one is a few ``write`` calls (no zip CRC), and reading maps the file
(copy-on-write) so columns are numpy views whose pages load only when touched.
Only plain numeric dtypes are accepted, every extent is checked against the
file and the columns are validated before use: a damaged or hostile entry is
dropped and the file parsed again; the cache never executes anything.

One size budget (:func:`max_bytes`) covers these entries and the prepared what-if
cases kept beside them in :func:`cases_dir` (same format; their keys and contents are
the what-if model's, :mod:`..whatif.case_cache`).  :func:`trim` sees both as one
least-recently-used list by modification time (a read touches an entry), so whichever
was used longest ago goes first, column or case.

``VRAMSCOPE_CACHE_DIR`` moves the cache, ``VRAMSCOPE_CACHE_MAX_BYTES`` caps it,
and ``--no-cache`` (``use_cache=False``) bypasses it.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import struct
from dataclasses import fields
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...early import file_identity
from ..core.snapshot import (
    FX_FIELDS,
    AllocAnnotations,
    Annotations,
    Blocks,
    Frames,
    HostMemory,
    Segments,
    Snapshot,
    Stacks,
    Trace,
)
from .atomic import write_atomic

# The key and the location are stdlib-only (parse_ahead asks before numpy is imported).
CACHE_VERSION = file_identity.COLUMN_CACHE_VERSION
DEFAULT_MAX_BYTES = 4 << 30
MIN_FILE_BYTES = file_identity.MIN_FILE_BYTES
_TABLES = {
    "segments": Segments,
    "blocks": Blocks,
    "trace": Trace,
    "annotations": Annotations,
    "stacks": Stacks,
    "alloc_annotations": AllocAnnotations,
}
# Pinned host memory: stored as host__<table>__<column> when the snapshot has it.
_HOST_TABLES = {
    "segments": Segments,
    "blocks": Blocks,
    "trace": Trace,
    "alloc_annotations": AllocAnnotations,
}
_FRAME_COLUMNS = ("filename", "line", "name") + FX_FIELDS
_MAGIC = b"VRAMSCOPE-COLS\n\x00"  # 16 bytes, then the header length (<Q)
_ALIGN = 64
_MAX_HEADER = 64 << 20
# Plain numeric dtypes only: an entry can never ask for objects.
_DTYPES = {"|i1", "<i4", "<i8", "|b1", "|u1"}
SUFFIX = file_identity.COLUMN_SUFFIX
# Before .cols (CACHE_VERSION 2) entries were .npz: still counted, so trim removes them.
_OLD_SUFFIX = ".npz"
CASE_SUFFIX = ".case"


def cache_dir() -> Path:
    """Where cached columns live (``VRAMSCOPE_CACHE_DIR`` overrides)."""
    return Path(file_identity.cache_root())


def cases_dir() -> Path:
    """Where prepared what-if cases live: ``cases/`` in :func:`cache_dir`, under the
    same size budget as the columns (:func:`trim`)."""
    return cache_dir() / "cases"


def max_bytes() -> int:
    """The size budget of the whole cache, columns and cases together, in bytes
    (``VRAMSCOPE_CACHE_MAX_BYTES``; 4 GiB by default)."""
    env = os.environ.get("VRAMSCOPE_CACHE_MAX_BYTES", "")
    return int(env) if env.isdigit() else DEFAULT_MAX_BYTES


def file_key(path: str | os.PathLike) -> str | None:
    """Identity of a file's content as the cache sees it; None for small or odd files."""
    return file_identity.column_key(path)


def entry_path(key: str) -> Path:
    """The cache entry file for ``key``."""
    return cache_dir() / f"{key}{SUFFIX}"


def load_cached(key: str) -> Snapshot | None:
    """The cached snapshot for ``key``, or None (missing, old or damaged entries)."""
    path = entry_path(key)
    try:
        arrays, meta = read_entry(path)
        if meta.get("version") != CACHE_VERSION:
            return None
        snap = _from_arrays(arrays, meta)
        os.utime(path)  # least recently *used* goes first
        return snap
    except FileNotFoundError:
        return None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        UnicodeDecodeError,
        struct.error,
        AttributeError,
    ):
        remove_entry(path)  # damaged: drop it, the file will be parsed again
        return None


def read_entry(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """Map an entry: (arrays as copy-on-write views of the file, metadata)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(_MAGIC) + 8)
        if len(head) != len(_MAGIC) + 8 or head[: len(_MAGIC)] != _MAGIC:
            raise ValueError("not a cache entry")
        (hlen,) = struct.unpack("<Q", head[len(_MAGIC) :])
        if hlen > min(size, _MAX_HEADER):
            raise ValueError("header length")
        header = json.loads(f.read(hlen).decode("utf-8"))
        if type(header) is not dict or type(header.get("arrays")) is not dict:
            raise ValueError("header")
        # ACCESS_COPY: writable numpy arrays, pages read on first touch, the file untouched.
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else b""
    arrays = {}
    for name, (dtype, offset, count) in header["arrays"].items():
        if dtype not in _DTYPES or type(offset) is not int or type(count) is not int:
            raise ValueError(f"column {name}")
        dt = np.dtype(dtype)
        if offset < 0 or count < 0 or offset + count * dt.itemsize > size:
            raise ValueError(f"column {name} extent")
        arrays[name] = (
            np.frombuffer(mm, dtype=dt, count=count, offset=offset)
            if count
            else np.zeros(0, dtype=dt)
        )
    return arrays, header.get("meta", {})


def write_entry(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write an entry to ``path``, atomically (a reader never maps half an entry)."""
    layout = {}
    offset = 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.str not in _DTYPES:
            raise TypeError(f"{name}: {arr.dtype} cannot be cached")
        arrays[name] = arr
        layout[name] = [arr.dtype.str, offset, int(arr.size)]
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN

    # Offsets are relative to the data start; fix the header length first.
    def header_bytes(base: int) -> bytes:
        shifted = {n: [d, base + o, c] for n, (d, o, c) in layout.items()}
        return json.dumps({"arrays": shifted, "meta": meta}).encode("utf-8")

    base = 0
    while True:
        head = header_bytes(base)
        start = -(-(len(_MAGIC) + 8 + len(head)) // _ALIGN) * _ALIGN
        if start == base:
            break
        base = start

    def write(f: IO[bytes]) -> None:
        f.write(_MAGIC + struct.pack("<Q", len(head)) + head)
        f.write(b"\0" * (base - f.tell()))
        for arr in arrays.values():
            f.write(arr.data.cast("B"))
            f.write(b"\0" * (-arr.nbytes % _ALIGN))

    write_atomic(path, write)


def store(key: str, snap: Snapshot) -> None:
    """Write ``snap``'s columns for ``key`` (atomically), then trim the cache."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        arrays, meta = _to_arrays(snap)
        write_entry(entry_path(key), arrays, meta)
        trim(max_bytes())
    except OSError:
        pass  # a cache that cannot be written is no reason to fail a load


def trim(limit: int) -> None:
    """Delete least recently used entries, columns and prepared cases alike, until the
    cache is within ``limit`` bytes."""
    entries = _entries(cache_dir(), (SUFFIX, _OLD_SUFFIX)) + _entries(cases_dir(), (CASE_SUFFIX,))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        remove_entry(path)
        total -= size


def _entries(directory: Path, suffixes: tuple[str, ...]) -> list[tuple[int, int, Path]]:
    """(mtime in ns, size, path) of the entries in ``directory`` ending in one of
    ``suffixes``; a missing folder has none.  Temporary files of a write in progress
    (``.NAME.XXXX.tmp``) are not entries."""
    found = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.name.endswith(suffixes):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue  # removed meanwhile (trimmed or dropped by another process)
                found.append((st.st_mtime_ns, st.st_size, Path(entry.path)))
    except OSError:
        pass
    return found


def remove_entry(path: Path) -> None:
    """Delete the entry at ``path`` if it is there; a failure is ignored (an entry that
    cannot be removed is only read, checked and dropped again)."""
    try:
        path.unlink()
    except OSError:
        pass


def _to_arrays(snap: Snapshot) -> tuple[dict[str, np.ndarray], dict]:
    arrays: dict[str, np.ndarray] = {}
    for table, cls in _TABLES.items():
        obj = getattr(snap, table)
        for f in fields(cls):
            arrays[f"{table}__{f.name}"] = getattr(obj, f.name)
    if snap.host is not None:
        for table, cls in _HOST_TABLES.items():
            obj = getattr(snap.host, table)
            for f in fields(cls):
                arrays[f"host__{table}__{f.name}"] = getattr(obj, f.name)
    for name in _FRAME_COLUMNS:
        arrays[f"frames__{name}"] = getattr(snap.frames, name)
    encoded = [s.encode("utf-8", "surrogatepass") for s in snap.frames.strings]
    arrays["strings_offsets"] = np.cumsum([0] + [len(b) for b in encoded], dtype=np.int64)
    arrays["strings_blob"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    meta = {
        "version": CACHE_VERSION,
        "pools": snap.pools,
        "allocator_settings": snap.allocator_settings,
        "source_format": snap.source_format,
        "warnings": snap.warnings,
        "host_pools": None if snap.host is None else snap.host.pools,
    }
    return arrays, meta


def _from_arrays(arrays: dict[str, np.ndarray], meta: dict) -> Snapshot:
    tables = {}
    for table, cls in _TABLES.items():
        tables[table] = cls(**{f.name: arrays[f"{table}__{f.name}"] for f in fields(cls)})
    blob = arrays["strings_blob"].tobytes()
    offsets = arrays["strings_offsets"].tolist()
    strings = [blob[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(offsets)]
    frames = Frames(strings=strings, **{n: arrays[f"frames__{n}"] for n in _FRAME_COLUMNS})
    host = None
    if meta.get("host_pools") is not None:
        host_tables = {
            table: cls(**{f.name: arrays[f"host__{table}__{f.name}"] for f in fields(cls)})
            for table, cls in _HOST_TABLES.items()
        }
        host = HostMemory(pools=[tuple(p) for p in meta["host_pools"]], **host_tables)
    snap = Snapshot(
        host=host,
        frames=frames,
        pools=[tuple(p) for p in meta["pools"]],
        allocator_settings=meta["allocator_settings"],
        source_format=meta["source_format"],
        warnings=list(meta["warnings"]),
        **tables,
    )
    _validate(snap)
    return snap


def _validate(snap: Snapshot) -> None:
    """Cheap consistency checks so a damaged entry is never trusted."""
    n_seg, n_blk, n_str = len(snap.segments), len(snap.blocks), len(snap.frames.strings)
    tables: list[Any] = [
        snap.segments,
        snap.blocks,
        snap.trace,
        snap.annotations,
        snap.alloc_annotations,
    ]
    if snap.host is not None:
        host = snap.host
        tables += [host.segments, host.blocks, host.trace, host.alloc_annotations]
        if len(host.blocks) and (
            host.blocks.segment.min() < 0 or host.blocks.segment.max() >= len(host.segments)
        ):
            raise ValueError("host block segment out of range")
        if len(host.segments) and host.segments.pool.max() >= len(host.pools):
            raise ValueError("host pool out of range")
    for table in tables:
        lengths = {len(getattr(table, f.name)) for f in fields(table)}
        if len(lengths) > 1:
            raise ValueError("ragged columns")
    if len({len(getattr(snap.frames, n)) for n in _FRAME_COLUMNS}) > 1:
        raise ValueError("ragged frame columns")
    if n_blk and (snap.blocks.segment.min() < 0 or snap.blocks.segment.max() >= n_seg):
        raise ValueError("block segment out of range")
    if (
        len(snap.frames)
        and max(int(snap.frames.filename.max()), int(snap.frames.name.max())) >= n_str
    ):
        raise ValueError("frame string out of range")
    stacks = snap.stacks
    if len(stacks.offsets) == 0 or stacks.offsets[-1] != len(stacks.frames):
        raise ValueError("stack offsets")
    if len(stacks.frames) and stacks.frames.max() >= len(snap.frames):
        raise ValueError("stack frame out of range")
    stack_cols = [
        snap.blocks.stack,
        snap.trace.stack,
        snap.segments.stack,
        snap.trace.forward_stack,
        snap.alloc_annotations.stack,
    ]
    string_cols = [
        snap.trace.compile_context,
        snap.trace.user_metadata,
        snap.annotations.name,
        snap.alloc_annotations.text,
    ] + [getattr(snap.frames, n) for n in FX_FIELDS]
    if snap.host is not None:
        stack_cols += [
            snap.host.blocks.stack,
            snap.host.trace.stack,
            snap.host.segments.stack,
            snap.host.trace.forward_stack,
            snap.host.alloc_annotations.stack,
        ]
        string_cols += [
            snap.host.trace.compile_context,
            snap.host.trace.user_metadata,
            snap.host.alloc_annotations.text,
        ]
    for ids in stack_cols:
        if len(ids) and ids.max() >= len(stacks):
            raise ValueError("stack id out of range")
    for ids in string_cols:
        if len(ids) and ids.max() >= n_str:
            raise ValueError("string id out of range")
    if n_seg and snap.segments.pool.max() >= len(snap.pools):
        raise ValueError("pool out of range")
