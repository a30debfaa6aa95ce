"""packaging/build.py's helpers and the PyInstaller spec's promises, without building."""

from __future__ import annotations

import ast
import re
import struct
import tarfile
import zlib
from pathlib import Path

import pytest

from tests.packaging.helpers import ROOT, build_module

build = build_module()
SPEC = ROOT / "packaging" / "vramscope.spec"


@pytest.mark.parametrize(
    "pep440, debian",
    [
        ("0.1.0", "0.1.0-1"),
        ("1.2.0rc1", "1.2.0~rc1-1"),
        ("1.2.0b2", "1.2.0~b2-1"),
        ("1.3.0.dev4", "1.3.0~dev4-1"),
        ("0.1.0+g1234", "0.1.0+local.g1234-1"),
    ],
)
def test_debian_versions_sort_like_python_ones(pep440, debian):
    assert build.deb_version(pep440) == debian


def spec_list(name: str) -> list:
    tree = ast.parse(SPEC.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return [elt.value for elt in node.value.elts if isinstance(elt, ast.Constant)]
    raise AssertionError(f"{name} not in the spec")


def test_spec_excludes_torch_capture_and_heavy_extras():
    excludes = set(spec_list("EXCLUDES"))
    for name in (
        "torch",
        "vramscope.capture",
        "matplotlib",
        "scipy",
        "OpenGL",
        "cupy",
        "PyQt5",
        "tkinter",
    ):
        assert name in excludes, name


def test_spec_names_the_commands_cli_imports_by_name():
    """Regression: `record` was excluded, so the frozen app crashed on a command its --help
    lists.  Every listed command is bundled (its capture side stays out)."""
    hidden = set(spec_list("HIDDEN"))
    excludes = set(spec_list("EXCLUDES"))
    from vramscope.viewer.cli import COMMANDS

    for name, (module, _) in COMMANDS.items():
        assert f"vramscope.viewer.commands.{module}" in hidden, name
        assert f"vramscope.viewer.commands.{module}" not in excludes, name
    assert 'collect_submodules("vramscope.viewer.commands")' in SPEC.read_text()


@pytest.mark.parametrize(
    "path, kept",
    [
        ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
        ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", False),
        ("PySide6/Qt/plugins/imageformats/libqpdf.so", False),
        ("PySide6/Qt/plugins/imageformats/libqsvg.so", True),
        ("PySide6/Qt/plugins/iconengines/libqsvgicon.so", True),
        ("PySide6/Qt/plugins/sqldrivers/libqsqlite.so", False),
        ("PySide6/Qt/translations/qtbase_de.qm", False),
        ("PySide6/Qt/lib/libQt6Quick.so.6", False),
        ("PySide6/Qt/lib/libQt6Widgets.so.6", True),
        ("PySide6/Qt/plugins/platforms/qwindows.dll", True),
        ("vramscope/viewer/assets/vramscope.svg", True),
    ],
)
def test_spec_keeps_only_the_qt_parts_the_viewer_uses(path, kept):
    source = SPEC.read_text()
    namespace: dict = {"SPECPATH": str(SPEC.parent)}
    # Only the trimming rules: everything before the Analysis.
    head = source[: source.index("def _collect_only_kept_plugins")]
    # PyInstaller is only in the packaging venv: stand in for its two hooks.
    head = re.sub(
        r"^from PyInstaller\.utils\.hooks import .*$",
        "copy_metadata = collect_submodules = lambda name: []",
        head,
        flags=re.M,
    )
    exec(compile(head, str(SPEC), "exec"), namespace)
    assert namespace["keep"](path) is kept


def _xwd(width: int, height: int, bpp: int, pixel: bytes) -> bytes:
    bytes_per_line = width * bpp // 8
    name = b"root\x00\x00\x00\x00"
    header_size = 100 + len(name)
    fields = [
        header_size,
        7,
        2,
        24,
        width,
        height,
        0,
        0,
        32,
        0,
        32,
        bpp,
        bytes_per_line,
        4,
        0xFF0000,
        0xFF00,
        0xFF,
        8,
        256,
        0,
        width,
        height,
        0,
        0,
        0,
    ]
    return struct.pack(">25I", *fields) + name + pixel * (width * height)


@pytest.mark.parametrize(
    "bpp, pixel", [(32, bytes([0x30, 0x20, 0x10, 0])), (24, bytes([0x30, 0x20, 0x10]))]
)
def test_xwd_screenshots_convert_to_png(tmp_path, bpp, pixel):
    out = tmp_path / "shot.png"
    build.xwd_to_png(_xwd(5, 3, bpp, pixel), out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (5, 3)
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4 : idat])[0]
    raw = zlib.decompress(data[idat + 4 : idat + 4 + length])
    assert raw[:4] == bytes([0, 0x10, 0x20, 0x30])  # filter byte, then R G B (LSBFirst BGRX)


