"""Write an opaque QImage as a PNG, about three times faster than ``QImage.save``.

A screenshot's last step is its PNG: ``QImage.save`` at zlib level 1 takes ~22 ms
for a 1440x900 window on one core (libpng tries every row filter).  Here the rows
are "Up"-filtered with numpy (the best single filter for a window: flat areas
repeat row after row) and deflated at level 1 in two halves on two threads
(zlib releases the GIL), joined into one zlib stream the way pigz does: the first
half ends with a sync flush, on a byte boundary, the second is an independent
deflate stream that ends the data; one Adler-32 over all of it.  ~7 ms, files
2-6 % bigger, pixel for pixel the same image (tested by reading it back).
"""

from __future__ import annotations

import struct
import threading
import zlib

import numpy as np
from PySide6.QtGui import QImage

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, "fastest" (level 1)
_LEVEL = 1
_FILTER_UP = 2


def _chunk(tag: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + tag
        + data
        + struct.pack(">I", zlib.crc32(data, zlib.crc32(tag)))
    )


def _deflate(data: memoryview, last: bool) -> bytes:
    c = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)  # raw deflate: no header of its own
    return c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def png_bytes(image: QImage) -> bytes:
    """``image`` (opaque) as an 8-bit RGB PNG file's bytes."""
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h = rgb.width(), rgb.height()
    pixels = np.frombuffer(rgb.constBits(), np.uint8, rgb.bytesPerLine() * h)
    pixels = pixels.reshape(h, rgb.bytesPerLine())[:, : 3 * w]
    rows = np.empty((h, 3 * w + 1), np.uint8)
    rows[:, 0] = _FILTER_UP
    rows[0, 1:] = pixels[0]  # "Up" of the first row: the row itself
    np.subtract(pixels[1:], pixels[:-1], out=rows[1:, 1:])  # modulo 256, as PNG wants
    raw = memoryview(rows.reshape(-1))
    half = len(raw) // 2
    first: list[bytes] = []
    worker = threading.Thread(
        target=lambda: first.append(_deflate(raw[:half], False)), name="vramscope-png"
    )
    worker.start()
    second = _deflate(raw[half:], True)
    worker.join()
    if not first:  # the worker failed (out of memory)
        raise OSError("cannot compress the image")
    idat = _ZLIB_HEADER + first[0] + second + struct.pack(">I", zlib.adler32(raw))
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    density = struct.pack(">IIB", max(image.dotsPerMeterX(), 0), max(image.dotsPerMeterY(), 0), 1)
    return (
        _SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"pHYs", density)
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )


def save_png(image: QImage, path: str) -> bool:
    """Write ``image`` to ``path`` as a PNG; False if it cannot be written.  An image
    with an alpha channel goes through ``QImage.save`` (level 1) instead."""
    if image.hasAlphaChannel() or image.isNull():
        return image.save(path, "PNG", 80)
    try:
        data = png_bytes(image)
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        return False
    return True
