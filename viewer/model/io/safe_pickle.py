"""A restricted unpickler that builds builtin types only.

A snapshot is a pickle, and a pickle can run code: ``pickle.load`` on a file
from somewhere else is remote code execution.  This module interprets the
pickle opcodes itself and supports only those that build ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes``, ``bytearray``, ``list``, ``tuple``,
``dict``, ``set`` and ``frozenset``.  Every opcode that imports or calls
something (``GLOBAL``, ``STACK_GLOBAL``, ``REDUCE``, ``BUILD``, ``INST``,
``OBJ``, ``NEWOBJ``, the extension registry, persistent ids) is refused
before anything happens.  Protocol 5 is read with its in-band data
(``BYTEARRAY8``); out-of-band buffers (``NEXT_BUFFER``, ``READONLY_BUFFER``)
are data a pickle file cannot carry, so such a file is refused with one line
saying so (:func:`out_of_band_message`).

It is also bounded where CPython's unpickler is not:

* the memo is a dict, so ``LONG_BINPUT 2**30`` costs one entry, not the 16 GiB
  array CPython allocates for it;
* lengths are checked against the bytes that remain before anything is
  allocated;
* the number of containers and the stack depth are capped relative to the
  input size, so a small file cannot expand into gigabytes of empty lists;
* it is iterative: nesting depth costs no recursion.

Protocols 0 to 5 are understood.
"""

from __future__ import annotations

import codecs
import gc
from struct import unpack_from

from ..core.errors import SnapshotError, UnsafeSnapshotError
from ..core.progress import Progress

# Every form load_snapshot reads (io/load.py): said when a file is none of them.
NOT_A_SNAPSHOT_FORMAT = (
    "the file is not a pickle (protocol 0-5), gzip, xz or bz2 compressed data, or JSON"
)
REFUSED_MESSAGE = (
    "refusing to load: the file contains executable objects, so it is not a plain memory snapshot"
)

