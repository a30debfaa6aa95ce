"""Read a snapshot file's bytes: decompress by content, bounded, with progress.

Compression is detected from magic bytes, never from the file name, so a
``.pickle`` that is really gzip (or an ``.xz`` that is not) still opens.
Decompressed output is capped so a small "decompression bomb" cannot fill
memory; the cap scales with the compressed size so real snapshots always fit.
"""

from __future__ import annotations

import bz2
import lzma
import os
import zlib
from typing import Any

from ..core.errors import SnapshotError
from ..core.progress import Progress

CHUNK = 4 << 20
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
BZ2_MAGIC = b"BZh"

# Real snapshots compress 10-50x; allow far more, but not a 1000x bomb.
MAX_EXPANSION = 200
MIN_DECOMPRESSED_CAP = 1 << 30


def decompressed_cap(compressed_size: int) -> int:
    env = os.environ.get("VRAMSCOPE_MAX_DECOMPRESSED_BYTES")
    if env and env.isdigit():
        return int(env)
    return max(MIN_DECOMPRESSED_CAP, compressed_size * MAX_EXPANSION)


def compression_of(head: bytes) -> str | None:
    """Name of the compression format that ``head`` starts with, if any."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(BZ2_MAGIC) and len(head) > 3 and head[3:4].isdigit():
        return "bz2"
    return None


def read_file(path: str | os.PathLike, progress: Progress | None = None) -> bytes:
    """Return the file's content, raising a one-line :class:`SnapshotError`."""
    progress = progress or Progress()
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            chunks = []
            done = 0
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                done += len(chunk)
                progress.update("read", done / size if size else 1.0)
    # Messages leave the path out: every caller already prefixes it.
    except IsADirectoryError:
        raise SnapshotError("it is a directory, not a snapshot file") from None
    except FileNotFoundError:
        raise SnapshotError("no such file") from None
    except PermissionError:
        raise SnapshotError("permission denied") from None
    except OSError as exc:
        raise SnapshotError(f"cannot read it: {exc.strerror or exc}") from None
    return b"".join(chunks)


def decompress(raw: bytes, progress: Progress | None = None) -> tuple[bytes, str | None]:
    """Undo gzip/xz/bz2 compression found by magic bytes; return (data, format)."""
    kind = compression_of(raw[:8])
    if kind is None:
        return raw, None
    progress = progress or Progress()
    cap = decompressed_cap(len(raw))
    out = []
    total = 0
    try:
        for chunk, consumed in _decompressed_chunks(kind, raw):
            total += len(chunk)
            if total > cap:
                raise SnapshotError(
                    f"the {kind} data expands beyond {cap >> 20} MiB: refusing a possible "
                    "decompression bomb (set VRAMSCOPE_MAX_DECOMPRESSED_BYTES to allow it)"
                )
            out.append(chunk)
            progress.update("read", consumed / len(raw))
    except (zlib.error, lzma.LZMAError, OSError, ValueError) as exc:
        raise SnapshotError(f"the {kind} data is corrupt: {exc}") from None
    return b"".join(out), kind


class _Decoder:
    """One compressed member, stepped with bounded output (zlib/lzma/bz2 alike)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._d: Any  # the three decompressors share no type, only these methods
        if kind == "gzip":
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif kind == "xz":
            self._d = lzma.LZMADecompressor()
        else:
            self._d = bz2.BZ2Decompressor()

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data

    @property
    def needs_input(self) -> bool:
        if self.kind == "gzip":
            return not self._d.unconsumed_tail
        return self._d.needs_input

    def step(self, piece: bytes) -> bytes:
        if self.kind == "gzip":
            return self._d.decompress(self._d.unconsumed_tail + piece, CHUNK)
        return self._d.decompress(piece, max_length=CHUNK)


def _decompressed_chunks(kind: str, raw: bytes):
    """Yield (output chunk, input bytes consumed so far); handles concatenated members."""
    pos = 0
    rest = b""
    while True:
        dec = _Decoder(kind)
        while not dec.eof:
            if dec.needs_input:
                if rest:
                    piece, rest = rest, b""
                else:
                    piece = raw[pos : pos + CHUNK]
                    pos += len(piece)
                    if not piece:
                        raise SnapshotError(f"the {kind} data is truncated")
            else:
                piece = b""
            yield dec.step(piece), pos
        rest = dec.unused_data
        if not rest.strip(b"\x00") and pos >= len(raw):
            return
        if compression_of((rest + raw[pos : pos + 8])[:8]) != kind:
            if not (rest + raw[pos:]).strip(b"\x00"):
                return
            raise SnapshotError(f"the {kind} data is followed by unexpected bytes")
