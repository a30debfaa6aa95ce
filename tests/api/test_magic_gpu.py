"""``%%vramscope`` on a real GPU, driven through IPython's own shell in a fresh process
(so torch's peak counters are the cell's): a small training cell's displayed peak
reserved is ``torch.cuda.max_memory_reserved()``, to the byte; a cell that runs out of
memory shows the OOM verdict inline, keeps the OOM's snapshot and raises the error.

Run on the GPU machine with ``pytest -m gpu tests/api/test_magic_gpu.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.gpu_marks import ON_GPU

pytestmark = ON_GPU

# Runs the cell through the magic in an IPython shell; what was displayed (the HTML) and
# printed, what torch counts and what the kept recording says, as one JSON line.
CHILD = """
import io, json, sys, contextlib
from IPython.core.interactiveshell import InteractiveShell

ip = InteractiveShell.instance()
shown = []
ip.display_pub.publish = lambda data, metadata=None, **kw: shown.append(data)
ip.run_line_magic("load_ext", "vramscope")
out, error = io.StringIO(), None
with contextlib.redirect_stdout(out):
    try:
        ip.run_cell_magic("vramscope", "--out " + sys.argv[1], sys.argv[2])
    except BaseException as exc:
        error = type(exc).__name__
import torch
from vramscope.viewer.model.core.units import format_bytes
rec = ip.user_ns.get("vramscope_recording")
html = "".join(d.get("text/html", "") for d in shown)
summary = rec.summary() if rec is not None else None
print(json.dumps({
    "error": error, "printed": out.getvalue(), "html": html,
    "torch_peak_reserved": torch.cuda.max_memory_reserved(),
    "torch_peak_text": format_bytes(torch.cuda.max_memory_reserved()),
    "recording": rec.path if rec is not None else None,
    "peak_reserved": summary.peak_reserved_bytes if summary else None,
    "oom_verdict": summary.oom_verdict if summary else None,
}))
"""

TRAIN = textwrap.dedent("""\
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(),
                                torch.nn.Linear(8192, 2048)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(4):
        loss = model(torch.randn(512, 2048, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    """)

OOM = textwrap.dedent("""\
    import torch
    torch.cuda.set_per_process_memory_fraction(0.02)
    kept = []
    while True:
        kept.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    """)


def run_cell(tmp_path, cell: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), cell],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    print({k: v for k, v in got.items() if k != "html"})
    keep = os.environ.get("VRAMSCOPE_SHOTS")  # the displayed HTML, to look at
    if keep:
        name = "oom" if "while True" in cell else "train"
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"magic_{name}.html").write_text(got["html"], encoding="utf-8")
    return got


def test_training_cell_shows_torchs_peak_reserved(tmp_path):
    got = run_cell(tmp_path, TRAIN)
    assert got["error"] is None
    assert got["peak_reserved"] == got["torch_peak_reserved"] > 0
    # Shown: the line under the cell and the chart's peak mark.
    assert f"peak reserved {got['torch_peak_text']}" in got["printed"]
    assert f"peak reserved {got['torch_peak_text']}" in got["html"]
    assert got["html"].startswith('<div class="vramscope-report">')
    assert "No CUDA out-of-memory error" in got["html"]


def test_oom_cell_shows_the_verdict_keeps_the_oom_and_raises(tmp_path):
    got = run_cell(tmp_path, OOM)
    assert got["error"] == "OutOfMemoryError"
    assert "_oom_" in got["recording"]  # the snapshot of the OOM's moment
    assert got["oom_verdict"]
    assert '<p class="verdict">CUDA out of memory' in got["html"]
    assert got["oom_verdict"].split(":")[0] in got["html"]
