"""The README stays a short user's guide; the reference lives in viewer/README.md.

README.md: a Quick start of exactly ``make run`` and ``make test``, at most
``MAX_README_LINES`` lines, capturing a snapshot explained before any reference or
accuracy material, and only ``vramscope`` commands the CLI has.  Both READMEs: every
relative link (and its ``#anchor``) leads somewhere.  Each check has a test that it
catches a violation.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REFERENCE = ROOT / "viewer" / "README.md"
MAX_README_LINES = 250
QUICK_START = ["make run", "make test"]

FENCE = re.compile(r"^```(\w*)\n(.*?)^```[^\n]*$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Reference material: what belongs in viewer/README.md, after "how to capture" at least.
REFERENCE_WORDS = re.compile(
    r"accura|exact to the byte|architecture|benchmark|self-check"
    r"|\bspeed\b|json field|file format",
    re.IGNORECASE,
)
CAPTURE_HEADING = re.compile(r"^##\s.*\bcaptur", re.IGNORECASE | re.MULTILINE)
# A CLI command named in code: `vramscope summary ...`, not vramscope.capture, a file
# (vramscope snapshot.pickle, vramscope runs/), an option or a placeholder (FILE).
COMMAND = re.compile(r"(?<![\w./-])vramscope ([a-z][a-z0-9_-]*)(?![\w./:-])")  # not ssh://…
INLINE_CODE = re.compile(r"`([^`\n]+)`")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def without_code(text: str) -> str:
    """``text`` with fenced blocks blanked to spaces (same length: offsets hold)."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def sections(text: str) -> dict[str, str]:
    """Body of every ``## `` section by its title (fenced blocks taken into account)."""
    plain = without_code(text)
    starts = [
        (m.start(), m.end(), m.group(2)) for m in HEADING.finditer(plain) if len(m.group(1)) == 2
    ]
    out = {}
    for i, (_s, end, title) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        out[title] = text[end:stop]
    return out


def quick_start_commands(text: str) -> list[str]:
    """The command lines of the Quick start's code blocks (comments dropped), and any
    code block there in another language, as ``"<lang> block"``."""
    body = next((b for t, b in sections(text).items() if t.lower() == "quick start"), None)
    assert body is not None, "README.md has no '## Quick start' section"
    found = []
    for m in FENCE.finditer(body):
        if m.group(1) not in ("sh", "bash", "console", ""):
            found.append(f"{m.group(1)} block")
            continue
        for line in m.group(2).splitlines():
            line = line.split("#", 1)[0].strip().removeprefix("$ ")
            if line:
                found.append(line)
    return found


def reference_before_capture(text: str) -> list[str]:
    """Lines of reference material that come before the capture section."""
    capture = CAPTURE_HEADING.search(text)
    assert capture is not None, "README.md has no '## ... Capture ...' section"
    head = text[: capture.start()]
    return [ln for ln in head.splitlines() if REFERENCE_WORDS.search(ln)]


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    title = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", title)
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(without_code(text)):
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of the Markdown file ``path`` whose file (or anchor) is missing."""
    text = read(path)
    bad = []
    for m in LINK.finditer(without_code(text)):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(read(dest)):
            bad.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return bad


def named_commands(text: str) -> set[str]:
    """``vramscope COMMAND`` in the code of ``text``: code blocks and inline code."""
    code = [m.group(2) for m in FENCE.finditer(text)]
    code += INLINE_CODE.findall(without_code(text))
    return {c for snippet in code for c in COMMAND.findall(snippet)}


def cli_commands() -> set[str]:
    """The commands ``vramscope --help`` lists (the installed script where there is one)."""
    script = Path(sys.executable).with_name("vramscope")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "vramscope.viewer"]
    out = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    listing = out.stdout.split("commands (", 1)
    assert len(listing) == 2, "vramscope --help lists no commands:\n" + out.stdout
    return set(re.findall(r"^  ([a-z][a-z0-9_-]*)\s", listing[1], re.MULTILINE))


# ------------------------------------------------------------------------- the checks


def test_quick_start_is_exactly_make_run_and_make_test():
    assert quick_start_commands(read(README)) == QUICK_START


def test_readme_is_short():
    lines = read(README).count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): reference material "
        "belongs in viewer/README.md"
    )


def test_capturing_comes_before_reference_material():
    early = reference_before_capture(read(README))
    assert not early, "reference material before the capture section:\n" + "\n".join(early)


@pytest.mark.parametrize("path", [README, REFERENCE], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    bad = broken_links(path)
    assert not bad, "\n".join(bad)


def test_readme_links_to_the_reference():
    assert "viewer/README.md" in {
        m.group(1).partition("#")[0] for m in LINK.finditer(without_code(read(README)))
    }


def test_every_command_the_readme_names_exists():
    named = named_commands(read(README))
    have = cli_commands()
    assert {"summary", "advise"} <= have, have
    assert named, "README.md names no vramscope command"
    assert named <= have, f"README.md names commands the CLI lacks: {sorted(named - have)}"


# ------------------------------------------------------ each check catches a violation


def test_the_quick_start_check_catches_a_third_command():
    text = "# x\n\n## Quick start\n\n```sh\nmake run   # opens it\nmake test\npip install x\n```\n"
    assert quick_start_commands(text) == ["make run", "make test", "pip install x"]
    other = "## Quick start\n\n```sh\nmake run\n```\n\n```python\nimport x\n```\n## Next\n"
    assert quick_start_commands(other) == ["make run", "python block"]


def test_the_order_check_catches_accuracy_before_capture():
    text = "# x\n\n## Accuracy\n\n| a | b |\n\n## Capturing snapshots\n\n## Speed\n"
    assert reference_before_capture(text) == ["## Accuracy"]
    assert reference_before_capture("## Capture\n\n## Accuracy\n") == []


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "README.md").write_text("# Ref\n\n## What-if: other `settings`\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](sub/README.md#what-if-other-settings) [web](https://x.org/a)\n"
        "![gone](assets/none.png) [bad](sub/README.md#nowhere)\n"
        "```sh\n[in code](not/checked.md)\n```\n"
    )
    assert broken_links(doc, tmp_path) == [
        "README.md: assets/none.png (no such file)",
        "README.md: sub/README.md#nowhere (no such heading)",
    ]


def test_the_command_check_finds_commands_not_files_or_modules():
    text = (
        "```sh\nvramscope snap.pickle\nvramscope runs/\npython -m vramscope.capture x\n"
        "vramscope summary a.pickle\n```\n\n`vramscope FILE`, `vramscope frobnicate A`, "
        "vramscope opens it\n"
    )
    assert named_commands(text) == {"summary", "frobnicate"}
