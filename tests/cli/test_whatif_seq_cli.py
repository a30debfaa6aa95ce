"""`vramscope whatif --seq-scale` in a real subprocess: rows, JSON, refusals, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import DATA

ZOO = DATA / "zoo"
EAGER = ZOO / "dec_gpt2_eager_adamw_bf16_b8.pickle.xz"
HELD_OUT = ZOO / "peft_lora_llama_bf16base_b8.pickle.xz"
CNN = ZOO / "tv_resnet18_sgdm_fp32_b16.pickle.xz"


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def real_peak(name: str) -> int:
    return int(json.loads((ZOO / f"{name}.truth.json").read_text())["peak_reserved_bytes"])


@pytest.mark.parametrize("snap", [EAGER, HELD_OUT])
def test_json_rows_hold_the_real_runs(snap):
    out = vramscope(
        "whatif", str(snap), "--seq-scale", "0.5", "--seq-scale", "2", "--seq", "256", "--json"
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["seq_scale"] for r in rows] == [0.5, 2.0]
    assert [r["seq"] for r in rows] == [128.0, 512.0]
    stem = snap.name[: -len(".pickle.xz")]
    for r, other in zip(rows, ("t128", "t512")):
        assert r["conf"] == "recorded"
        assert r["peak_reserved_is_estimate"] is True
        est = r["peak_reserved_estimate"]
        assert est["estimate"] is True and est["high_bytes"] > est["low_bytes"]
        assert r["peak_reserved_sensitivity_bytes"] == [est["low_bytes"], est["high_bytes"]]
        real = real_peak(f"{stem}_{other}")
        pred = r["peak_reserved_bytes"]
        assert abs(pred - real) <= 0.05 * real or est["low_bytes"] <= real <= est["high_bytes"]
        assert {row["grows"] for row in r["sequence_scaling"]} <= {"square", "linear", "fixed"}
    if snap == EAGER:
        assert rows[0]["attention"] == "eager"
        assert any(x["rule"] == "eager_scores" for x in rows[0]["sequence_scaling"])


def test_text_names_lengths_estimate_and_the_judgement():
    out = vramscope("whatif", str(EAGER), "--seq-scale", "2", "--seq", "256")
    assert out.returncode == 0, out.stderr
    assert "seq x2 (512) (estimate)" in out.stdout
    assert "with the sequence (attention: eager):" in out.stdout
    assert "eager_scores" in out.stdout and "square" in out.stdout


def test_a_cnn_is_refused_in_one_line():
    out = vramscope("whatif", str(CNN), "--seq-scale", "2")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no sequence axis" in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args,words",
    [
        (["--seq-scale", "0"], "not a positive number"),
        (["--seq-scale", "-2"], "not a positive number"),
        (["--seq-scale", "two"], "not a positive number"),
        (["--seq-scale", "2", "--seq", "-4"], "--seq"),
        (["--seq-scale", "2", "--batch-scale", "2"], "one at a time"),
    ],
)
def test_bad_arguments_exit_2_in_one_line(args, words):
    out = vramscope("whatif", str(EAGER), *args)
    assert out.returncode == 2
    assert words in out.stderr and "Traceback" not in out.stderr


def cli_json(*args: str):
    out = vramscope(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_mcp_and_the_api_answer_what_the_cli_answers():
    from tests.cli.test_mcp import answer, with_server

    want = cli_json("whatif", str(EAGER), "--seq-scale", "2", "--seq", "256")

    async def session(client):
        return answer(
            await client.call_tool("whatif", {"file": str(EAGER), "seq_scale": [2.0], "seq": 256})
        )

    assert json.loads(with_server(session)) == want
    import vramscope as api

    got = api.open(str(EAGER)).whatif(seq_scale=2, seq=256)
    assert json.loads(json.dumps(got.to_dict())) == want


def test_advise_names_the_longest_sequence_under_a_probed_limit_on_the_safe_side():
    """A limit between the real peaks at 256 and 512 tokens: the longest sequence advise
    names is below 512 (which did not fit), and its range's high end is under the limit;
    MCP and the API say the same."""
    stem = "dec_gpt2_eager_adamw_bf16_b8"
    at256, at512 = real_peak(stem), real_peak(f"{stem}_t512")
    limit = (at256 + at512) // 2
    args = ("advise", str(EAGER), "--seq", "256", "--memory-limit", str(limit))
    got = cli_json(*args)
    longest = got["longest_seq_that_fits"]
    assert longest["recorded_seq"] == 256 and longest["is_estimate"] is True
    assert longest["seq"] is not None and longest["seq"] < 512
    assert longest["peak_reserved_estimate"]["high_bytes"] <= limit
    text = vramscope(*args).stdout.splitlines()
    i = next(k for k, line in enumerate(text) if line.startswith("largest batch"))
    assert text[i + 1] == longest["words"]
    assert text[i + 1].startswith(f"longest sequence that fits: {longest['seq']} (recorded 256")
    import vramscope as api

    adv = api.open(str(EAGER)).advise(memory_limit=limit, seq=256)
    assert adv.longest_seq_that_fits == longest["seq"]
    assert adv.to_dict()["longest_seq_that_fits"] == longest


def test_advise_says_nothing_of_sequences_for_a_cnn():
    got = cli_json("advise", str(CNN), "--memory-limit", "2GiB")
    assert "longest_seq_that_fits" not in got
    assert "longest sequence" not in vramscope("advise", str(CNN), "--memory-limit", "2GiB").stdout
