"""Whether a window can open here, decided before Qt is imported.

Qt aborts the whole process (SIGABRT, exit 134, five lines about its "xcb" plugin)
when its platform plugin cannot start: no display at all, a display nobody answers
on, or the system libraries of the X11 plugin missing (PySide6's wheel bundles Qt,
not the xcb libraries it links).  :func:`window_error` finds those cases first and
says in one line what to do instead; ``vramscope FILE`` prints it and exits 2.

``python -m vramscope.viewer.startup.display`` prints the Debian packages of the
missing libraries (nothing when there is no display to use them, or none is
missing): ``make run`` installs those.

Stdlib only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping

# What Qt's xcb platform plugin (libqxcb.so and libQt6XcbQpa.so.6) links beyond what
# the rest of Qt needs, and the Debian/Ubuntu package of each.  The first nine are what
# to install by hand (README, "Install"; the Makefile's PKG_APT bundles them into the
# .deb); the others come with them as their dependencies.
XCB_LIBRARIES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
}
APT_PACKAGES = tuple(list(dict.fromkeys(XCB_LIBRARIES.values()))[:9])

NO_WINDOW = (
    "without a window: vramscope summary FILE, or vramscope FILE --screenshot "
    "OUT.png (renders offscreen)"
)


def _loadable(name: str) -> bool:
    """Whether the plugin would find library ``name``: on the system's search path, or
    beside Qt's own libraries (a wheel or the installer's bundle may carry it there; the
    plugin's RPATH looks there first)."""
    import ctypes  # (here: only a window start pays for it)

    try:
        ctypes.CDLL(name)
    except OSError:
        return any(os.path.exists(os.path.join(d, name)) for d in _bundled_dirs())
    return True


def _bundled_dirs() -> list[str]:
    dirs = []
    if getattr(sys, "frozen", False) and hasattr(sys, "_MEIPASS"):
        dirs.append(sys._MEIPASS)  # the installer's app: what PyInstaller bundled
    try:
        spec = importlib.util.find_spec("PySide6")  # (found, not imported)
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec else []:
        dirs.append(os.path.join(root, "Qt", "lib"))
    return dirs


def missing_libraries(
    libraries: Mapping[str, str] = XCB_LIBRARIES, load: Callable[[str], bool] = _loadable
) -> dict[str, str]:
    """The libraries of ``libraries`` (soname -> package) that cannot be loaded here."""
    return {name: package for name, package in libraries.items() if not load(name)}


def uses_xcb(environ: Mapping[str, str]) -> bool:
    """Whether Qt would start its X11 (xcb) plugin: Linux, and either chosen by
    ``QT_QPA_PLATFORM`` or left to Qt with an X display and no Wayland session."""
    if not sys.platform.startswith("linux"):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(":")[0] == "xcb"
    wayland = environ.get("WAYLAND_DISPLAY") and environ.get("XDG_SESSION_TYPE") == "wayland"
    return bool(environ.get("DISPLAY")) and not wayland


def window_error(
    environ: Mapping[str, str] | None = None,
    libraries: Mapping[str, str] = XCB_LIBRARIES,
    load: Callable[[str], bool] = _loadable,
    reach: Callable[[str], bool] | None = None,
    instead: str = NO_WINDOW,
) -> str | None:
    """Why Qt could not open a window here (one line, ending with ``instead``: what to
    run without a window), or None when it can (as far as can be told without starting
    it).  ``QT_QPA_PLATFORM`` set to anything but ``xcb`` (offscreen, wayland, vnc...)
    is the user's choice and is trusted."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return None
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen and not uses_xcb(env):
        return None
    display = env.get("DISPLAY", "")
    if not display and not (env.get("WAYLAND_DISPLAY") and not chosen):
        unset = "DISPLAY is unset" if chosen else "DISPLAY and WAYLAND_DISPLAY are unset"
        return (
            f"no display to open the window on ({unset}): set DISPLAY, or log in with "
            f"ssh -X; {instead}"
        )
    if not uses_xcb(env):
        return None
    missing = missing_libraries(libraries, load)
    if missing:
        packages = " ".join(dict.fromkeys(missing.values()))
        return (
            f"the window needs system libraries that are missing here "
            f"({', '.join(missing)}): sudo apt-get install {packages}; {instead}"
        )
    if not (reach or display_answers)(display):
        return (
            f"no X server answers on DISPLAY={display}: start one, or log in again with "
            f"ssh -X; {instead}"
        )
    return None


def display_answers(display: str, timeout_s: float = 2.0) -> bool:
    """Whether something accepts connections at X display ``display`` (``:0``,
    ``unix:1``, ``localhost:10.0``...); True for a form not understood (Qt decides)."""
    host, sep, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if not sep or not number.isdigit() or host.startswith("/"):
        return True
    if host in ("", "unix"):
        path = f"/tmp/.X11-unix/X{number}"
        # Xorg and Xwayland listen on the path and on the abstract socket of that name.
        return any(_connects("AF_UNIX", address, timeout_s) for address in (path, "\0" + path))
    return _connects(
        "AF_INET6" if ":" in host else "AF_INET", (host.strip("[]"), 6000 + int(number)), timeout_s
    )


def _connects(family: str, address, timeout_s: float) -> bool:
    import socket

    try:
        with socket.socket(getattr(socket, family), socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(address)
    except OSError:
        return False
    return True


def missing_packages(environ: Mapping[str, str] | None = None) -> list[str]:
    """The Debian packages of the xcb plugin's missing libraries; empty when Qt would not
    use that plugin here (no X display, another platform chosen, not Linux)."""
    env = os.environ if environ is None else environ
    if not uses_xcb(env):
        return []
    return list(dict.fromkeys(missing_libraries().values()))


if __name__ == "__main__":  # pragma: no cover - `make run`
    print(" ".join(missing_packages()))
