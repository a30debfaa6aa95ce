"""Keep the compiled form of shiboken6's embedded Python between starts, as ``.pyc`` does.

``import shiboken6`` runs its signature support (``signature_bootstrap`` and the
``shibokensupport`` package: ~150 KB of Python kept as source inside its library) by
compiling that source with the builtin :func:`compile` on every start: ~35 ms of the
window's start on the GUI thread, before anything can be drawn.  :func:`cached_compiles`
replaces :func:`compile` for the duration of that import with one that looks the code up
in a file of code objects (``marshal``, as in a ``.pyc``) beside this module in
``__pycache__`` and compiles only what it lacks, writing the file afterwards (unless
``sys.dont_write_bytecode``, as Python does for ``.pyc``).

Exact by construction: an entry is found by the source's digest, its file name, mode and
compiler flags, in a file named for this interpreter's cache tag and checked against its
bytecode magic number; any other call (another file name, other arguments, another
thread's imports meanwhile) goes to the builtin :func:`compile` with the future flags it
would have inherited from its caller.  Anything wrong with the file (missing, truncated,
another Python's) and the source is compiled as before.

The file is ours, written by this module only, and read with :func:`marshal.loads` like
Python reads its own ``.pyc`` files; no user file is ever read here.
"""

import __future__

import builtins
import contextlib
import hashlib
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterator
from types import CodeType

#: The sources cached: what shiboken6 compiles from its library at import.
PREFIXES = ("shibokensupport/", "signature_bootstrap.py")
CACHE_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "__pycache__",
    f"shiboken-embedded.{sys.implementation.cache_tag}.marshal",
)
# The flags compile() inherits from the calling frame's code (CPython's PyCF_MASK).
_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag


class CodeCache:
    """Code objects by (file name, source digest, mode, flags), read from and written to
    ``path``; :meth:`compile` is a drop-in for the builtin (see the module docstring)."""

    def __init__(self, path: str = CACHE_FILE) -> None:
        self.path = path
        self.known = self._read()
        self.used: dict[tuple, object] = {}
        self.compiled = 0  # sources compiled because the file lacked them

    def _read(self) -> dict:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            if data[:4] != importlib.util.MAGIC_NUMBER:
                return {}
            known = marshal.loads(data[4:])
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        return known if isinstance(known, dict) else {}

    def compile(self, source, filename, mode, flags=0, dont_inherit=False, optimize=-1, **more):
        """The builtin :func:`compile`'s answer, from the file where it holds it."""
        if not dont_inherit:
            # What the builtin would inherit from its caller's code (not from this frame).
            flags |= sys._getframe(1).f_code.co_flags & _FUTURE_FLAGS
        cacheable = (
            not more
            and optimize == -1
            and isinstance(source, (str, bytes))
            and isinstance(filename, str)
            and filename.startswith(PREFIXES)
        )
        if not cacheable:
            return _builtin_compile(
                source, filename, mode, flags, dont_inherit=True, optimize=optimize, **more
            )
        text = source.encode("utf-8") if isinstance(source, str) else source
        key = (filename, hashlib.blake2b(text, digest_size=16).digest(), mode, flags)
        code = self.known.get(key)
        if code is None:
            code = _builtin_compile(source, filename, mode, flags, dont_inherit=True)
            if not isinstance(code, CodeType):  # (an AST asked for: nothing to keep)
                return code
            self.compiled += 1
        self.used[key] = code
        return code

    def save(self) -> bool:
        """Write the entries used since this cache was read (those only: the file never
        grows with sources no longer asked for), if any was compiled; whether written."""
        if not self.compiled:
            return False
        import tempfile  # (only when writing: not on every start)

        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".shiboken-embedded.")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(importlib.util.MAGIC_NUMBER + marshal.dumps(self.used))
                os.chmod(tmp, 0o644)  # (mkstemp's 0600: readable by all, as a .pyc is)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except (OSError, ValueError):
            return False
        return True


_builtin_compile = builtins.compile


@contextlib.contextmanager
def cached_compiles(path: str = CACHE_FILE) -> Iterator[CodeCache]:
    """Within the block, :func:`compile` answers shiboken6's sources from the cache at
    ``path``; afterwards the builtin is back and what was compiled is written (not with
    ``sys.dont_write_bytecode``)."""
    cache = CodeCache(path)
    builtins.compile = cache.compile
    try:
        yield cache
    finally:
        if builtins.compile == cache.compile:
            builtins.compile = _builtin_compile
    if not sys.dont_write_bytecode:
        cache.save()
