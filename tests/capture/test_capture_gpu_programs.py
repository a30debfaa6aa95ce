"""Real programs under the capture on a GPU: it must not change them, and it must catch
every out-of-memory, whoever holds the GPU.

Run on the GPU machine with ``pytest -m gpu tests/capture``.  Each program runs in its
own process, as a user runs it: ``python -m vramscope.capture ... program.py``.

- A transformers ``Trainer`` with gradient checkpointing (GPT-2 from its config with its
  dropout, bf16, fused AdamW), reentrant and not, and a plain checkpointed loop: the
  recorded run's losses and trained weights equal the unrecorded run's, to the bit.
  (With torch 2.11 on Python 3.12, stacks taken at frees made non-reentrant backward
  fail with ``SystemError``; see ``TorchBackend.free_stack_hazard``.)
- Another process holds nearly the whole GPU and a Llama-style training gets the
  caching allocator's OOM, or dies in backward of cuBLAS's failed handle creation;
  the capture's ``oom`` snapshot, its sidecar and the whole-GPU table agree with what
  the programs saw (``tests/workloads/other_process_holds.py``).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from capture_helpers import WORKLOADS, run_capture, run_python, sidecar, snapshots

from tests.gpu_marks import ON_GPU


def _transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


pytestmark = ON_GPU

MiB = 1 << 20
TRAINER = str(WORKLOADS / "checkpoint_trainer.py")
HOLDS = str(WORKLOADS / "other_process_holds.py")


def _result(proc) -> dict:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.skipif(not _transformers(), reason="needs transformers (and accelerate)")
@pytest.mark.parametrize(
    "program, stacks",
    [
        (["--reentrant"], "python"),
        ([], "python"),
        (["--reentrant"], "all"),
        ([], "all"),
        (["--plain"], "python"),
        (["--plain", "--reentrant"], "python"),
    ],
    ids=[
        "trainer-reentrant",
        "trainer-non-reentrant",
        "trainer-reentrant-cpp-stacks",
        "trainer-non-reentrant-cpp-stacks",
        "plain-loop",
        "plain-loop-reentrant",
    ],
)
def test_checkpointed_training_is_the_same_under_the_capture(tmp_path, program, stacks):
    # GPT-2's own dropout: its mask is the last tensor a checkpointed block saves, so
    # non-reentrant checkpointing stops each recomputation inside dropout.
    program = [*program, "--dropout", "0.1"]
    plain = run_python([TRAINER, *program], cwd=tmp_path, timeout=600)
    assert plain.returncode == 0, plain.stderr[-4000:]
    out = tmp_path / "snapshots"
    recorded = run_capture(
        ["--out", str(out), "--stacks", stacks, TRAINER, *program], cwd=tmp_path, timeout=600
    )
    got = _result(recorded)
    assert recorded.returncode == 0, got.get("error") or recorded.stderr[-4000:]
    want = _result(plain)
    assert len(want["losses"]) == 3
    assert got["losses"] == want["losses"]
    assert got["weights_sum"] == want["weights_sum"]
    # It was recorded: the exit snapshot's history reaches into checkpointed backward.
    assert got["history_enabled"] is True
    [exit_snap] = snapshots(out, "exit")
    side = sidecar(exit_snap)
    assert side["n_trace"] > 100 and side["recording"]["enabled"] is True


def _table_adds_up(gpu: dict) -> int:
    """How far total - free is from the processes' bytes (NVML or nvidia-smi)."""
    used = sum(p["used_bytes"] or 0 for p in gpu["processes"])
    return abs(gpu["total_bytes"] - gpu["free_bytes"] - used)


def _holder_row(gpu: dict, truth: dict) -> dict:
    [row] = [p for p in gpu["processes"] if p["pid"] == truth["holder"]["pid"]]
    return row


@pytest.mark.skipif(not _transformers(), reason="needs transformers")
def test_holder_and_an_allocator_oom(tmp_path):
    r = run_python(
        [HOLDS, "--scenario", "allocator", "--out", str(tmp_path)], cwd=tmp_path, timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    side = json.loads((tmp_path / "holder_allocator_oom.json").read_text())
    truth = json.loads((tmp_path / "holder_allocator_oom.truth.json").read_text())
    assert side["reason"] == "oom" and "outside_allocator_oom" not in side
    assert side["oom_message"].startswith("CUDA out of memory")
    assert side["memory_stats"]["num_ooms"] >= 1
    gpu = side["gpu_memory"]
    holder = _holder_row(gpu, truth)
    assert holder["used_bytes"] >= truth["holder"]["bytes"]
    assert "--hold-serve" in holder["cmdline"] and not holder["this_process"]
    assert _table_adds_up(gpu) <= 64 * MiB
    # The allocator saw the same free bytes the program's own OOM observer saw.
    assert side["oom_device_free"] == truth["training"]["at_allocator_oom"]["device_free"]


@pytest.mark.skipif(not _transformers(), reason="needs transformers")
def test_holder_and_a_cublas_failure(tmp_path):
    r = run_python(
        [HOLDS, "--scenario", "cublas", "--out", str(tmp_path)], cwd=tmp_path, timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    side = json.loads((tmp_path / "holder_cublas_oom.json").read_text())
    truth = json.loads((tmp_path / "holder_cublas_oom.truth.json").read_text())
    training = truth["training"]
    assert side["reason"] == "oom"
    found = side["outside_allocator_oom"]
    assert found["library"] == "cuBLAS"
    assert found["error"] == training["error_first_line"]
    assert "CUBLAS_STATUS_ALLOC_FAILED" in found["error"]
    assert found["exception_type"] == training["exception_type"]
    assert any(f.endswith(" train") and "other_process_holds.py" in f for f in found["stack"])
    # Nothing failed inside the caching allocator.
    assert side["memory_stats"]["num_ooms"] == 0 == training["memory_stats"]["num_ooms"]
    gpu = side["gpu_memory"]
    assert abs(gpu["free_bytes"] - training["free_at_failure"]) <= 2 * MiB
    holder = _holder_row(gpu, truth)
    assert holder["used_bytes"] >= truth["holder"]["bytes"]
    assert _table_adds_up(gpu) <= 64 * MiB
    # The program's traceback is the user's, unchanged.
    assert training["error_first_line"] in training["stderr_tail"]
