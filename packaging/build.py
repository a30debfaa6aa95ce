#!/usr/bin/env python3
"""Build vramscope's workstation installers.

Run with the Python of a build environment in which vramscope is installed
(``pip install .``, not editable) together with ``packaging/requirements.txt``;
``make package`` creates one (build/package/venv) and runs this.  Steps:

1. PyInstaller, ``packaging/vramscope.spec`` -> ``build/package/dist/vramscope/``
2. checks on the folder: nothing forbidden inside (torch, the capture side,
   unused Qt modules), every shared library resolves, the size budget
3. the frozen app: ``--version``, ``--self-test`` (offscreen), ``summary``,
   and ``--help`` of every command ``vramscope --help`` lists
4. archives in ``dist/``:
   Linux   ``vramscope-<version>-linux-<arch>.tar.gz`` (app folder + desktop
           files + ``install-desktop-integration.sh``) and
           ``vramscope_<version>-1_<debarch>.deb`` (dpkg-deb), desktop entry
           validated, the .deb unpacked with ``dpkg -x`` and run from there,
           lintian if present, and a real window under Xvfb (screenshot)
   Windows ``vramscope-<version>-windows-<arch>.zip``
   macOS   ``vramscope-<version>-macos-<arch>.zip`` (+ ``.dmg``)

Each step prints its duration; the last lines summarise sizes.  Exit status
0 when everything passed.  ``python packaging/build.py --help`` for options.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import os
import platform
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
LINUX_FILES = PACKAGING / "linux"
ASSETS = ROOT / "assets"
APP = "vramscope"
ICON_SIZES = (16, 32, 48, 64, 128, 256)
SIZE_BUDGET = 200 * 1000 * 1000  # bytes, unpacked: an app users download must stay small
WINDOW_SNAPSHOT = ROOT / "tests" / "data" / "gpt2_oom.pickle"

LINUX = sys.platform.startswith("linux")
WINDOWS = sys.platform == "win32"
MACOS = sys.platform == "darwin"

# Never inside the app: the capture side and torch, other Qt bindings, Qt
# modules the viewer does not use (paths relative to the app folder, lower case).
FORBIDDEN = re.compile(
    r"(^|/)(torch|torchgen|functorch|triton|matplotlib|scipy|OpenGL|cupy|PyQt5|PyQt6|PySide2)(/|$)"
    r"|vramscope/capture|libQt6(Qml|Quick|Pdf|Network|WebEngine|Multimedia|3D|Sql|Designer)"
    r"|Qt6(Qml|Quick|Pdf|Network|WebEngine)\.dll|/translations/.*\.qm$",
    re.IGNORECASE,
)
# Provided by the system on purpose (PyInstaller never bundles them).
SYSTEM_OPTIONAL = ("libwayland-cursor.so", "libwayland-egl.so")  # Wayland sessions only


class BuildError(Exception):
    pass


# --------------------------------------------------------------------------- helpers
def log(text: str = "") -> None:
    print(text, flush=True)


@contextlib.contextmanager
def step(name: str, durations: dict):
    log(f"==> {name}")
    start = time.perf_counter()
    yield
    durations[name] = time.perf_counter() - start
    log(f"    {name}: {durations[name]:.1f} s")


def run(cmd, *, check=True, capture=False, env=None, cwd=None, timeout=900):
    log("    $ " + " ".join(str(c) for c in cmd))
    result = subprocess.run(
        [str(c) for c in cmd],
        check=False,
        text=True,
        env=env,
        cwd=cwd,
        capture_output=capture,
        timeout=timeout,
    )
    if check and result.returncode:
        detail = (result.stderr or result.stdout or "").strip() if capture else ""
        raise BuildError(f"{Path(str(cmd[0])).name} failed ({result.returncode}) {detail}")
    return result


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def tree_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def app_version() -> str:
    from importlib.metadata import version

    return version("vramscope")


def arch_name() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}.get(machine, machine)


def deb_version(version: str) -> str:
    """PEP 440 -> Debian: pre-releases sort before the release (``~``)."""
    v = re.sub(r"^(\d+(?:\.\d+)*)(?:[-_.]?)(a|b|rc|alpha|beta|c)(\d*)", r"\1~\2\3", version)
    v = re.sub(r"[-_.]?dev(\d*)", r"~dev\1", v)
    v = v.replace("+", "+local.", 1) if "+" in v else v
    return v + "-1"


def clean_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
    }
    env.update(extra)
    return env


# --------------------------------------------------------------------------- 1. PyInstaller
def pyinstaller(work: Path) -> Path:
    distpath = work / "dist"
    shutil.rmtree(distpath, ignore_errors=True)
    # Not from the repository root: there, a stale vramscope.egg-info of an
    # editable install would shadow the installed package's metadata.
    run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--log-level",
            "WARN",
            "--distpath",
            distpath,
            "--workpath",
            work / "work",
            PACKAGING / "vramscope.spec",
        ],
        cwd=work,
    )
    if MACOS:
        return distpath / f"{APP}.app"
    return distpath / APP


def executable(app: Path, console: bool = True) -> Path:
    if WINDOWS:
        return app / (f"{APP}-cli.exe" if console else f"{APP}.exe")
    if MACOS:
        return app / "Contents" / "MacOS" / APP
    return app / APP


def strip_python(app: Path) -> None:
    """Strip debug info from libpython and the stdlib's extension modules.

    PyInstaller's own ``strip`` is off: stripping auditwheel-patched wheels'
    libraries (numpy.libs) corrupts them.  CPython's are plain builds, often
    with debug info (pyenv's libpython: 22 MB -> 5.5 MB).
    """
    strip = shutil.which("strip")
    if not (LINUX and strip):
        return
    internal = app / "_internal"
    targets = list(internal.glob("libpython3*.so*"))
    targets += list(internal.glob("python3*/lib-dynload/*.so"))
    targets = [t for t in targets if t.is_file() and not t.is_symlink()]
    before = sum(t.stat().st_size for t in targets)
    for t in targets:
        subprocess.run([strip, "--strip-debug", str(t)], check=True)
    after = sum(t.stat().st_size for t in targets)
    log(f"    stripped libpython + lib-dynload: {human(before)} -> {human(after)}")


# --------------------------------------------------------------------------- 2. checks
def check_bundle(app: Path) -> dict:
    """Forbidden content, unresolved libraries, size; returns facts for the report."""
    facts: dict = {}
    bad = []
    for p in app.rglob("*"):
        rel = p.relative_to(app).as_posix()
        if FORBIDDEN.search(rel):
            bad.append(rel)
    if bad:
        raise BuildError("forbidden files in the app: " + ", ".join(sorted(bad)[:10]))
    # The compiled snapshot parser (viewer/model/_native/snapparse.c): without it the
    # app still works, on the pure-Python parser, but opens big snapshots ~30x slower.
    if not any(app.rglob("snapparse*.so")) and not any(app.rglob("snapparse*.pyd")):
        raise BuildError(
            "the compiled snapshot parser (vramscope.viewer.model._native.snapparse) "
            "is not in the app: is a C compiler installed?"
        )
    if LINUX:
        facts.update(check_linux_libraries(app))
    size = tree_size(app)
    facts["size"] = size
    facts["contributors"] = contributors(app)
    log(f"    unpacked size {human(size)} ({size / 1e6:.1f} MB; budget {SIZE_BUDGET / 1e6:.0f} MB)")
    for name, n in facts["contributors"][:12]:
        log(f"      {human(n):>10}  {name}")
    if size > SIZE_BUDGET:
        raise BuildError(
            f"the app is {size / 1e6:.1f} MB, over the {SIZE_BUDGET / 1e6:.0f} MB budget"
        )
    return facts


def contributors(app: Path) -> list[tuple[str, int]]:
    """Sizes by component: Qt libraries, plugins, numpy, ... (largest first)."""
    groups: dict[str, int] = {}
    for p in app.rglob("*"):
        if not p.is_file() or p.is_symlink():
            continue
        rel = p.relative_to(app).as_posix()
        rel = rel.removeprefix("_internal/").removeprefix("Contents/Frameworks/")
        parts = rel.split("/")
        if parts[0] == "PySide6" and len(parts) > 2 and parts[1] == "Qt":
            key = f"PySide6/Qt/{parts[2]}"
            if parts[2] == "lib" and parts[-1].startswith("libicu"):
                key = "PySide6/Qt/lib (ICU: libicudata, libicui18n, libicuuc)"
            elif parts[2] == "lib":
                key = "PySide6/Qt/lib (Qt6 Core, Gui, Widgets, ...)"
        elif parts[0] == "PySide6":
            key = "PySide6 (bindings)"
        elif parts[0] == "numpy.libs":
            key = "numpy.libs (OpenBLAS, gfortran)"
        elif len(parts) == 1 and parts[0] in (APP, f"{APP}.exe", f"{APP}-cli.exe"):
            key = "executable (bootloader + archive of all Python bytecode)"
        elif parts[0] == APP:
            key = "vramscope/viewer/assets (icon, self-test example)"
        elif len(parts) == 1 and parts[0].startswith("libpython"):
            key = "libpython"
        elif len(parts) == 1 and (".so" in parts[0] or parts[0].endswith(".dll")):
            key = "system libraries (X11/xcb, glib, dbus, fontconfig, ...)"
        elif parts[0].startswith("python3"):
            key = "python stdlib extension modules"
        else:
            key = parts[0]
        groups[key] = groups.get(key, 0) + p.stat().st_size
    return sorted(groups.items(), key=lambda kv: -kv[1])


def elf_files(app: Path) -> list[Path]:
    out = []
    for p in app.rglob("*"):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(p)
    return out


def check_linux_libraries(app: Path) -> dict:
    """Every library resolves (in the app or on the system); what the system must provide."""
    internal = app / "_internal"
    env = clean_env(LD_LIBRARY_PATH=f"{internal}:{internal / 'PySide6' / 'Qt' / 'lib'}")
    system: dict[str, set] = {}
    missing: dict[str, set] = {}
    glibc = (2, 0)
    for f in elf_files(app):
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, env=env).stdout
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
            if not m:
                continue
            name, path = m.group(1), m.group(3)
            if path is None:
                missing.setdefault(name, set()).add(f.relative_to(app).as_posix())
            elif not Path(path).resolve().is_relative_to(app.resolve()):
                system.setdefault(path, set()).add(f.name)
        syms = (
            subprocess.run(["objdump", "-T", str(f)], capture_output=True, text=True).stdout
            if shutil.which("objdump")
            else ""
        )
        for v in re.findall(r"GLIBC_(\d+)\.(\d+)", syms):
            glibc = max(glibc, (int(v[0]), int(v[1])))
    hard = {k: v for k, v in missing.items() if not k.startswith(SYSTEM_OPTIONAL)}
    if hard:
        raise BuildError(
            "unresolved libraries: "
            + "; ".join(
                f"{k} (needed by {', '.join(sorted(v)[:3])})" for k, v in sorted(hard.items())
            )
        )
    names = sorted({Path(p).name for p in system})
    log(f"    from the system: {', '.join(names)}")
    if missing:
        log(f"    optional, from the system when present: {', '.join(sorted(missing))}")
    log(f"    needs glibc >= {glibc[0]}.{glibc[1]}")
    return {"system_libs": sorted(system), "optional_libs": sorted(missing), "glibc": glibc}


# --------------------------------------------------------------------------- 3. frozen app
def smoke(app: Path, version: str, label: str) -> dict:
    exe = executable(app)
    env = clean_env()
    env.pop("QT_QPA_PLATFORM", None)  # --self-test goes offscreen by itself
    with tempfile.TemporaryDirectory(prefix="vramscope-smoke-") as tmp:
        # Keep the user's settings and cache out of it.
        env.update(HOME=tmp, XDG_CONFIG_HOME=f"{tmp}/config", XDG_CACHE_HOME=f"{tmp}/cache")
        out = run([exe, "--version"], capture=True, env=env, cwd=tmp)
        if out.stdout.strip() != f"{APP} {version}":
            raise BuildError(f"{label}: --version printed {out.stdout.strip()!r}")
        start = time.perf_counter()
        out = run([exe, "--self-test"], capture=True, env=env, cwd=tmp, check=False, timeout=300)
        seconds = time.perf_counter() - start
        if out.returncode != 0 or "self-test passed" not in out.stdout:
            raise BuildError(
                f"{label}: --self-test failed ({out.returncode}): "
                f"{(out.stderr or out.stdout).strip()[-2000:]}"
            )
        log(textwrap.indent(out.stdout.rstrip(), "    | "))
        example = ASSETS / "example_fragmentation_oom.pickle"
        summary = run([exe, "summary", example, "--json"], capture=True, env=env, cwd=tmp)
        if '"reserved_bytes"' not in summary.stdout:
            raise BuildError(f"{label}: summary --json printed no figures")
        # Subcommands are imported by name: each must be in the bundle.
        whatif = run(
            [exe, "whatif", example, "--conf", "expandable_segments:True", "--json"],
            capture=True,
            env=env,
            cwd=tmp,
        )
        if '"peak_reserved_bytes"' not in whatif.stdout:
            raise BuildError(f"{label}: whatif --json printed no prediction")
        attach = run([exe, "attach", "--list"], capture=True, env=env, cwd=tmp)
        if attach.returncode != 0:
            raise BuildError(f"{label}: attach --list failed")
        check_listed_commands(exe, env, tmp, label)
    return {"selftest_output": out.stdout, "selftest_seconds": seconds}


def listed_commands(help_text: str) -> list[str]:
    """The commands ``vramscope --help`` lists (its "commands (...)" epilog)."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("commands ("):
            inside = True
        elif inside and line.startswith("  ") and line.split():
            names.append(line.split()[0])
        elif inside and line.strip():
            break
    return names


def command_answer_problem(name: str, result) -> str | None:
    """Why ``vramscope NAME --help`` did not answer properly, or None."""
    text = (result.stdout or "") + (result.stderr or "")
    if result.returncode != 0:
        return f"exit {result.returncode}: {text.strip()[-300:]}"
    if "Traceback" in text or "Failed to execute" in text:
        return f"a traceback: {text.strip()[-300:]}"
    if not result.stdout.strip():
        return "printed nothing on stdout"
    return None


def check_listed_commands(exe: Path, env: dict, cwd: str, label: str) -> list[str]:
    """Every command ``--help`` lists answers its own ``--help`` in the frozen app."""
    names = listed_commands(run([exe, "--help"], capture=True, env=env, cwd=cwd).stdout)
    if not names:
        raise BuildError(f"{label}: --help lists no commands")
    for name in names:
        result = run(
            [exe, name, "--help"], capture=True, env=env, cwd=cwd, check=False, timeout=120
        )
        problem = command_answer_problem(name, result)
        if problem:
            raise BuildError(f"{label}: `vramscope {name} --help` {problem}")
    log(f"    every listed command answers --help: {', '.join(names)}")
    return names


# --------------------------------------------------------------------------- 4. Linux files
def desktop_tree(dest: Path, exec_path: str | None = None) -> None:
    """share/{applications,icons,mime} under ``dest``."""
    apps = dest / "applications"
    apps.mkdir(parents=True, exist_ok=True)
    text = (LINUX_FILES / f"{APP}.desktop").read_text(encoding="utf-8")
    if exec_path:
        text = re.sub(r"^Exec=\S+", f"Exec={exec_path}", text, flags=re.M)
        text = re.sub(r"^TryExec=\S+", f"TryExec={exec_path}", text, flags=re.M)
    (apps / f"{APP}.desktop").write_text(text, encoding="utf-8")
    for size in ICON_SIZES:
        icon_dir = dest / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        icon_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ASSETS / f"{APP}-{size}.png", icon_dir / f"{APP}.png")
    scalable = dest / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ASSETS / f"{APP}.svg", scalable / f"{APP}.svg")
    mime = dest / "mime" / "packages"
    mime.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LINUX_FILES / f"{APP}-mime.xml", mime / f"{APP}.xml")


