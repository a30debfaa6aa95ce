"""Build hook for the optional C extensions (everything else is in pyproject.toml).

Every ``viewer/model/_native/<stem>.c`` builds as the extension
``vramscope.viewer.model._native.<stem>`` (CPython C API only; numpy headers
are not needed).  The extensions are optional: when there is no compiler, or
compiling fails, the install still succeeds with a warning and vramscope uses
its pure-Python code paths.  ``VRAMSCOPE_BUILD_NATIVE=0`` skips them on
purpose (used to test that fallback); ``VRAMSCOPE_NATIVE_CFLAGS`` adds flags
(``make sanitize`` builds with ``-fsanitize=address,undefined`` into ``build/sanitize``;
``-fsanitize`` flags are passed to the linker too).  ``VRAMSCOPE_REQUIRE_NATIVE=1``
(the CI's native gate) makes a failed compile fail the build instead of warning.

A C file may include private headers and sources from ``_native/<stem>_src/``
(one extension still: sources there are ``#include``d, headers tracked for rebuilds),
and the headers every extension shares from ``_native/common/`` (tracked for all).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = Path("viewer") / "model" / "_native"


def native_extensions() -> list[Extension]:
    if os.environ.get("VRAMSCOPE_BUILD_NATIVE", "1") == "0":
        return []
    flags = shlex.split(os.environ.get("VRAMSCOPE_NATIVE_CFLAGS", ""))
    if sys.platform != "win32":
        flags = ["-O2", "-pthread", *flags]
    exts = []
    for src in sorted((HERE / NATIVE).glob("*.c")):
        exts.append(
            Extension(
                f"vramscope.viewer.model._native.{src.stem}",
                sources=[(NATIVE / src.name).as_posix()],
                depends=[
                    p.relative_to(HERE).as_posix()
                    for d in (f"{src.stem}_src", "common")
                    for p in sorted((HERE / NATIVE / d).glob("*"))
                ],
                extra_compile_args=flags,
                extra_link_args=[f for f in flags if f.startswith(("-fsanitize", "-pthread"))],
            )
        )
    return exts


class optional_build_ext(build_ext):
    """build_ext that warns instead of failing: the pure-Python paths remain."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all (distutils raises its own errors)
            self._skip(f"C extensions not built ({exc})")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(f"{ext.name} not built ({exc})")

    def copy_file(self, infile, outfile, *args, **kwargs):
        """In-place builds replace an extension by renaming a new file over it: a
        running vramscope keeps its mapped copy instead of crashing on a rewrite."""
        if not str(outfile).endswith((".so", ".pyd")) or self.dry_run:
            return super().copy_file(infile, outfile, *args, **kwargs)
        tmp = f"{outfile}.tmp-{os.getpid()}"
        result = super().copy_file(infile, tmp, *args, **kwargs)
        os.replace(tmp, outfile)
        return (outfile, result[1]) if isinstance(result, tuple) else result

    @staticmethod
    def _skip(message: str) -> None:
        if os.environ.get("VRAMSCOPE_REQUIRE_NATIVE", "") not in ("", "0"):
            raise SystemExit(
                f"error: {message}, and VRAMSCOPE_REQUIRE_NATIVE=1 requires the C extensions"
            )
        print(f"WARNING: {message}; vramscope uses its pure-Python fallback", file=sys.stderr)


setup(ext_modules=native_extensions(), cmdclass={"build_ext": optional_build_ext})
