"""A first start: no display, a mistyped command, missing X11 libraries, what the
Makefile installs as root.  Each says one line (and exit 2) before Qt could abort the
process with its own five lines and exit 134."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramscope.viewer.startup import display

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
FILE = DATA / "fragmentation_oom.pickle"
# Run the command line in a fresh interpreter and say whether Qt was imported.
CLI = (
    "import sys\n"
    "from vramscope.viewer.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('qt' if 'PySide6.QtWidgets' in sys.modules else 'no qt')\n"
    "sys.exit(code)\n"
)


def headless_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    env.update(extra)
    return env


def vramscope(*args: str, env: dict[str, str] | None = None, module: bool = True):
    cmd = (
        [sys.executable, "-m", "vramscope.viewer", *args]
        if module
        else [sys.executable, "-c", CLI, *args]
    )
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env if env is not None else headless_env(),
    )


def test_a_start_without_a_display_is_one_line_and_exit_2():
    for args in ([os.fspath(FILE)], []):
        run = vramscope(*args)
        assert run.returncode == 2, (args, run.returncode, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, run.stderr
        line = lines[0]
        assert line.startswith("vramscope: error: no display"), line
        for hint in ("DISPLAY", "ssh -X", "vramscope summary FILE", "--screenshot"):
            assert hint in line, (hint, line)
        assert "xcb" not in line


def test_the_live_window_without_a_display_is_one_line_too(tmp_path):
    run = vramscope("attach", os.fspath(tmp_path / "agent.sock"), "--gui", module=False)
    assert run.returncode == 2 and run.stdout.strip() == "no qt", (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: no display"), lines
    assert "vramscope attach TARGET" in lines[0]


def test_the_display_check_runs_before_qt_is_imported():
    run = vramscope(os.fspath(FILE), module=False)
    assert run.returncode == 2 and run.stdout.strip() == "no qt", (run.stdout, run.stderr)


def test_a_screenshot_needs_no_display(tmp_path):
    out = tmp_path / "shot.png"
    run = vramscope(os.fspath(FILE), "--screenshot", os.fspath(out))
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_mistyped_command_is_named_as_one():
    run = vramscope(
        "summery", os.fspath(FILE), module=False, env=headless_env(QT_QPA_PLATFORM="offscreen")
    )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "vramscope: error: unknown command 'summery' (did you mean summary?)"
    )
    assert run.stdout.strip() == "no qt"  # never a window, not even offscreen


def test_a_word_that_is_neither_file_nor_command_lists_the_commands():
    from vramscope.viewer.cli import COMMANDS

    run = vramscope("frobnicate", module=False, env=headless_env(QT_QPA_PLATFORM="offscreen"))
    assert run.returncode == 2 and run.stdout.strip() == "no qt"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: frobnicate: no such file")
    assert all(name in lines[0] for name in COMMANDS), lines[0]
    run = vramscope("missing.pickle", module=False, env=headless_env(QT_QPA_PLATFORM="offscreen"))
    assert run.returncode == 2 and run.stdout.strip() == "no qt"
    assert run.stderr.strip() == "vramscope: error: missing.pickle: no such file"


def test_a_missing_library_is_named_with_its_package():
    """The check loads each library as the plugin would; one that is not there is named
    with the Debian package to install (a name no system has stands in for it)."""
    libraries = {"libvramscope-absent.so.7": "vramscope-absent7", "libc.so.6": "libc6"}
    assert display.missing_libraries(libraries) == {"libvramscope-absent.so.7": "vramscope-absent7"}
    error = display.window_error({"DISPLAY": ":0"}, libraries=libraries, reach=lambda d: True)
    assert error is not None and "\n" not in error
    assert "libvramscope-absent.so.7" in error and "sudo apt-get install vramscope-absent7" in error
    assert "libc6" not in error
    # Present libraries, a display that answers: nothing to say.
    assert (
        display.window_error(
            {"DISPLAY": ":0"}, libraries={"libc.so.6": "libc6"}, reach=lambda d: True
        )
        is None
    )


def test_the_platform_decides_what_is_checked():
    absent = {"libvramscope-absent.so.7": "vramscope-absent7"}
    # Offscreen (or any platform the user chose but xcb): trusted, nothing checked.
    assert display.window_error({"QT_QPA_PLATFORM": "offscreen"}, libraries=absent) is None
    # A Wayland session uses Qt's wayland plugin: the xcb libraries are not needed.
    assert (
        display.window_error(
            {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", "DISPLAY": ":0"},
            libraries=absent,
        )
        is None
    )
    assert "DISPLAY is unset" in display.window_error({"QT_QPA_PLATFORM": "xcb"})
    # What `make run` installs: nothing without a display to use it, else what is missing.
    assert display.missing_packages({}) == []
    assert display.missing_packages({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"}) == []
    assert display.missing_packages({"DISPLAY": ":0"}) == list(
        dict.fromkeys(display.missing_libraries().values())
    )
    # An X display nobody answers on: said, not left to Qt's abort.
    error = display.window_error({"DISPLAY": ":0"}, libraries={}, reach=lambda d: False)
    assert error is not None and "DISPLAY=:0" in error


def test_a_display_that_answers_is_found():
    """``host:N`` is X's TCP port 6000 + N: a listener there answers, none does not."""
    import socket

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    for number in range(70, 200):  # (a free port at 6000 + N)
        try:
            server.bind(("127.0.0.1", 6000 + number))
            break
        except OSError:
            continue
    server.listen(1)
    try:
        assert display.display_answers(f"127.0.0.1:{number}.0")
    finally:
        server.close()
    assert not display.display_answers(f"127.0.0.1:{number}", timeout_s=1.0)
    assert display.display_answers("/private/tmp/launchd-1/org.xquartz:0")  # not judged


