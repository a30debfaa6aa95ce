"""Desktop integration files: the desktop entry, the MIME types, the
install script and the .deb maintainer scripts.

Checked with Debian's tools when present (desktop-file-validate, xmllint,
update-mime-database), and always by reading the files.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.packaging.helpers import ROOT, build_module

LINUX = ROOT / "packaging" / "linux"
DESKTOP = LINUX / "vramscope.desktop"
MIME_XML = LINUX / "vramscope-mime.xml"
NS = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
SNAPSHOT = "application/x-pytorch-memory-snapshot"
PICKLE = "application/x-python-pickle"


def desktop_entry(path: Path = DESKTOP) -> dict:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(path, encoding="utf-8")
    return dict(parser["Desktop Entry"])


def globs() -> list[tuple[int, str, str]]:
    """(weight, pattern, type) for every glob of the MIME XML."""
    out = []
    for mime in ET.parse(MIME_XML).getroot().findall("m:mime-type", NS):
        for glob in mime.findall("m:glob", NS):
            out.append((int(glob.get("weight", 50)), glob.get("pattern"), mime.get("type")))
    return out


def mime_type_of(filename: str) -> str | None:
    """The shared-mime-info rule: the highest weight wins, then the longest pattern."""
    matches = [
        (w, len(p), t) for w, p, t in globs() if fnmatch.fnmatch(filename.lower(), p.lower())
    ]
    return max(matches)[2] if matches else None


# --------------------------------------------------------------------------- desktop entry
def _needs(tool: str, package: str) -> None:
    """Skip without ``tool`` (``make test`` installs it where it can), but fail under CI,
    where the check must run."""
    if shutil.which(tool) is None:
        reason = f"needs {tool} ({package})"
        pytest.fail(reason) if os.environ.get("CI") else pytest.skip(reason)


def test_desktop_entry_validates():
    _needs("desktop-file-validate", "desktop-file-utils")
    out = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr


def test_desktop_entry_launches_vramscope_for_both_types():
    entry = desktop_entry()
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "vramscope %f"
    assert entry["TryExec"] == "vramscope"
    assert entry["Icon"] == "vramscope"
    assert entry["Terminal"] == "false"
    assert "Development" in entry["Categories"].split(";")
    types = [t for t in entry["MimeType"].split(";") if t]
    assert types == [SNAPSHOT, PICKLE]


def test_no_default_application_is_set():
    # "Open With" for pickles, never their default: no mimeapps.list anywhere.
    names = {p.name for p in (ROOT / "packaging").rglob("*")}
    assert not names & {"mimeapps.list", "defaults.list"}
    for script in (LINUX / "install-desktop-integration.sh", LINUX / "deb" / "postinst"):
        text = script.read_text()
        assert "xdg-mime default" not in text and "mimeapps.list\n" not in text


# --------------------------------------------------------------------------- MIME types
def test_mime_xml_is_well_formed_for_xmllint():
    _needs("xmllint", "libxml2-utils")
    subprocess.run(["xmllint", "--noout", str(MIME_XML)], check=True)


def test_mime_types_defined():
    root = ET.parse(MIME_XML).getroot()
    types = {m.get("type"): m for m in root.findall("m:mime-type", NS)}
    assert set(types) == {SNAPSHOT, PICKLE}
    parent = types[SNAPSHOT].find("m:sub-class-of", NS)
    assert parent is not None and parent.get("type") == PICKLE
    assert types[SNAPSHOT].find("m:comment", NS).text


@pytest.mark.parametrize(
    "name, expected",
    [
        ("snapshot.pickle", SNAPSHOT),
        ("my_snapshot.pickle", SNAPSHOT),
        ("Memory_Snapshot.PICKLE", SNAPSHOT),
        ("memory_snapshot.pickle.xz", SNAPSHOT),
        ("gpu-node-3_pid4242_rank1_cuda1_oom_20250301-142501-318.pickle", SNAPSHOT),
        ("vm_pid868_cuda0_exit_20261121-064738-501.pickle", SNAPSHOT),
        ("model.pkl", PICKLE),
        ("features.pickle", PICKLE),
        ("data.tar.gz", None),
        ("notes.txt", None),
    ],
)
def test_file_names_map_to_types(name, expected):
    assert mime_type_of(name) == expected


def test_plain_pickles_are_not_claimed_as_snapshots():
    for weight, pattern, mime in globs():
        if mime == SNAPSHOT:
            assert pattern not in ("*.pickle", "*.pkl", "*.pickle.gz", "*.pickle.xz")
        else:
            assert weight < 50, "generic pickle globs yield to any other definition"


@pytest.mark.skipif(not shutil.which("update-mime-database"), reason="needs shared-mime-info")
def test_update_mime_database_accepts_the_types(tmp_path):
    packages = tmp_path / "mime" / "packages"
    packages.mkdir(parents=True)
    shutil.copy(MIME_XML, packages / "vramscope.xml")
    out = subprocess.run(
        ["update-mime-database", str(tmp_path / "mime")], capture_output=True, text=True
    )
    assert out.returncode == 0 and "warning" not in (out.stdout + out.stderr).lower(), out.stderr
    globs2 = (tmp_path / "mime" / "globs2").read_text()
    assert f"60:{SNAPSHOT}:*snapshot*.pickle" in globs2
    assert f"40:{PICKLE}:*.pickle" in globs2
    assert f"{SNAPSHOT} {PICKLE}" in (tmp_path / "mime" / "subclasses").read_text()


# --------------------------------------------------------------------------- scripts
@pytest.mark.parametrize("script", ["install-desktop-integration.sh", "deb/postinst", "deb/postrm"])
def test_shell_scripts_parse(script):
    path = LINUX / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    subprocess.run(["sh", "-n", str(path)], check=True)


def test_tarball_desktop_integration_installs_and_uninstalls(tmp_path):
    app = tmp_path / "apps" / 'vramscope 0.1 "x" 100%'
    app.mkdir(parents=True)
    (app / "vramscope").write_text("#!/bin/sh\n")
    (app / "vramscope").chmod(0o755)
    script = app / "install-desktop-integration.sh"
    shutil.copy(LINUX / "install-desktop-integration.sh", script)
    build_module().desktop_tree(app / "share")
    data = tmp_path / "data"
    env = dict(os.environ, XDG_DATA_HOME=str(data))
    out = subprocess.run([str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    entry = desktop_entry(data / "applications" / "vramscope.desktop")
    exe = str(app / "vramscope")
    escaped = exe.replace('"', '\\\\"').replace("%", "%%")
    assert entry["Exec"] == f'"{escaped}" %f'
    assert entry["TryExec"] == exe
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(
            ["desktop-file-validate", str(data / "applications" / "vramscope.desktop")],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0 and check.stdout == "", check.stdout
    for rel in (
        "icons/hicolor/48x48/apps/vramscope.png",
        "icons/hicolor/scalable/apps/vramscope.svg",
        "mime/packages/vramscope.xml",
    ):
        assert (data / rel).is_file(), rel
    out = subprocess.run([str(script), "--uninstall"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert not (data / "applications" / "vramscope.desktop").exists()
    assert not (data / "mime" / "packages" / "vramscope.xml").exists()
