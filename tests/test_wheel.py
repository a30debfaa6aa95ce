"""Build the wheel, install it into a fresh venv, run the installed command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(out: Path, src: Path = ROOT, drop: tuple[str, ...] = (), **env: str) -> Path:
    """``drop``: environment variables the build must not see."""
    base = {k: v for k, v in os.environ.items() if k not in drop}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        timeout=600,
        env=dict(base, **env),
    )
    (path,) = out.glob("vramscope-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


def compiled(names: list[str], stem: str) -> bool:
    return any(
        n.startswith(f"vramscope/viewer/model/_native/{stem}.") and n.endswith((".so", ".pyd"))
        for n in names
    )


def test_wheel_maps_top_level_folders_to_vramscope_packages(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "vramscope/viewer/__init__.py" in names
    assert "vramscope/viewer/model/io/safe_pickle.py" in names
    # The C extensions are compiled into the (now platform-specific) wheel.
    assert compiled(names, "snapparse"), "the compiled snapshot parser is missing"
    assert "-py3-none-any" not in wheel.name
    assert "vramscope/capture/__init__.py" in names
    assert any(n.startswith("vramscope/viewer/assets/") and n.endswith(".svg") for n in names)
    # Never the bare folder names in site-packages.
    assert not any(n.startswith(("viewer/", "capture/", "assets/")) for n in names)
    # Every source package of the repository made it into the wheel (viewer/api/ as the
    # top package vramscope: `import vramscope`).
    from tests.test_architecture import installed_name

    assert "vramscope/__init__.py" in names and "vramscope/recording.py" in names
    for folder in ("viewer", "capture"):
        for init in (ROOT / folder).rglob("__init__.py"):
            package = installed_name(init.parent).replace(".", "/")
            assert f"{package}/__init__.py" in names, init


@pytest.mark.slow
def test_installed_wheel_runs(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900, env=env
    )
    out = subprocess.run(
        [str(env_dir / "bin" / "vramscope"), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    from vramscope.viewer import __version__

    assert out.stdout.strip() == f"vramscope {__version__}"
    example = ROOT / "tests" / "data" / "capacity_oom.pickle"
    out = subprocess.run(
        [str(env_dir / "bin" / "vramscope"), "summary", str(example), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and '"reserved_bytes": 3732930560' in out.stdout
    # The Python API from the installed wheel: the same answer as the command.
    probe = (
        "import json, sys, vramscope; print(vramscope.__version__); "
        "print(json.dumps(vramscope.open(sys.argv[1]).summary().to_dict()))"
    )
    api = subprocess.run(
        [str(py), "-c", probe, str(example)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert api.returncode == 0, api.stderr
    version, summary = api.stdout.splitlines()
    assert version == __version__
    cli = json.loads(out.stdout)
    assert json.loads(summary) == cli


def test_wheel_without_a_compiler_still_builds_and_runs(tmp_path):
    """No C compiler: the wheel builds anyway and vramscope runs on the pure-Python parser."""
    # A clean copy of the sources: no build/ folder or in-place .so to reuse.
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.so",
            "*.pyd",
            "__pycache__",
            ".*cache*",
            "data",
            "*.egg-info",
            ".hypothesis",
        ),
    )
    # The CI's native gate (VRAMSCOPE_REQUIRE_NATIVE=1) makes a failed build an error on
    # purpose; this test is about a user's machine without a compiler, which has no gate.
    path = build_wheel(
        tmp_path / "dist",
        src,
        drop=("VRAMSCOPE_REQUIRE_NATIVE",),
        CC="/bin/false",
        VRAMSCOPE_NATIVE_CFLAGS="",
    )
    names = zipfile.ZipFile(path).namelist()
    assert not compiled(names, "snapparse")
    assert "vramscope/viewer/model/_native/snapparse.c" not in names  # sources stay in the sdist
    site = tmp_path / "site"
    zipfile.ZipFile(path).extractall(site)
    # -S: no site-packages hooks, so the editable install of this checkout is out of the way;
    # numpy comes from this interpreter's site-packages, after the unpacked wheel.
    import numpy

    paths = os.pathsep.join([str(site), str(Path(numpy.__file__).parents[1])])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAMSCOPE_PURE_PYTHON")}
    code = (
        "import sys; from vramscope.viewer.model.io import fast_pickle; "
        "assert not fast_pickle.available(); "
        "assert fast_pickle.__file__.startswith(sys.argv[1]); "
        "from vramscope.viewer.cli import main; sys.exit(main(sys.argv[2:]))"
    )
    example = ROOT / "tests" / "data" / "capacity_oom.pickle"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site), "summary", str(example), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(env, PYTHONPATH=paths),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert '"reserved_bytes": 3732930560' in out.stdout
