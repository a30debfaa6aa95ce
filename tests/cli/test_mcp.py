"""`vramscope mcp` end to end: the MCP SDK's own client talks to a real server
subprocess over stdio, started with the command line the README gives agent clients.

Each tool's answer is checked against what the CLI prints for the same question
(and the figures against the allocator's own ``memory_stats()`` in the sidecar),
bad input against one-line tool errors after which the server still answers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from tests.bad_inputs import PWNED, cases
from tests.conftest import ASSETS, DATA, expected_for

try:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
except ImportError as exc:  # the suite installs the extra (make install-test): say so
    raise ImportError(
        "tests/cli/test_mcp.py needs the mcp extra: "
        "pip install -e '.[mcp]' (make install-test does)"
    ) from exc

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
GPT2 = DATA / "gpt2_oom.pickle"
EXAMPLE = ASSETS / "example_fragmentation_oom.pickle"
LEAK = DATA / "truth" / "gpt2_leak.pickle.xz"
NO_LEAK = DATA / "truth" / "pair_gpt2_noleak.pickle.xz"
TOOLS = [
    "advise",
    "diff",
    "live_agents",
    "live_snapshot",
    "stack_at",
    "summary",
    "whatif",
    "whatif_pair",
]
MiB = 1 << 20


def readme_server() -> dict:
    """The server entry of viewer/README.md's client configuration (what users paste)."""
    text = (ROOT / "viewer" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Coding agents (MCP)") :]
    block = re.search(r"^```json\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    return json.loads(block.group(1))["mcpServers"]["vramscope"]


def server_params(
    command: str = "vramscope", args: tuple[str, ...] = ("mcp",), env: dict[str, str] | None = None
) -> StdioServerParameters:
    """The server as a client starts it.  The client passes on only a few safe
    variables (PATH, HOME...): the test cache and runtime directories go explicitly;
    PATH starts with this interpreter's scripts, where `vramscope` is installed."""
    bin_dir = str(Path(sys.executable).parent)
    extra = {k: v for k, v in os.environ.items() if k.startswith("VRAMSCOPE_")}
    extra["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    if command == "vramscope" and not (Path(bin_dir) / "vramscope").exists():
        # A checkout run without the entry point installed: the same command, by module.
        command, args = sys.executable, ("-m", "vramscope.viewer", *args)
        extra["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    extra.update(env or {})
    return StdioServerParameters(command=command, args=list(args), env=extra, cwd=str(ROOT))


def with_server(session, **kw):
    """Run ``await session(client)`` against a fresh server process; its result."""

    async def main():
        async with Client(server_params(**kw), read_timeout_seconds=300) as client:
            return await session(client)

    return anyio.run(main)


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def cli_json(*args: str):
    out = vramscope(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def answer(result) -> str:
    """The text of a successful tool call (its first content: the JSON)."""
    assert not result.is_error, result.content
    return result.content[0].text


def error_line(result) -> str:
    """The one line of a failed tool call."""
    assert result.is_error, result.content
    (content,) = result.content
    lines = content.text.splitlines()
    assert len(lines) == 1, content.text
    assert "Traceback" not in content.text
    return lines[0]


def test_the_readme_command_line_serves_the_tools_and_the_recording_guide():
    entry = readme_server()
    assert (entry["command"], entry["args"]) == ("vramscope", ["mcp"])

    async def session(client):
        tools = (await client.list_tools()).tools
        resources = (await client.list_resources()).resources
        guide = await client.read_resource(str(resources[0].uri))
        return tools, resources, guide

    tools, resources, guide = with_server(
        session, command=entry["command"], args=tuple(entry["args"])
    )
    assert len(tools) == len(TOOLS)
    assert sorted(t.name for t in tools) == TOOLS
    by_name = {t.name: t for t in tools}
    assert by_name["summary"].input_schema["required"] == ["file"]
    assert by_name["diff"].input_schema["required"] == ["a", "b"]
    assert by_name["whatif_pair"].input_schema["required"] == ["file", "with_file"]
    assert set(by_name["stack_at"].input_schema["properties"]) == {
        "file",
        "event",
        "device",
        "limit",
        "all_frames",
    }
    for t in tools:
        assert t.description and "ctx" not in t.input_schema["properties"], t.name
    assert [str(r.uri) for r in resources] == ["vramscope://guide/record-a-snapshot"]
    text = guide.contents[0].text
    assert text.startswith("## ") and "vramscope.capture" in text


def test_summary_equals_memory_stats_and_the_cli():
    async def session(client):
        return answer(await client.call_tool("summary", {"file": str(GPT2)}))

    got = json.loads(with_server(session))
    stats = expected_for(GPT2)["memory_stats"]
    assert got["reserved_bytes"] == stats["reserved_bytes.all.current"]
    assert got["allocated_bytes"] == stats["allocated_bytes.all.current"]
    assert got["active_bytes"] == stats["active_bytes.all.current"]
    assert got["requested_bytes"] == stats["requested_bytes.all.current"]
    assert got["segment_count"] == stats["segment.all.current"]
    assert got["inactive_split_bytes"] == stats["inactive_split_bytes.all.current"]
    assert got["oom"]["kind"] == "fragmentation" and stats["num_ooms"] == 1
    assert got["top_sites_at_peak"]["sites"] and "leaks" in got
    # --no-cache: computed again, not the answer the server stored in the shared cache.
    assert got == cli_json("summary", str(GPT2), "--no-cache")


def test_advise_equals_the_cli_and_reports_progress():
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def session(client):
        return await client.call_tool(
            "advise", {"file": str(EXAMPLE), "batch": 8}, progress_callback=on_progress
        )

    result = with_server(session)
    assert json.loads(answer(result)) == cli_json("advise", str(EXAMPLE), "--batch", "8")
    assert progress, "no progress notification"
    values = [p[0] for p in progress]
    assert values == sorted(set(values)) and all(0 < v <= p[1] for v, p in zip(values, progress))
    assert all(p[2] for p in progress)


def test_whatif_equals_the_cli():
    settings = ["expandable_segments:True", "max_split_size_mb:64"]

    async def session(client):
        return answer(
            await client.call_tool("whatif", {"file": str(EXAMPLE), "settings": settings})
        )

    assert json.loads(with_server(session)) == cli_json(
        "whatif", str(EXAMPLE), "--conf", settings[0], "--conf", settings[1]
    )


def test_diff_equals_the_cli():
    async def session(client):
        return answer(await client.call_tool("diff", {"a": str(LEAK), "b": str(NO_LEAK)}))

    got = json.loads(with_server(session))
    assert got == cli_json("diff", str(LEAK), str(NO_LEAK))
    assert got["sites"] and got["prediction_error"]["change"] == "free_kept"


def test_stack_at_lists_the_largest_live_allocations_with_their_stacks():
    mid = 12000

    async def session(client):
        at_oom = answer(await client.call_tool("stack_at", {"file": str(GPT2), "limit": 3}))
        at_mid = answer(
            await client.call_tool("stack_at", {"file": str(GPT2), "event": mid, "limit": 500})
        )
        return json.loads(at_oom), json.loads(at_mid)

    at_oom, at_mid = with_server(session)
    # Default: the moment of the OOM, whose figures are the allocator's own.
    stats = expected_for(GPT2)["memory_stats"]
    assert at_oom["event_chosen_by"] == "last_oom" and at_oom["oom"]["kind"] == "fragmentation"
    assert at_oom["figures"]["allocated_bytes"] == stats["allocated_bytes.all.current"]
    assert at_oom["alive_bytes"] == stats["allocated_bytes.all.current"]
    assert at_oom["alive_allocations"] == stats["allocation.all.current"]
    rows = at_oom["allocations"]
    assert len(rows) == 3 == len(at_oom["top_sites"])
    sizes = [r["size"] for r in rows]
    assert sizes == sorted(sizes, reverse=True)
    assert all(r["frames"] and r["top_frame"] for r in rows)
    assert re.match(r".+\.py:\d+ \S+", rows[0]["frames"][0])
    # Any other moment: the figures `summary --at` gives for it; the list bounded.
    summary_at = cli_json("summary", str(GPT2), "--at", str(mid))
    assert at_mid["at"] == summary_at["at"] and at_mid["event_chosen_by"] == "given"
    for key in ("allocated_bytes", "reserved_bytes", "allocation_count"):
        assert at_mid["figures"][key] == summary_at[key], key
    assert len(at_mid["allocations"]) == min(500, at_mid["alive_allocations"])


def test_bad_input_gives_one_line_errors_and_the_server_stays_up(tmp_path):
    hostile = tmp_path / "hostile.pickle"
    hostile.write_bytes(dict((c[0], c[1]) for c in cases())["global-reduce"])
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    calls = [
        ("summary", {"file": str(tmp_path / "missing.pickle")}, "no such file"),
        ("summary", {"file": str(hostile)}, str(hostile)),
        ("advise", {"file": str(tmp_path)}, "directory"),
        ("diff", {"a": str(hostile), "b": str(GPT2)}, str(hostile)),
        ("stack_at", {"file": str(GPT2), "event": 10**9}, "outside 0..25902"),
        ("stack_at", {"file": str(GPT2), "event": "soon"}, "event"),
        ("whatif", {"file": str(EXAMPLE), "settings": ["no_such_option:1"]}, "no_such_option"),
        ("advise", {"file": str(EXAMPLE), "memory_limit": "-1GB"}, "positive"),
        ("summary", {}, "file"),
        ("live_snapshot", {"pid": 2**22 + 12345, "path": str(tmp_path / "x.pickle")}, "no process"),
    ]

    async def session(client):
        errors = [(await client.call_tool(name, args), expected) for name, args, expected in calls]
        after = await client.call_tool("summary", {"file": str(EXAMPLE)})
        return errors, after

    errors, after = with_server(session)
    for (result, expected), (name, _args, _) in zip(errors, calls):
        line = error_line(result)
        assert line.startswith(f"Error executing tool {name}: ") and expected in line, line
    assert not os.path.exists(PWNED), "the hostile pickle ran its code"
    assert json.loads(answer(after))["oom"]["kind"] == "fragmentation"


def test_live_agents_and_live_snapshot(tmp_path):
    sys.path[:0] = [str(TESTS / "live"), str(TESTS / "capture")]
    try:
        from capture_helpers import child_env
        from live_helpers import Target
    finally:
        del sys.path[:2]
    # A short private runtime dir: Unix socket paths are limited.
    runtime = Path(tempfile.mkdtemp(prefix="vsm-", dir="/tmp"))
    os.chmod(runtime, 0o700)
    env = {"VRAMSCOPE_RUNTIME_DIR": str(runtime)}
    target = Target([], child_env(env))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "grab.pickle"
    try:
        target.cmd(f"alloc {7 * MiB}")

        async def session(client):
            agents = answer(await client.call_tool("live_agents", {}))
            saved = answer(
                await client.call_tool("live_snapshot", {"pid": target.pid, "path": str(out)})
            )
            no_agent = await client.call_tool(
                "live_snapshot", {"pid": sleeper.pid, "path": str(out)}
            )
            return json.loads(agents), json.loads(saved), no_agent

        agents, saved, no_agent = with_server(session, env=env)
        stats = target.stats()
    finally:
        sleeper.kill()
        sleeper.wait()
        target.exit()
        shutil.rmtree(runtime, ignore_errors=True)
    attachable = [p for p in agents["processes"] if p["attachable"]]
    assert [p["pid"] for p in attachable] == [target.pid]
    assert saved["file"] == str(out) and saved["reserved_bytes"] == 7 * MiB
    assert saved["reserved_bytes"] == stats["reserved_bytes.all.current"]
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["memory_stats"]["reserved_bytes.all.current"] == 7 * MiB
    line = error_line(no_agent)
    assert "has no vramscope agent" in line and "vramscope.capture --live" in line


def test_without_the_extra_one_line_names_it():
    code = (
        "import sys; sys.modules['mcp'] = None; "
        "from vramscope.viewer.cli import main; sys.exit(main(['mcp']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install '.[mcp]' in a clone of vramscope" in lines[0], (
        out.stderr
    )
