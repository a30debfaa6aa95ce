"""The screenshot's PNG writer: pixel for pixel the image, read back by Qt and by a
decoder written here from the PNG rules (chunks, CRCs, zlib, the "Up" filter)."""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage, QPainter

from vramscope.viewer._qt.widgets.png import png_bytes, save_png


def _image(w: int, h: int, seed: int) -> QImage:
    """Noise (nothing to compress) under a few flat rectangles (much to compress)."""
    rng = np.random.default_rng(seed)
    img = QImage(w, h, QImage.Format.Format_RGB32)
    px = np.frombuffer(img.bits(), np.uint32, img.bytesPerLine() // 4 * h)
    px[:] = rng.integers(0, 1 << 24, px.size, dtype=np.uint32) | 0xFF000000
    p = QPainter(img)
    for _ in range(5):
        p.fillRect(
            int(rng.integers(0, w)),
            int(rng.integers(0, h)),
            w // 2,
            h // 3,
            QColor(int(rng.integers(0, 1 << 24))),
        )
    p.end()
    return img


def _decode(data: bytes) -> np.ndarray:
    """(h, w, 3) RGB of an 8-bit RGB PNG with "Up"-filtered rows, every CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        n, tag = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])[0] == zlib.crc32(tag + body)
        chunks.setdefault(tag, b"")
        chunks[tag] += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, color, interlace) == (8, 2, 0) and b"IEND" in chunks
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 3 * w + 1)
    assert (rows[:, 0] == 2).all()
    return np.cumsum(rows[:, 1:], axis=0, dtype=np.uint8).reshape(h, w, 3)


def _rgb(img: QImage) -> np.ndarray:
    rgb = img.convertToFormat(QImage.Format.Format_RGB888)
    a = np.frombuffer(rgb.constBits(), np.uint8, rgb.bytesPerLine() * rgb.height())
    a = a.reshape(rgb.height(), -1)[:, : 3 * rgb.width()]
    return a.reshape(rgb.height(), rgb.width(), 3).copy()  # not a view of a dying QImage


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (1440, 900), (1441, 901)])
def test_written_png_is_the_image(qapp, tmp_path, size):
    img = _image(*size, seed=size[0])
    out = tmp_path / "x.png"
    assert save_png(img, os.fspath(out))
    back = QImage(os.fspath(out))
    assert (back.width(), back.height()) == size
    assert back.convertToFormat(QImage.Format.Format_RGB32) == img
    assert np.array_equal(_decode(out.read_bytes()), _rgb(img))


def test_window_sized_screens_compress(qapp, tmp_path):
    """A window (flat areas) compresses about as well as Qt's own writer at level 1."""
    img = QImage(1440, 900, QImage.Format.Format_RGB32)
    img.fill(QColor("#f0f0f0"))
    p = QPainter(img)
    for i in range(40):
        p.fillRect(10 + 30 * i, 20 + 15 * i, 300, 40, QColor.fromHsv(9 * i, 120, 220))
        p.drawText(10, 20 + 20 * i, f"row {i}: 1.34 GiB reserved, 282.46 MiB allocated")
    p.end()
    assert img.save(os.fspath(tmp_path / "qt.png"), "PNG", 80)  # quality 80: zlib level 1
    assert len(png_bytes(img)) < 1.1 * (tmp_path / "qt.png").stat().st_size
    assert np.array_equal(_decode(png_bytes(img)), _rgb(img))


def test_alpha_goes_through_qt_and_bad_paths_fail(qapp, tmp_path):
    img = QImage(4, 3, QImage.Format.Format_ARGB32)
    img.fill(QColor(10, 20, 30, 40))
    assert save_png(img, os.fspath(tmp_path / "a.png"))
    back = QImage(os.fspath(tmp_path / "a.png")).convertToFormat(QImage.Format.Format_ARGB32)
    assert back == img
    assert not save_png(_image(8, 8, 1), os.fspath(tmp_path / "missing" / "x.png"))
