"""The READMEs' console examples are produced by their commands.

README.md (the user's guide) and viewer/README.md (the reference) both hold examples;
together they must keep at least ``MIN_EXAMPLES``, so moving one between them is fine
but losing one is not.

An example is a ```sh block followed directly by a ```text block: every
``vramscope ...`` line of the first is run (from the repository root, as a new
user would after `make install`), and every line the second shows must appear
in what they printed.  A shown line ending in "..." stands for any line that
starts with the part before it.  A ```text block with no command before it is
an example no test can check, so there must be none.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = (ROOT / "README.md", ROOT / "viewer" / "README.md")
# The summary and advise examples of README.md, the categories and what-if examples of
# viewer/README.md (and its advise example: README.md's with more rows).
MIN_EXAMPLES = 5
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(text: str) -> list[tuple[str, str, int, int]]:
    """(language, body, start, end) of every fenced block."""
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]


def examples(
    text: str, strict: bool = True, name: str = "README.md"
) -> list[tuple[list[str], str]]:
    """(command lines, shown output) pairs of the Markdown ``text`` (of file ``name``);
    raises on a ```text block without a command (``strict=False``: skips it)."""
    found = []
    bs = blocks(text)
    for i, (lang, body, start, _end) in enumerate(bs):
        if lang != "text":
            continue
        prev = bs[i - 1] if i else None
        if prev is None or prev[0] != "sh" or text[prev[3] : start].strip():
            if not strict:
                continue
            line = text.count("\n", 0, start) + 1
            raise AssertionError(
                f"{name}:{line}: a ```text example without its ```sh command right before it"
            )
        commands = [ln for ln in prev[1].splitlines() if ln.strip().startswith("vramscope ")]
        assert commands, f"no vramscope command before the example {body[:60]!r}"
        found.append((commands, body))
    return found


def shown_line_appears(shown: str, printed: list[str]) -> bool:
    shown = shown.rstrip()
    if shown.endswith("..."):
        head = shown[:-3].rstrip()
        return any(p.startswith(head) for p in printed)
    return shown in printed


def readme_examples(strict: bool = True) -> list[tuple[str, list[str], str]]:
    """(file, command lines, shown output) of every README's examples, in order."""
    found = []
    for path in READMES:
        name = path.relative_to(ROOT).as_posix()
        found += [
            (name, commands, shown)
            for commands, shown in examples(path.read_text(encoding="utf-8"), strict, name)
        ]
    return found


EXAMPLES = [(commands, shown) for _, commands, shown in readme_examples(strict=False)]
IDS = [
    f"{name}: {commands[0].split('#')[0].strip()[:60]}"
    for name, commands, _ in readme_examples(strict=False)
]


def test_every_readme_output_example_has_its_command():
    assert len(readme_examples()) >= MIN_EXAMPLES


def test_each_readme_has_examples():
    """The user's guide shows what its commands print; so does the reference."""
    for path in READMES:
        name = path.relative_to(ROOT).as_posix()
        assert examples(path.read_text(encoding="utf-8"), name=name), name


@pytest.mark.parametrize("commands,shown", EXAMPLES, ids=IDS)
def test_readme_example_is_what_its_command_prints(commands, shown, tmp_path):
    printed: list[str] = []
    for line in commands:
        args = shlex.split(line, comments=True)
        out = subprocess.run(
            [sys.executable, "-m", "vramscope.viewer", *args[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**_env(), "VRAMSCOPE_CACHE_DIR": str(tmp_path / "cache")},
        )
        assert out.returncode == 0, (line, out.stderr)
        printed += [p.rstrip() for p in out.stdout.splitlines()]
    missing = [s for s in shown.splitlines() if s.strip() and not shown_line_appears(s, printed)]
    assert not missing, (
        "README shows lines its command does not print:\n"
        + "\n".join(missing)
        + "\n--- printed:\n"
        + "\n".join(printed)
    )


def test_the_checker_catches_a_wrong_example():
    """The check can fail: a shown row the command does not print, an orphan output block."""
    printed = ["setting  peak reserved", "expandable_segments:True  10.16 GiB"]
    assert shown_line_appears("expandable_segments:True  10.16 GiB", printed)
    assert not shown_line_appears("recorded                  10.44 GiB", printed)
    assert shown_line_appears("setting ...", printed)
    with pytest.raises(AssertionError, match="without its"):
        examples("text\n\n```text\nOOM on device 0\n```\n")


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "VRAMSCOPE_NO_CACHE"}
