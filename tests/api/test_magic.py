"""``%%vramscope`` without CUDA, in IPython's own shell: one line, the cell runs (its
value returned, its error raised), bad options are one usage line; the cell's frames
carry a ``.py`` name with its lines, so a recording's stacks name the cell's line as the
program's own code."""

from __future__ import annotations

import linecache
import traceback

import pytest


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "vramscope")
    return ip


def test_without_cuda_one_line_and_the_cell_runs(shell, capsys):
    got = shell.run_cell_magic("vramscope", "", "y = 6 * 7\ny + 1")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("vramscope: CUDA is not available")
    assert got == 43 and shell.user_ns["y"] == 42


def test_the_cells_error_is_raised(shell):
    with pytest.raises(ZeroDivisionError):
        shell.run_cell_magic("vramscope", "", "1 / 0")


def test_a_bad_option_is_one_usage_line(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"^%%vramscope: .*--bogus.* \(usage: %%vramscope "):
        shell.run_cell_magic("vramscope", "--bogus", "pass")
    with pytest.raises(UsageError, match="not a Python variable name"):
        shell.run_cell_magic("vramscope", "--name 2x", "pass")


def test_the_cells_frames_are_the_programs_own_code(shell):
    from vramscope.viewer.model.remedies.evidence import is_program_file

    with pytest.raises(ValueError) as raised:
        shell.run_cell_magic("vramscope", "", "x = 1\nraise ValueError('in the cell')")
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert frame.filename.endswith(".py") and is_program_file(frame.filename)
    assert frame.lineno == 2
    assert linecache.getline(frame.filename, 2).strip() == "raise ValueError('in the cell')"