def test_the_packages_to_install_are_in_the_readme_and_bundled_by_the_installer():
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pkg_apt = re.search(r"^PKG_APT\s*:=((?:.*\\\n)*.*)$", makefile, re.MULTILINE).group(1)
    for package in display.APT_PACKAGES:
        assert package in readme, package
        assert package in pkg_apt.split(), package
    assert set(display.APT_PACKAGES) <= set(display.XCB_LIBRARIES.values())


# --- the Makefile's installs as root, run with stand-ins for id, apt-get and vramscope --
def fake_tools(tmp_path: Path, uid: int, missing: str) -> tuple[dict[str, str], Path]:
    """A PATH of stand-ins: ``id -u`` says ``uid``, ``apt-get`` logs its arguments, and a
    venv whose python prints ``missing`` (the display module's answer) and whose
    vramscope logs that it ran."""
    bin_ = tmp_path / "bin"
    venv = tmp_path / "venv" / "bin"
    log = tmp_path / "log"
    for folder in (bin_, venv):
        folder.mkdir(parents=True)
    scripts = {
        bin_ / "id": f"echo {uid}",
        bin_ / "apt-get": f'echo "apt-get $*" >> {log}',
        venv / "python": f"echo '{missing}'",
        venv / "vramscope": f'echo "vramscope $*" >> {log}',
    }
    for path, body in scripts.items():
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {"PATH": os.fspath(bin_), "HOME": os.fspath(tmp_path)}, log


def make(target: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``make TARGET`` of this Makefile with the stand-ins (``install`` taken as done)."""
    import shutil

    found = shutil.which("make")
    assert found, "make is needed (the project's own commands are make targets)"
    venv = tmp_path / "venv"
    return subprocess.run(
        [found, "-s", "-C", os.fspath(ROOT), "-o", "install", f"VENV={venv}", target],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_make_run_installs_the_missing_libraries_as_root_and_says_so(tmp_path):
    env, log = fake_tools(tmp_path, 0, "libxcb-cursor0 libxcb-icccm4")
    run = make("run", env, tmp_path)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stdout.splitlines() if line.startswith("make run:")]
    assert said == [
        "make run: installing the X11 libraries Qt's window needs: "
        "apt-get install libxcb-cursor0 libxcb-icccm4"
    ], run.stdout
    calls = log.read_text().splitlines()
    assert any(
        c.startswith("apt-get install") and c.endswith("libxcb-cursor0 libxcb-icccm4")
        for c in calls
    ), calls
    assert calls[-1].startswith("vramscope "), calls


def test_make_run_as_a_user_says_the_command_once(tmp_path):
    env, log = fake_tools(tmp_path, 1000, "libxcb-cursor0")
    run = make("run", env, tmp_path)
    said = [line for line in run.stdout.splitlines() if line.startswith("make run:")]
    assert said == [
        "make run: Qt's window needs X11 libraries: sudo apt-get install libxcb-cursor0"
    ], run.stdout
    assert not any(c.startswith("apt-get") for c in log.read_text().splitlines())


def test_make_run_installs_nothing_when_nothing_is_missing(tmp_path):
    env, log = fake_tools(tmp_path, 0, "")
    run = make("run", env, tmp_path)
    assert run.returncode == 0 and "make run:" not in run.stdout, run.stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("vramscope "), calls


# Each tool target ``make test`` runs first: the line it says before it installs as root,
# and the one line it says to a user instead (the stand-ins' PATH has none of the tools).
TOOL_TARGETS = {
    "ssh-tools": (
        "make test: installing OpenSSH for tests/remote: "
        "apt-get install openssh-server openssh-client",
        "make test: tests/remote need sshd (apt-get install openssh-server openssh-client)",
    ),
    "browser-tools": (
        "make test: installing Chromium for the HTML report's tests: apt-get install chromium",
        "make test: the HTML report's tests need Chromium (apt-get install chromium)",
    ),
    "desktop-tools": (
        "make test: installing the desktop entry's checkers: "
        "apt-get install desktop-file-utils libxml2-utils",
        "make test: tests/packaging need desktop-file-validate and xmllint "
        "(apt-get install desktop-file-utils libxml2-utils)",
    ),
}


def test_every_tool_target_of_make_test_is_checked():
    makefile = (ROOT / "Makefile").read_text()
    test_rule = re.search(r"^test:(.*)$", makefile, re.M)
    assert test_rule is not None
    assert sorted(t for t in test_rule.group(1).split() if t.endswith("-tools")) == sorted(
        TOOL_TARGETS
    )


@pytest.mark.parametrize("target", sorted(TOOL_TARGETS))
def test_make_test_says_before_it_installs_its_tools_as_root(target, tmp_path):
    as_root, as_user = TOOL_TARGETS[target]
    env, log = fake_tools(tmp_path, 0, "")
    run = make(target, env, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == as_root
    assert any(c.startswith("apt-get install") for c in log.read_text().splitlines())
    user_env, user_log = fake_tools(tmp_path / "user", 1000, "")
    said = make(target, user_env, tmp_path / "user").stdout.splitlines()
    assert said == [as_user]
    assert not user_log.exists() or "apt-get" not in user_log.read_text()
