"""Frees recorded without stacks where a stack taken at a free breaks backward.

torch (from 2.10) on Python < 3.13 clears a pending Python exception when the
allocator takes a stack at a free inside backward; non-reentrant checkpointing
with dropout then fails with ``SystemError`` (the GPU test in
``test_capture_gpu_programs.py`` runs that program).  Here the rule is checked
at the torch boundary, with a stand-in ``torch`` module that records the calls.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from capture_fakes import FakeBackend
from capture_helpers import sidecar, snapshots

from vramscope.capture import backend as backend_mod
from vramscope.capture import record
from vramscope.capture.backend import HistorySettings, TorchBackend, set_backend


def fake_torch(version: str) -> tuple[SimpleNamespace, list[dict]]:
    calls: list[dict] = []
    memory = SimpleNamespace(_record_memory_history=lambda **kw: calls.append(kw))
    return SimpleNamespace(__version__=version, cuda=SimpleNamespace(memory=memory)), calls


@pytest.mark.parametrize(
    "torch_version, python, context, used",
    [
        ("2.11.0+cu130", (3, 12), "all", "alloc"),  # the affected pair
        ("2.10.1", (3, 10), "all", "alloc"),
        ("2.11.0+cu130", (3, 13), "all", "all"),  # Python's own PyDict_GetItemRef: safe
        ("2.9.1", (3, 12), "all", "all"),  # no forward traceback taken yet
        ("2.11.0", (3, 12), "alloc", "alloc"),
        ("2.11.0", (3, 12), "state", "state"),
        ("2.11.0", (3, 12), None, None),
    ],
)
def test_the_context_the_allocator_is_given(monkeypatch, torch_version, python, context, used):
    monkeypatch.delenv("VRAMSCOPE_FREE_STACKS", raising=False)
    monkeypatch.setattr(backend_mod, "_python_version", lambda: python)
    torch, calls = fake_torch(torch_version)
    TorchBackend(torch).record_history(HistorySettings(context, "python", 1000))
    assert calls == [{"enabled": "all", "context": used, "stacks": "python", "max_entries": 1000}]


def test_free_stacks_can_be_forced(monkeypatch):
    monkeypatch.setattr(backend_mod, "_python_version", lambda: (3, 12))
    monkeypatch.setenv("VRAMSCOPE_FREE_STACKS", "1")
    torch, calls = fake_torch("2.11.0")
    tb = TorchBackend(torch)
    assert tb.free_stack_hazard() is None
    tb.record_history(HistorySettings("all", "all", 10))
    assert calls[0]["context"] == "all"


class HazardFake(FakeBackend):
    """The fake CUDA with the rule of a torch 2.11 on Python 3.12."""

    torch_version = "2.11.0+cu130"
    free_stack_hazard = TorchBackend.free_stack_hazard
    effective_context = TorchBackend.effective_context


def test_the_sidecar_and_one_line_say_so(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("VRAMSCOPE_FREE_STACKS", raising=False)
    monkeypatch.setattr(backend_mod, "_python_version", lambda: (3, 12))
    fb = HazardFake()
    set_backend(fb)
    for out in ("a", "b"):
        with record(out=tmp_path / out):
            fb.alloc(1 << 20)
    err = capsys.readouterr().err
    assert err.count("frees are recorded without their stacks (context 'alloc')") == 1
    assert "VRAMSCOPE_FREE_STACKS=1" in err
    rec = sidecar(snapshots(tmp_path / "a")[0])["recording"]
    assert rec["context"] == "alloc" and rec["context_requested"] == "all"
    assert "torch 2.11.0+cu130 on Python 3.12" in rec["free_stacks_off"]
    # Asked for allocation stacks only: nothing to say, nothing changed.
    with record(out=tmp_path / "c", context="alloc"):
        fb.alloc(1 << 20)
    rec = sidecar(snapshots(tmp_path / "c")[0])["recording"]
    assert rec["context"] == "alloc" and "context_requested" not in rec
