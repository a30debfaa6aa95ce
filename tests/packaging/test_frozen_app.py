"""The built installers, when ``make package`` has made them for this version.

``make package`` takes about 2 minutes, so the test suite never builds; it checks
the artifacts in dist/ when they exist and skips otherwise.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tarfile

import pytest

from tests.packaging.helpers import ROOT, build_module
from vramscope.viewer import __version__

DIST = ROOT / "dist"
ARCH = {"amd64": "x86_64", "aarch64": "arm64"}.get(
    platform.machine().lower(), platform.machine().lower()
)
TARBALL = DIST / f"vramscope-{__version__}-linux-{ARCH}.tar.gz"
DEBS = sorted(DIST.glob(f"vramscope_{build_module().deb_version(__version__)}_*.deb"))
BUDGET = 200 * 1000 * 1000

needs_tarball = pytest.mark.skipif(
    not TARBALL.is_file(), reason=f"run `make package` first ({TARBALL.name})"
)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    target = tmp_path_factory.mktemp("frozen")
    with tarfile.open(TARBALL) as tar:
        tar.extractall(target, filter="tar")
    (folder,) = target.iterdir()
    return folder


@needs_tarball
def test_tarball_holds_the_app_and_its_desktop_files():
    with tarfile.open(TARBALL) as tar:
        names = tar.getnames()
        size = sum(m.size for m in tar.getmembers() if m.isfile())
    top = TARBALL.name.removesuffix(".tar.gz")
    for rel in (
        "vramscope",
        "_internal",
        "install-desktop-integration.sh",
        "share/applications/vramscope.desktop",
        "share/mime/packages/vramscope.xml",
        "share/icons/hicolor/scalable/apps/vramscope.svg",
        "share/icons/hicolor/16x16/apps/vramscope.png",
    ):
        assert f"{top}/{rel}" in names, rel
    assert not [n for n in names if "/torch/" in n or "vramscope/capture" in n]
    assert size <= BUDGET, f"{size / 1e6:.1f} MB unpacked"


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QT_QPA_PLATFORM")}
    env.update(
        HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "c"), XDG_CACHE_HOME=str(tmp_path / "k")
    )
    return env


@needs_tarball
def test_unpacked_app_self_test_and_version(unpacked, tmp_path):
    exe = unpacked / "vramscope"
    out = subprocess.run(
        [str(exe), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert out.stdout.strip() == f"vramscope {__version__}"
    out = subprocess.run(
        [str(exe), "--self-test"],
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "self-test passed" in out.stdout and "frozen app" in out.stdout


@needs_tarball
def test_every_listed_command_answers_help_in_the_frozen_app(unpacked, tmp_path):
    """Regression: `vramscope record --help` from the .deb printed a traceback
    (ModuleNotFoundError) while `vramscope --help` listed `record`."""
    build = build_module()
    exe = unpacked / "vramscope"
    env = _env(tmp_path)
    out = subprocess.run(
        [str(exe), "--help"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    names = build.listed_commands(out.stdout)
    assert "record" in names and "summary" in names, out.stdout
    for name in names:
        result = subprocess.run(
            [str(exe), name, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
        assert build.command_answer_problem(name, result) is None, (name, result.stderr)
    # record itself: one line that says where capture runs, exit 2, no traceback.
    script = tmp_path / "x.py"
    script.write_text("print('never run')\n")
    result = subprocess.run(
        [str(exe), "record", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "pip install '.[capture]' in a clone" in line and "python -m vramscope.capture" in line


@pytest.mark.skipif(
    not (DEBS and shutil.which("dpkg-deb")), reason="run `make package` first (.deb)"
)
def test_deb_installs_the_app_the_entry_the_icons_and_the_mime_type():
    contents = subprocess.run(
        ["dpkg-deb", "--contents", str(DEBS[-1])], capture_output=True, text=True, check=True
    ).stdout
    for path in (
        "./usr/bin/vramscope -> /opt/vramscope/vramscope",
        "./opt/vramscope/vramscope",
        "./usr/share/applications/vramscope.desktop",
        "./usr/share/mime/packages/vramscope.xml",
        "./usr/share/icons/hicolor/scalable/apps/vramscope.svg",
        "./usr/share/icons/hicolor/256x256/apps/vramscope.png",
    ):
        assert path in contents, path
    info = subprocess.run(
        ["dpkg-deb", "--field", str(DEBS[-1]), "Package", "Depends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Package: vramscope" in info and "libc6 (>=" in info