def validate_desktop(path: Path) -> str:
    tool = shutil.which("desktop-file-validate")
    if not tool:
        raise BuildError(
            "desktop-file-validate is missing (Debian: apt-get install desktop-file-utils)"
        )
    out = run([tool, path], capture=True, check=False)
    text = (out.stdout + out.stderr).strip()
    if out.returncode or text:  # warnings and hints count as failures too
        raise BuildError(f"desktop-file-validate {path.name}: {text or out.returncode}")
    log(f"    desktop-file-validate {path}: OK (no output)")
    xmllint = shutil.which("xmllint")
    if xmllint:
        run([xmllint, "--noout", LINUX_FILES / f"{APP}-mime.xml"])
    return "OK"


def copy_app(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, symlinks=True)


def tar_gz(folder: Path, out: Path) -> None:
    """Deterministic order, root-owned entries, symlinks kept."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or None

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if epoch:
            info.mtime = epoch
        return info

    entries = sorted(folder.rglob("*"))
    with (
        open(out, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=epoch or 0, filename="") as gz,
    ):
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(folder, arcname=folder.name, recursive=False, filter=norm)
            for p in entries:
                tar.add(
                    p,
                    arcname=f"{folder.name}/{p.relative_to(folder).as_posix()}",
                    recursive=False,
                    filter=norm,
                )


def linux_tarball(app: Path, version: str, facts: dict, work: Path, dist: Path) -> Path:
    name = f"{APP}-{version}-linux-{arch_name()}"
    stage = work / "stage" / name
    shutil.rmtree(stage.parent, ignore_errors=True)
    copy_app(app, stage)
    desktop_tree(stage / "share")
    script = stage / "install-desktop-integration.sh"
    shutil.copyfile(LINUX_FILES / "install-desktop-integration.sh", script)
    script.chmod(0o755)
    glibc = ".".join(map(str, facts.get("glibc", (2, 28))))
    (stage / "README.txt").write_text(
        TARBALL_README.format(name=name, glibc=glibc), encoding="utf-8"
    )
    validate_desktop(stage / "share" / "applications" / f"{APP}.desktop")
    out = dist / f"{name}.tar.gz"
    tar_gz(stage, out)
    return out


TARBALL_README = """\
vramscope - see why your GPU ran out of memory (PyTorch CUDA memory snapshots)

