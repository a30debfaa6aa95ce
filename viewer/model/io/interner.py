"""Interning of strings, frames and stacks for :class:`.builder.SnapshotBuilder`.

Each distinct string, frame and call stack is stored once; blocks and events
refer to them by id.  Identity caches make shared lists (torch pickles share
frame dicts and whole frame lists by reference) cost one lookup each.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..core.errors import WarningLog
from ..core.snapshot import FX_FIELDS, NO_STACK, Frames, Stacks

INT64_MAX = (1 << 63) - 1
_PLAIN = (str, int, float, bool, type(None))
# A traceback.format_list() entry, as torch writes forward_frames.
_TRACEBACK_LINE = re.compile(r'File "([^"\n]*)", line (\d+), in ([^\n]*)')


def _sint(v: Any, default: int) -> int:
    if type(v) is int and -INT64_MAX <= v <= INT64_MAX:
        return v
    return default


class Interner:
    """Interns strings, frames and stacks; identity caches keep shared lists cheap.

    Torch pickles share frame dicts (and sometimes whole frame lists) by
    reference; caching by ``id()`` while the parsed tree is alive turns a file
    where 200k events reference one 5000-frame list into 5000 frame lookups,
    not a billion.  The identity caches are only valid while that tree is
    alive: :meth:`forget_objects` drops them (a live session calls it after
    each increment, whose objects are then freed and their ids reused).
    """

    def __init__(self, log: WarningLog) -> None:
        self.log = log
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self.f_file: list[int] = []
        self.f_line: list[int] = []
        self.f_name: list[int] = []
        self.f_fx: list[list[int]] = [[] for _ in FX_FIELDS]
        self._frame_ids: dict[tuple[int, ...], int] = {}
        self._frame_by_obj: dict[int, int] = {}
        self.s_offsets: list[int] = [0]
        self.s_frames: list[int] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self._stack_by_obj: dict[int, int] = {}
        self._forward_by_obj: dict[int, int] = {}

    def forget_objects(self) -> None:
        """Drop the identity caches (ids of objects that may since have been freed)."""
        self._frame_by_obj.clear()
        self._stack_by_obj.clear()
        self._forward_by_obj.clear()

    def string(self, s: Any) -> int:
        if type(s) is not str:
            if s is None:
                return -1
            s = str(s) if type(s) in _PLAIN else "?"
        sid = self._string_ids.get(s)
        if sid is None:
            sid = len(self.strings)
            self.strings.append(s)
            self._string_ids[s] = sid
        return sid

    def _frame_key(self, key: tuple[int, ...]) -> int:
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self.f_line)
            self.f_file.append(key[0])
            self.f_line.append(key[1])
            self.f_name.append(key[2])
            for col, sid in zip(self.f_fx, key[3:]):
                col.append(sid)
            self._frame_ids[key] = fid
        return fid

    def frame(self, f: Any) -> int:
        fid = self._frame_by_obj.get(id(f))
        if fid is not None:
            return fid
        if type(f) is not dict:
            self.log.add("skipped stack frames that are not dicts")
            return -1
        filename = f.get("filename", "??")
        name = f.get("name", "??")
        line = _sint(f.get("line", 0), 0)
        if not -(1 << 31) <= line < (1 << 31):
            line = 0
        fx: tuple[int, ...] = (-1, -1, -1, -1)
        if len(f) > 3:  # FX fields (augment_with_fx_traces): only then look for them
            fx = tuple(self._fx_string(f.get(k)) for k in FX_FIELDS)
        key = (
            self.string(filename if type(filename) is str else "??"),
            line,
            self.string(name if type(name) is str else "??"),
        ) + fx
        fid = self._frame_key(key)
        self._frame_by_obj[id(f)] = fid
        return fid

    def _fx_string(self, v: Any) -> int:
        if v is None or v == "":
            return -1
        return self.string(v if type(v) is str else str(v) if type(v) in _PLAIN else "?")

    def _stack_of_ids(self, ids: tuple[int, ...]) -> int:
        sid = self._stack_ids.get(ids)
        if sid is None:
            sid = len(self.s_offsets) - 1
            self.s_frames.extend(ids)
            self.s_offsets.append(len(self.s_frames))
            self._stack_ids[ids] = sid
        return sid

    def stack(self, frames: Any) -> int:
        if frames is None:
            return NO_STACK
        sid = self._stack_by_obj.get(id(frames))
        if sid is not None:
            return sid
        if type(frames) is not list and type(frames) is not tuple:
            self.log.add("skipped frame lists that are not lists")
            return NO_STACK
        ids = tuple(fid for fid in map(self.frame, frames) if fid >= 0)
        sid = self._stack_ids.get(ids)  # _stack_of_ids, inlined: once per event
        if sid is None:
            sid = self._stack_of_ids(ids)
        self._stack_by_obj[id(frames)] = sid
        return sid

    def forward_stack(self, value: Any) -> int:
        """``forward_frames``: traceback lines (outermost first, as torch writes
        them) or frame dicts; interned as a stack (innermost first)."""
        if value is None or (type(value) in (list, tuple) and not value):
            return NO_STACK
        sid = self._forward_by_obj.get(id(value))
        if sid is not None:
            return sid
        if type(value) is str:
            value = [value]
        if type(value) is not list and type(value) is not tuple:
            self.log.add("skipped forward_frames that are not lists")
            return NO_STACK
        ids: list[int] = []
        for item in value:
            if type(item) is dict:
                fid = self.frame(item)
                if fid >= 0:
                    ids.append(fid)
                continue
            if type(item) is not str:
                self.log.add("skipped forward_frames entries that are not strings")
                continue
            found = _TRACEBACK_LINE.findall(item)
            if not found:  # a line we cannot parse is still shown, as its text
                text = item.strip()
                if text:
                    ids.append(
                        self._frame_key((self.string(text), 0, self.string(""), -1, -1, -1, -1))
                    )
                continue
            for filename, line, name in found:
                ln = int(line) if len(line) < 10 else 0
                ids.append(
                    self._frame_key(
                        (self.string(filename), ln, self.string(name.strip()), -1, -1, -1, -1)
                    )
                )
        sid = self._stack_of_ids(tuple(reversed(ids)))  # outermost-first -> innermost-first
        self._forward_by_obj[id(value)] = sid
        return sid

    def frames_table(self) -> Frames:
        fx = {name: np.array(col, dtype=np.int32) for name, col in zip(FX_FIELDS, self.f_fx)}
        return Frames(
            filename=np.array(self.f_file, dtype=np.int32),
            line=np.array(self.f_line, dtype=np.int32),
            name=np.array(self.f_name, dtype=np.int32),
            strings=self.strings,
            **fx,
        )

    def stacks_table(self) -> Stacks:
        return Stacks(
            offsets=np.array(self.s_offsets, dtype=np.int64),
            frames=np.array(self.s_frames, dtype=np.int32),
        )