def test_tarballs_are_root_owned_and_keep_symlinks(tmp_path):
    folder = tmp_path / "vramscope-0-linux-x86_64"
    (folder / "_internal").mkdir(parents=True)
    (folder / "_internal" / "lib.so").write_bytes(b"x")
    (folder / "lib.so").symlink_to("_internal/lib.so")
    out = tmp_path / "a.tar.gz"
    build.tar_gz(folder, out)
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {
        folder.name,
        f"{folder.name}/_internal",
        f"{folder.name}/_internal/lib.so",
        f"{folder.name}/lib.so",
    }
    assert members[f"{folder.name}/lib.so"].issym()
    assert all(m.uid == 0 and m.uname == "root" for m in members.values())


def test_nothing_forbidden_passes_the_bundle_check():
    assert build.FORBIDDEN.search("_internal/torch/lib/libtorch_cpu.so")
    assert build.FORBIDDEN.search("_internal/vramscope/capture/backend.pyc")
    assert build.FORBIDDEN.search("_internal/PySide6/Qt/lib/libQt6Qml.so.6")
    assert build.FORBIDDEN.search("_internal/PySide6/Qt/translations/qtbase_de.qm")
    assert not build.FORBIDDEN.search("_internal/PySide6/Qt/lib/libQt6Widgets.so.6")
    assert not build.FORBIDDEN.search("_internal/vramscope/viewer/assets/vramscope.svg")


def test_make_package_target_builds_with_its_own_venv():
    makefile = (ROOT / "Makefile").read_text()
    assert "\npackage:" in makefile
    target = makefile[makefile.index("\npackage:") :]
    assert "packaging/requirements.txt" in target and "packaging/build.py" in target
    assert Path(ROOT / "packaging" / "requirements.txt").read_text().count("pyinstaller==") == 1


def test_listed_commands_are_read_from_the_real_help():
    """build.py checks each command `vramscope --help` lists; the parser must find them all."""
    import subprocess
    import sys

    from vramscope.viewer.cli import COMMANDS

    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert build.listed_commands(out.stdout) == list(COMMANDS)


def test_record_without_the_capture_side_answers_in_one_line():
    """Regression: as in the frozen app (vramscope.capture left out), `record --help` answers
    on stdout with exit 0 and `record x.py` exits 2 with one line: both say where capture runs."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['vramscope.capture'] = None; "
        "from vramscope.viewer.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    for args, rc in ((["record", "--help"], 0), (["record", "x.py", "--lr", "1"], 2)):
        out = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == rc, out.stderr
        text = (out.stdout if rc == 0 else out.stderr).strip()
        assert len(text.splitlines()) == 1 and "Traceback" not in out.stderr
        assert "training environment" in text and "pip install '.[capture]' in a clone" in text
        assert "python -m vramscope.capture" in text
        if rc == 0:
            assert build.command_answer_problem("record", out) is None
