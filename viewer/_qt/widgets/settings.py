"""Persistent settings (window geometry, recent files) through QSettings.

``VRAMSCOPE_SETTINGS_FILE`` (an INI path) overrides the per-user location; the
tests point it at a temporary directory so that they never touch real settings.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings

ORGANIZATION = "vramscope"
APPLICATION = "vramscope"
ENV_FILE = "VRAMSCOPE_SETTINGS_FILE"
MAX_RECENT = 10


def settings() -> QSettings:
    path = os.environ.get(ENV_FILE)
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(ORGANIZATION, APPLICATION)


def recent_files() -> list[str]:
    value = settings().value("recentFiles", [])
    if isinstance(value, str):  # QSettings returns a bare string for one element
        value = [value]
    return [str(v) for v in (value or []) if v]


def add_recent_file(path: str) -> list[str]:
    path = os.path.abspath(path)
    files = [path] + [f for f in recent_files() if f != path]
    files = files[:MAX_RECENT]
    s = settings()
    s.setValue("recentFiles", files)
    s.sync()
    return files


def clear_recent_files() -> None:
    s = settings()
    s.setValue("recentFiles", [])
    s.sync()