Run it in place:                  ./vramscope [snapshot.pickle]
Check it works (no display):      ./vramscope --self-test
Menu entry, icons, file types:    ./install-desktop-integration.sh
  (for you, in ~/.local/share; --system for /usr/local/share as root;
   --uninstall removes them).  Keep this folder where it is afterwards:
   the menu entry points at {name}/vramscope.

Needs glibc >= {glibc} and the usual desktop libraries (X11/xcb, libGL/EGL,
fontconfig); Wayland sessions use libwayland-client/-cursor/-egl when present.
"""


# --------------------------------------------------------------------------- 5. the .deb
DEB_DEPENDS_FALLBACK = ["libc6", "libxcb1", "libgl1", "libegl1"]
DEB_RECOMMENDS = [
    "libwayland-client0",
    "libwayland-cursor0",
    "libwayland-egl1",
    "fonts-dejavu-core | fonts-liberation2",
    "shared-mime-info",
    "desktop-file-utils",
]


def system_packages(libs: list[str]) -> list[str]:
    """Debian packages owning the system libraries the app links to."""
    packages = set()
    for lib in libs:
        for candidate in (lib, os.path.realpath(lib), lib.replace("/lib/", "/usr/lib/", 1)):
            out = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if out.returncode == 0:
                packages.add(out.stdout.split(":")[0].strip())
                break
    return sorted(packages)


def build_deb(app: Path, version: str, facts: dict, work: Path, dist: Path) -> Path:
    dver = deb_version(version)
    darch = {"x86_64": "amd64", "arm64": "arm64"}.get(arch_name(), arch_name())
    root = work / "deb" / "root"
    shutil.rmtree(root.parent, ignore_errors=True)
    copy_app(app, root / "opt" / APP)
    (root / "usr" / "bin").mkdir(parents=True)
    os.symlink(f"/opt/{APP}/{APP}", root / "usr" / "bin" / APP)
    desktop_tree(root / "usr" / "share")
    validate_desktop(root / "usr" / "share" / "applications" / f"{APP}.desktop")
    doc = root / "usr" / "share" / "doc" / APP
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(COPYRIGHT, encoding="utf-8")
    changelog = (
        f"{APP} ({dver}) unstable; urgency=medium\n\n"
        f"  * Upstream release {version}, built with PyInstaller.\n\n"
        f" -- vramscope developers <vramscope@users.noreply.github.com>  "
        f"{time.strftime('%a, %d %b %Y %H:%M:%S +0000', time.gmtime(_epoch()))}\n"
    )
    with gzip.GzipFile(doc / "changelog.Debian.gz", "wb", compresslevel=9, mtime=_epoch()) as gz:
        gz.write(changelog.encode())
    overrides = root / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    shutil.copyfile(LINUX_FILES / "deb" / "lintian-overrides", overrides / APP)

    packages = system_packages(facts.get("system_libs", [])) or DEB_DEPENDS_FALLBACK
    glibc = facts.get("glibc", (2, 28))
    depends = [
        f"libc6 (>= {glibc[0]}.{glibc[1]})" if p == "libc6" else p
        for p in packages
        if not p.startswith("libwayland")
    ]
    if not any(d.startswith("libc6") for d in depends):
        depends.insert(0, f"libc6 (>= {glibc[0]}.{glibc[1]})")
    installed_kib = (tree_size(root) + 1023) // 1024
    control = root / "DEBIAN"
    control.mkdir()
    (control / "control").write_text(
        textwrap.dedent(f"""\
        Package: {APP}
        Version: {dver}
        Architecture: {darch}
        Maintainer: vramscope developers <vramscope@users.noreply.github.com>
        Installed-Size: {installed_kib}
        Depends: {", ".join(depends)}
        Recommends: {", ".join(DEB_RECOMMENDS)}
        Section: devel
        Priority: optional
        Description: viewer for PyTorch CUDA memory snapshots
         vramscope shows why a GPU ran out of memory: every segment of PyTorch's
         CUDA caching allocator to scale, the blocks inside, the largest free
         block against the request that failed, the allocation timeline and the
         stack of any block.
         .
         This package is the self-contained desktop viewer (its own Python, Qt
         and numpy in /opt/vramscope); the capture side stays a Python package
         next to torch (pip install '.[capture]' in a clone of vramscope).
        """),
        encoding="utf-8",
    )
    for name in ("postinst", "postrm"):
        shutil.copyfile(LINUX_FILES / "deb" / name, control / name)
        (control / name).chmod(0o755)
    md5 = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and "DEBIAN" not in p.relative_to(root).parts:
            digest = hashlib.md5(p.read_bytes()).hexdigest()
            md5.append(f"{digest}  {p.relative_to(root).as_posix()}")
    (control / "md5sums").write_text("\n".join(md5) + "\n", encoding="utf-8")
    for p in [root, *root.rglob("*")]:  # dpkg-deb wants sane modes (umask-proof)
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        executable_bit = p.is_dir() or mode & stat.S_IXUSR
        p.chmod(0o755 if executable_bit else 0o644)
    out = dist / f"{APP}_{dver}_{darch}.deb"
    threads = []  # xz on all cores halves the time; dpkg >= 1.21.9 takes the option
    if "--threads-max" in run(["dpkg-deb", "--help"], capture=True).stdout:
        threads = [f"--threads-max={os.cpu_count() or 1}"]
    run(["dpkg-deb", "--root-owner-group", "-Zxz", *threads, "--build", root, out])
    return out


def _epoch() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or int(time.time())


COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: vramscope

Files: *
Copyright: 2025-2026 vramscope developers
License: BSD-3-Clause

Files: opt/vramscope/_internal/*
Copyright: the respective authors
License: various
 The app folder bundles CPython (PSF-2.0), Qt 6 and PySide6 (LGPL-3.0),
 shiboken6 (LGPL-3.0), pyqtgraph (MIT), numpy (BSD-3-Clause) with OpenBLAS
 (BSD-3-Clause) and libgfortran (GPL-3.0 with the GCC runtime exception),
 ICU (Unicode-3.0) and libraries of the build system (Debian); their license
 texts are in the dist-info folders inside and at /usr/share/common-licenses.
"""