# Opcodes that would import, call or construct arbitrary objects.
_REFUSED = {
    ord("c"): "GLOBAL",
    0x93: "STACK_GLOBAL",
    ord("R"): "REDUCE",
    ord("b"): "BUILD",
    ord("i"): "INST",
    ord("o"): "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    ord("P"): "PERSID",
    ord("Q"): "BINPERSID",
}
# Protocol 5 out-of-band buffers: harmless, but their bytes live outside the file.
OUT_OF_BAND = {0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER"}


def out_of_band_message(opname: str, byte: int) -> str:
    """The one line for a pickle that refers to out-of-band buffers (both parsers)."""
    return (
        f"cannot load: the pickle refers to an out-of-band buffer ({opname} at byte "
        f"{byte}), which is not in the file; write the snapshot with pickle.dump "
        "(protocol 5 without buffer_callback keeps every buffer in-band)"
    )


# A real snapshot creates about one container per 60 bytes of pickle; a file
# that creates one per byte is an attack on memory, not a snapshot.
CONTAINER_BUDGET_BYTES_PER = 8
CONTAINER_BUDGET_FLOOR = 1_000_000
STACK_LIMIT = 50_000_000
PROGRESS_EVERY = 1 << 20


class _Truncated(Exception):
    pass


def _bad(message: str) -> SnapshotError:
    return SnapshotError(f"not a memory snapshot: {message}")


def safe_loads(data: bytes, progress: Progress | None = None):
    """Unpickle ``data`` building builtin types only; raise :class:`SnapshotError`.

    ``progress`` receives the ``parse`` stage fraction and may cancel.
    """
    if not data:
        raise SnapshotError("the file is empty")
    was_enabled = gc.isenabled()
    gc.disable()  # the graph is acyclic until we return; GC passes only cost time
    try:
        return _run(bytes(data), progress or Progress())
    except _Truncated:
        raise SnapshotError(
            "the file is truncated: the pickle data ends before its end marker"
        ) from None
    except (
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        AttributeError,
        OverflowError,
        UnicodeDecodeError,
        RecursionError,
        MemoryError,
    ) as exc:
        # Malformed structure (unhashable dict key, bad text number, ...).
        if data[:1] != b"\x80":
            raise _bad(NOT_A_SNAPSHOT_FORMAT) from None
        raise _bad(f"malformed pickle data ({type(exc).__name__})") from None
    finally:
        if was_enabled:
            gc.enable()


def _run(data: bytes, progress: Progress):
    n = len(data)
    pos = 0
    stack: list = []
    append = stack.append
    metastack: list = []
    memo: dict = {}
    containers = 0
    container_budget = CONTAINER_BUDGET_FLOOR + n // CONTAINER_BUDGET_BYTES_PER
    next_progress = PROGRESS_EVERY
    proto = 0

    def pop_mark():
        nonlocal stack, append
        items = stack
        stack = metastack.pop()
        append = stack.append
        return items

    def readline(p: int) -> tuple[bytes, int]:
        end = data.find(b"\n", p)
        if end < 0:
            raise _Truncated()
        return data[p:end], end + 1

    def need(p: int, k: int) -> None:
        if k < 0 or p + k > n:
            raise _Truncated()

    while True:
        if pos >= n:
            raise _Truncated()
        op = data[pos]
        pos += 1
        # Ordered by frequency in real snapshots (memo hits dominate).
        if op == 0x68:  # BINGET
            if pos >= n:
                raise _Truncated()
            append(memo[data[pos]])
            pos += 1
        elif op == 0x94:  # MEMOIZE
            memo[len(memo)] = stack[-1]
        elif op == 0x6A:  # LONG_BINGET
            need(pos, 4)
            append(memo[unpack_from("<I", data, pos)[0]])
            pos += 4
        elif op == 0x28:  # MARK
            metastack.append(stack)
            stack = []
            append = stack.append
            if pos >= next_progress:
                next_progress = pos + PROGRESS_EVERY
                progress.update("parse", pos / n)
            if len(metastack) > STACK_LIMIT:
                raise _bad("nesting is absurdly deep")
        elif op == 0x7D:  # EMPTY_DICT
            append({})
            containers += 1
            if containers > container_budget:
                raise _bad("it builds far more containers than its size allows")
        elif op == 0x75:  # SETITEMS
            items = pop_mark()
            d = stack[-1]
            if type(d) is not dict:
                raise _bad("SETITEMS on something that is not a dict")
            if len(items) % 2:
                raise _bad("SETITEMS with an odd number of items")
            for i in range(0, len(items), 2):
                d[items[i]] = items[i + 1]
        elif op == 0x8C:  # SHORT_BINUNICODE
            if pos >= n:
                raise _Truncated()
            k = data[pos]
            need(pos + 1, k)
            append(data[pos + 1 : pos + 1 + k].decode("utf-8", "surrogatepass"))
            pos += 1 + k
        elif op == 0x4B:  # BININT1
            if pos >= n:
                raise _Truncated()
            append(data[pos])
            pos += 1
        elif op == 0x4D:  # BININT2
            need(pos, 2)
            append(data[pos] | (data[pos + 1] << 8))
            pos += 2
        elif op == 0x8A:  # LONG1
            if pos >= n:
                raise _Truncated()
            k = data[pos]
            need(pos + 1, k)
            append(int.from_bytes(data[pos + 1 : pos + 1 + k], "little", signed=True))
            pos += 1 + k
        elif op == 0x5D:  # EMPTY_LIST
            append([])
            containers += 1
            if containers > container_budget:
                raise _bad("it builds far more containers than its size allows")
        elif op == 0x65:  # APPENDS
            items = pop_mark()
            lst = stack[-1]
            if type(lst) is not list:
                raise _bad("APPENDS on something that is not a list")
            lst.extend(items)
        elif op == 0x4A:  # BININT
            need(pos, 4)
            append(unpack_from("<i", data, pos)[0])
            pos += 4
        elif op == 0x58:  # BINUNICODE
            need(pos, 4)
            k = unpack_from("<I", data, pos)[0]
            need(pos + 4, k)
            append(data[pos + 4 : pos + 4 + k].decode("utf-8", "surrogatepass"))
            pos += 4 + k
        elif op == 0x95:  # FRAME (protocol 4+): a length hint, nothing to build
            need(pos, 8)
            k = unpack_from("<Q", data, pos)[0]
            pos += 8
            if pos + k > n:
                raise _Truncated()
            if pos >= next_progress:
                next_progress = pos + PROGRESS_EVERY
                progress.update("parse", pos / n)
        elif op == 0x89:  # NEWFALSE
            append(False)
            if len(stack) > STACK_LIMIT:
                raise _bad("its stack grows absurdly deep")
        elif op == 0x88:  # NEWTRUE
            append(True)
            if len(stack) > STACK_LIMIT:
                raise _bad("its stack grows absurdly deep")
        elif op == 0x4E:  # NONE
            append(None)
            if len(stack) > STACK_LIMIT:
                raise _bad("its stack grows absurdly deep")
        elif op == 0x86:  # TUPLE2
            if len(stack) < 2:
                raise _bad("TUPLE2 on a short stack")
            stack[-2:] = [(stack[-2], stack[-1])]
        elif op == 0x85:  # TUPLE1
            stack[-1] = (stack[-1],)
        elif op == 0x87:  # TUPLE3
            if len(stack) < 3:
                raise _bad("TUPLE3 on a short stack")
            stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
        elif op == 0x29:  # EMPTY_TUPLE
            append(())
        elif op == 0x74:  # TUPLE
            items = pop_mark()
            append(tuple(items))
        elif op == 0x71:  # BINPUT
            if pos >= n:
                raise _Truncated()
            memo[data[pos]] = stack[-1]
            pos += 1
        elif op == 0x72:  # LONG_BINPUT
            need(pos, 4)
            memo[unpack_from("<I", data, pos)[0]] = stack[-1]
            pos += 4
        elif op == 0x61:  # APPEND
            value = stack.pop()
            lst = stack[-1]
            if type(lst) is not list:
                raise _bad("APPEND on something that is not a list")
            lst.append(value)
        elif op == 0x73:  # SETITEM
            value = stack.pop()
            key = stack.pop()
            d = stack[-1]
            if type(d) is not dict:
                raise _bad("SETITEM on something that is not a dict")
            d[key] = value
        elif op == 0x47:  # BINFLOAT
            need(pos, 8)
            append(unpack_from(">d", data, pos)[0])
            pos += 8
        elif op == 0x8D:  # BINUNICODE8
            need(pos, 8)
            k = unpack_from("<Q", data, pos)[0]
            need(pos + 8, k)
            append(data[pos + 8 : pos + 8 + k].decode("utf-8", "surrogatepass"))
            pos += 8 + k
        elif op == 0x8B:  # LONG4
            need(pos, 4)
            k = unpack_from("<i", data, pos)[0]
            need(pos + 4, k)
            append(int.from_bytes(data[pos + 4 : pos + 4 + k], "little", signed=True))
            pos += 4 + k
        elif op == 0x43:  # SHORT_BINBYTES
            if pos >= n:
                raise _Truncated()
            k = data[pos]
            need(pos + 1, k)
            append(data[pos + 1 : pos + 1 + k])
            pos += 1 + k
        elif op == 0x42:  # BINBYTES
            need(pos, 4)
            k = unpack_from("<I", data, pos)[0]
            need(pos + 4, k)
            append(data[pos + 4 : pos + 4 + k])
            pos += 4 + k
        elif op == 0x8E:  # BINBYTES8
            need(pos, 8)
            k = unpack_from("<Q", data, pos)[0]
            need(pos + 8, k)
            append(data[pos + 8 : pos + 8 + k])
            pos += 8 + k
        elif op == 0x96:  # BYTEARRAY8
            need(pos, 8)
            k = unpack_from("<Q", data, pos)[0]
            need(pos + 8, k)
            append(bytearray(data[pos + 8 : pos + 8 + k]))
            pos += 8 + k
        elif op == 0x55:  # SHORT_BINSTRING (protocol 1-2 str, ASCII as pickle does)
            if pos >= n:
                raise _Truncated()
            k = data[pos]
            need(pos + 1, k)
            append(data[pos + 1 : pos + 1 + k].decode("ascii"))
            pos += 1 + k
        elif op == 0x54:  # BINSTRING
            need(pos, 4)
            k = unpack_from("<i", data, pos)[0]
            need(pos + 4, k)
            append(data[pos + 4 : pos + 4 + k].decode("ascii"))
            pos += 4 + k
        elif op == 0x8F:  # EMPTY_SET
            append(set())
            containers += 1
            if containers > container_budget:
                raise _bad("it builds far more containers than its size allows")
        elif op == 0x90:  # ADDITEMS
            items = pop_mark()
            s = stack[-1]
            if type(s) is not set:
                raise _bad("ADDITEMS on something that is not a set")
            s.update(items)
        elif op == 0x91:  # FROZENSET
            items = pop_mark()
            append(frozenset(items))
        elif op == 0x6C:  # LIST
            items = pop_mark()  # not append(pop_mark()): it rebinds append
            append(items)
            containers += 1
        elif op == 0x64:  # DICT
            items = pop_mark()
            if len(items) % 2:
                raise _bad("DICT with an odd number of items")
            append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
            containers += 1
        elif op == 0x30:  # POP
            if stack:
                stack.pop()
            else:
                pop_mark()
        elif op == 0x31:  # POP_MARK
            pop_mark()
        elif op == 0x32:  # DUP
            append(stack[-1])
        elif op == 0x80:  # PROTO
            if pos >= n:
                raise _Truncated()
            proto = data[pos]
            pos += 1
            if proto > 5:
                raise _bad(f"unsupported pickle protocol {proto}")
        elif op == 0x2E:  # STOP
            if metastack or len(stack) != 1:
                raise _bad("the pickle ends with an unbalanced stack")
            progress.update("parse", 1.0)
            return stack[0]
        # ---- protocol 0 text opcodes: rare, but part of the format ----
        elif op == 0x49:  # INT
            line, pos = readline(pos)
            if line == b"00":
                append(False)
            elif line == b"01":
                append(True)
            else:
                append(int(line))
        elif op == 0x4C:  # LONG
            line, pos = readline(pos)
            append(int(line[:-1] if line.endswith(b"L") else line))
        elif op == 0x46:  # FLOAT
            line, pos = readline(pos)
            append(float(line))
        elif op == 0x53:  # STRING (quoted, escaped)
            line, pos = readline(pos)
            if len(line) >= 2 and line[0] == line[-1] and line[:1] in (b'"', b"'"):
                line = line[1:-1]
            else:
                raise _bad("STRING opcode argument is not quoted")
            append(codecs.escape_decode(line)[0].decode("ascii"))
        elif op == 0x56:  # UNICODE (raw-unicode-escape)
            line, pos = readline(pos)
            append(str(line, "raw-unicode-escape"))
        elif op == 0x67:  # GET
            line, pos = readline(pos)
            append(memo[int(line)])
        elif op == 0x70:  # PUT
            line, pos = readline(pos)
            memo[int(line)] = stack[-1]
        elif op in _REFUSED:
            raise UnsafeSnapshotError(f"{REFUSED_MESSAGE} ({_REFUSED[op]} at byte {pos - 1})")
        elif op in OUT_OF_BAND:
            raise SnapshotError(out_of_band_message(OUT_OF_BAND[op], pos - 1))
        else:
            if pos == 1:
                raise _bad(NOT_A_SNAPSHOT_FORMAT)
            raise _bad(f"unknown pickle opcode 0x{op:02x} at byte {pos - 1}")
