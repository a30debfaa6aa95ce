"""The ground-truth kit itself, off the GPU: the plan, a CPU run's truth file, unpacking.

The real recordings run on the GPU machine (README.md); these check that the
driver imports, that the byte accounting is right on a model whose sizes are
known by hand, and that unpack.py sorts files as documented.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_dry_run_lists_every_recording():
    p = subprocess.run(
        [sys.executable, str(HERE / "record_all.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    for name in (
        "gpt2_adamw_fp32",
        "gpt2_leak",
        "eval_keeps_outputs",
        "sweep_vit_b32",
        "expandable_oom",
        "clock_check",
        "limit_sweep_gpt2",
    ):
        assert name in p.stdout
    assert "vramscope.capture from" in p.stdout


@pytest.mark.slow
def test_cpu_run_counts_parameter_and_gradient_bytes(tmp_path):
    pytest.importorskip("torch")
    spec = {
        "name": "mlp_cpu",
        "kind": "train",
        "family": "mlp",
        "batch": 8,
        "iters": 2,
        "optimizer": "SGD",
        "optimizer_kwargs": {"lr": 0.01, "momentum": 0.9},
    }
    p = subprocess.run(
        [
            sys.executable,
            str(HERE / "record_one.py"),
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--spec",
            json.dumps(spec),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    t = json.loads((tmp_path / "mlp_cpu.truth.json").read_text())
    # 1024 -> 2048 -> 2048 -> 2048 -> 100, fp32 weights and biases, one storage each.
    shapes = [(2048, 1024), (2048, 2048), (2048, 2048), (100, 2048)]
    expect = sum(4 * (o * i + o) for o, i in shapes)
    assert t["parameters"]["bytes"] == expect and t["parameters"]["count"] == 8
    assert t["gradients"]["bytes"] == expect
    assert t["optimizer_state"]["bytes"] == expect  # one momentum buffer per parameter
    assert sum(n for _, n in t["parameters"]["blocks"]) == expect
    assert t["inputs"]["bytes"] == 8 * 1024 * 4 + 8 * 8  # x fp32, targets int64
    assert t["iterations"] == 2 and len(t["iterations_stats"]) == 2
    fwd = t["code_lines"]["forward"]
    assert "forward(batch)" in fwd["code"]
    assert Path(fwd["file"]).read_text().splitlines()[fwd["line"] - 1].strip() == fwd["code"]


def test_unpack_keeps_small_snapshots_and_moves_big_ones_with_sidecars(tmp_path):
    src = tmp_path / "out"
    src.mkdir()
    files = {
        "big.pickle.xz": b"x" * 3000,
        "small.pickle.xz": b"y" * 100,
        "big.json": b"{}",
        "big.truth.json": b"{}",
        "small.json": b"{}",
        "small.truth.json": b"{}",
        "evil/../x.json": b"{}",
    }
    with tarfile.open(src / "truth_snap_01.tar", "w") as tf:
        for name, data in files.items():
            f = tmp_path / "f"
            f.write_bytes(data)
            tf.add(f, arcname=name)
    (src / "driver_report.json").write_text("{}")
    dest, over = tmp_path / "dest", tmp_path / "over"
    p = subprocess.run(
        [
            sys.executable,
            str(HERE / "unpack.py"),
            str(src),
            "--dest",
            str(dest),
            "--overflow",
            str(over),
            "--max-file",
            "1000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in dest.iterdir()) == [
        "big.truth.json",
        "driver_report.json",
        "small.json",
        "small.pickle.xz",
        "small.truth.json",
    ]
    assert sorted(x.name for x in over.iterdir()) == ["big.json", "big.pickle.xz", "big.truth.json"]
    assert not (tmp_path / "x.json").exists()
