"""Build the wheel, install it into a fresh venv, run the installed command."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, timeout=600)
    (path,) = out.glob("vramscope-*.whl")
    return path


def test_wheel_maps_top_level_folders_to_vramscope_packages(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "vramscope/viewer/__init__.py" in names
    assert "vramscope/viewer/model/safe_pickle.py" in names
    assert "vramscope/capture/__init__.py" in names
    assert any(n.startswith("vramscope/viewer/assets/") and n.endswith(".svg") for n in names)
    # Never the bare folder names in site-packages.
    assert not any(n.startswith(("viewer/", "capture/", "assets/")) for n in names)
    # Every source package of the repository made it into the wheel.
    for folder, package in (("viewer", "vramscope/viewer"), ("capture", "vramscope/capture")):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT / folder).as_posix()
            assert f"{package}/{rel}" in names, rel


@pytest.mark.slow
def test_installed_wheel_runs(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   timeout=900, env=env)
    out = subprocess.run([str(env_dir / "bin" / "vramscope"), "--version"], capture_output=True,
                         text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    from vramscope.viewer import __version__

    assert out.stdout.strip() == f"vramscope {__version__}"
    example = ROOT / "tests" / "data" / "capacity_oom.pickle"
    out = subprocess.run([str(env_dir / "bin" / "vramscope"), "summary", str(example), "--json"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0 and '"reserved_bytes": 3732930560' in out.stdout