def verify_deb(deb: Path, version: str, work: Path) -> dict:
    info = run(["dpkg-deb", "--info", deb], capture=True).stdout
    contents = run(["dpkg-deb", "--contents", deb], capture=True).stdout
    for needed in (
        "./usr/bin/vramscope -> /opt/vramscope/vramscope",
        "./usr/share/applications/vramscope.desktop",
        "./usr/share/mime/packages/vramscope.xml",
        "./usr/share/icons/hicolor/scalable/apps/vramscope.svg",
        "./usr/share/icons/hicolor/256x256/apps/vramscope.png",
        "./opt/vramscope/vramscope",
    ):
        if needed not in contents:
            raise BuildError(f"{deb.name}: {needed} is missing")
    log(textwrap.indent(info.rstrip(), "    | "))
    target = work / "deb-installed"
    shutil.rmtree(target, ignore_errors=True)
    run(["dpkg", "-x", deb, target])
    app = target / "opt" / APP
    facts = smoke(app, version, f"{deb.name} (dpkg -x)")
    # Through a symlink, as /usr/bin/vramscope is (the bootloader must find _internal).
    link = work / "deb-link" / APP
    shutil.rmtree(link.parent, ignore_errors=True)
    link.parent.mkdir()
    os.symlink(app / APP, link)
    out = run([link, "--version"], capture=True, env=clean_env())
    if out.stdout.strip() != f"{APP} {version}":
        raise BuildError(f"{deb.name}: vramscope through a symlink printed {out.stdout!r}")
    facts["installed_root"] = target
    if shutil.which("lintian"):
        out = run(["lintian", "--no-tag-display-limit", deb], capture=True, check=False)
        tags = (out.stdout + out.stderr).strip().splitlines()
        facts["lintian"] = tags
        errors = [t for t in tags if t.startswith("E:")]
        log(
            f"    lintian: {len(errors)} errors, "
            f"{len(tags) - len(errors)} other tags (informational)"
        )
        for t in tags[:40]:
            log(f"      {t}")
    return facts


# --------------------------------------------------------------------------- 6. a real window
def window_test(app: Path, out_png: Path) -> str | None:
    """Open a snapshot in a real window on Xvfb and take a screenshot of the screen."""
    needed = [shutil.which(t) for t in ("xvfb-run", "xwd", "xwininfo")]
    if not all(needed):
        log(
            "    skipped: needs xvfb-run, xwd and xwininfo "
            "(apt-get install xvfb xauth x11-apps x11-utils)"
        )
        return None
    snapshot = (
        WINDOW_SNAPSHOT
        if WINDOW_SNAPSHOT.is_file()
        else ASSETS / "example_fragmentation_oom.pickle"
    )
    run(
        [
            "xvfb-run",
            "-a",
            "-s",
            "-screen 0 1600x1000x24",
            sys.executable,
            __file__,
            "_window",
            executable(app),
            snapshot,
            out_png,
        ],
        timeout=300,
    )
    return str(out_png)


def _window(exe: str, snapshot: str, out_png: str) -> int:
    """(Inside xvfb-run.) Start the app, wait for its loaded window, screenshot."""
    with tempfile.TemporaryDirectory(prefix="vramscope-window-") as tmp:
        env = clean_env(
            HOME=tmp,
            XDG_CONFIG_HOME=f"{tmp}/config",
            XDG_CACHE_HOME=f"{tmp}/cache",
            QT_QPA_PLATFORM="xcb",
        )
        snapshot = os.path.abspath(snapshot)
        proc = subprocess.Popen([exe, snapshot], env=env, cwd=tmp)
        # The main window's title once the snapshot has loaded (an error box
        # would be titled "Could not open NAME ...": not accepted).
        title = f'"{Path(snapshot).name} \u2014 vramscope"'
        failed = f'"Could not open {Path(snapshot).name}'
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise BuildError(
                        f"the app exited ({proc.returncode}) before its window appeared"
                    )
                tree = subprocess.run(
                    ["xwininfo", "-root", "-tree"], capture_output=True, text=True, errors="replace"
                ).stdout
                if failed in tree:
                    raise BuildError(f"the app could not open {snapshot}")
                if title in tree:
                    break
                time.sleep(0.5)
            else:
                raise BuildError(f"no window titled {title!r} within 120 s")
            time.sleep(3)  # let it paint
            windows = [line.strip() for line in tree.splitlines() if title in line]
            print(f"    window: {windows[0][:160]}", flush=True)
            xwd = subprocess.run(
                ["xwd", "-root", "-silent"], capture_output=True, check=True
            ).stdout
            colours = xwd_to_png(xwd, Path(out_png))
            if colours < 16:
                raise BuildError(f"the screenshot looks blank ({colours} colours)")
            print(f"    screenshot {out_png}: {colours} colours sampled", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


def xwd_to_png(data: bytes, out: Path) -> int:
    """Convert a 24/32-bit TrueColor ZPixmap XWD dump (what Xvfb gives) to PNG."""
    header = struct.unpack(">25I", data[:100])
    header_size, width, height = header[0], header[4], header[5]
    byte_order, bits_per_pixel, bytes_per_line = header[7], header[11], header[12]
    red_mask, ncolors = header[14], header[19]
    if bits_per_pixel not in (24, 32) or header[2] != 2:
        raise BuildError(f"xwd: format {header[2]}, {bits_per_pixel} bits per pixel: not supported")
    size = bits_per_pixel // 8
    pixels = data[header_size + 12 * ncolors :]
    # Byte offset of red, green, blue inside one pixel (masks say where the bits are).
    masks = (red_mask, header[15], header[16])
    offsets = [((m & -m).bit_length() - 1) // 8 for m in masks]
    if byte_order == 1:  # MSBFirst
        offsets = [size - 1 - o for o in offsets]
    raw = bytearray()
    colours = set()
    for y in range(height):
        row = pixels[y * bytes_per_line : y * bytes_per_line + size * width]
        rgb = bytearray(3 * width)
        for c, off in enumerate(offsets):
            rgb[c::3] = row[off::size]
        raw += b"\x00" + rgb
        if y % 16 == 0:
            colours.update(bytes(rgb[i : i + 3]) for i in range(0, len(rgb), 3 * 16))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    png = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    )
    png += chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + chunk(b"IEND", b"")
    out.write_bytes(png)
    return len(colours)


# --------------------------------------------------------------------------- Windows, macOS
def zip_folder(folder: Path, out: Path) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for p in sorted(folder.rglob("*")):
            z.write(p, f"{folder.name}/{p.relative_to(folder).as_posix()}")


def windows_zip(app: Path, version: str, dist: Path) -> list[Path]:
    out = dist / f"{APP}-{version}-windows-{arch_name()}.zip"
    zip_folder(app, out)
    return [out]


def macos_archives(app: Path, version: str, dist: Path) -> list[Path]:
    base = f"{APP}-{version}-macos-{arch_name()}"
    out = dist / f"{base}.zip"
    run(["ditto", "-c", "-k", "--sequesterRsrc", "--keepParent", app, out])
    outs = [out]
    if shutil.which("hdiutil"):
        dmg = dist / f"{base}.dmg"
        run(
            ["hdiutil", "create", "-volname", APP, "-srcfolder", app, "-ov", "-format", "UDZO", dmg]
        )
        outs.append(dmg)
    return outs


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_window"]:
        try:
            return _window(*argv[1:4])
        except BuildError as exc:
            print(f"window test: {exc}", file=sys.stderr)
            return 1
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="where the archives go (dist/)")
    parser.add_argument(
        "--work", default=str(ROOT / "build" / "package"), help="build folder (build/package)"
    )
    parser.add_argument("--no-deb", action="store_true", help="Linux: the tar.gz only")
    parser.add_argument("--no-window", action="store_true", help="Linux: skip the Xvfb window test")
    args = parser.parse_args(argv)

    total = time.perf_counter()
    work, dist = Path(args.work).resolve(), Path(args.dist).resolve()
    work.mkdir(parents=True, exist_ok=True)
    dist.mkdir(parents=True, exist_ok=True)
    durations: dict[str, float] = {}
    artifacts: list[Path] = []
    try:
        version = app_version()
        log(
            f"vramscope {version}: building on {platform.system()} {arch_name()}, "
            f"Python {platform.python_version()}"
        )
        with step("pyinstaller", durations):
            app = pyinstaller(work)
            strip_python(app)
        with step("check the app folder", durations):
            facts = check_bundle(app)
        with step("frozen app: --version, --self-test, summary", durations):
            facts.update(smoke(app, version, "frozen app"))
        if LINUX:
            with step("tar.gz", durations):
                artifacts.append(linux_tarball(app, version, facts, work, dist))
            if not args.no_deb:
                if not shutil.which("dpkg-deb"):
                    raise BuildError(
                        "dpkg-deb is missing (use --no-deb, or build on Debian/Ubuntu)"
                    )
                with step(".deb", durations):
                    deb = build_deb(app, version, facts, work, dist)
                    artifacts.append(deb)
                with step(".deb: contents, dpkg -x, self-test, lintian", durations):
                    facts.update(verify_deb(deb, version, work))
            if not args.no_window:
                with step("real window under Xvfb", durations):
                    root = facts.get("installed_root")
                    target = Path(root) / "opt" / APP if root else app
                    facts["screenshot"] = window_test(target, work / "xvfb-window.png")
        elif WINDOWS:
            with step("zip", durations):
                artifacts += windows_zip(app, version, dist)
        elif MACOS:
            with step("zip, dmg", durations):
                artifacts += macos_archives(app, version, dist)
    except BuildError as exc:
        log(f"make package: FAILED: {exc}")
        return 1

    sums = [f"{hashlib.sha256(a.read_bytes()).hexdigest()}  {a.name}" for a in artifacts]
    (dist / "SHA256SUMS").write_text("\n".join(sums) + "\n", encoding="utf-8")
    log("")
    log(
        f"built in {time.perf_counter() - total:.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in durations.items())
    )
    log(
        f"app folder {app}: {human(facts['size'])} unpacked ({facts['size'] / 1e6:.1f} MB, "
        f"budget {SIZE_BUDGET / 1e6:.0f} MB); self-test {facts['selftest_seconds']:.1f} s"
    )
    for a in artifacts:
        log(
            f"  {a.relative_to(dist.parent) if dist.parent in a.parents else a}: "
            f"{human(a.stat().st_size)}"
        )
    if facts.get("screenshot"):
        log(f"  window screenshot (Xvfb): {facts['screenshot']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
