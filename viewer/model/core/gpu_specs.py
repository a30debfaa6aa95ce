"""What a recording's GPU can run at once: its streaming multiprocessors and the threads
each holds.

Some of a program's memory is sized by the GPU, not by the program: ATen's reductions
split a long reduction over as many thread blocks as the GPU holds at once and stage
their partial results in a buffer that stops growing there
(:mod:`..remedies.reductions`).  vramscope's capture records both figures in the
sidecar (``gpu_multiprocessors``, ``gpu_threads_per_multiprocessor``); for files without
them (older captures, other tools) the GPU's name gives them for the data-centre and
workstation GPUs below (their published specifications).  Unknown: None, and nothing is
judged from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (a substring of the name ``torch.cuda.get_device_name`` gives, (multiprocessors, most
#: resident threads per multiprocessor)), the more specific names first.
BY_NAME: tuple[tuple[str, tuple[int, int]], ...] = (
    ("H200", (132, 2048)),  # (GH200 too)
    ("H100 PCIe", (114, 2048)),
    ("H100", (132, 2048)),
    ("H800", (132, 2048)),
    ("B200", (148, 2048)),
    ("A100", (108, 2048)),
    ("A800", (108, 2048)),
    ("A10G", (80, 1536)),
    ("A10", (72, 1536)),
    ("L40S", (142, 1536)),
    ("L40", (142, 1536)),
    ("L4", (58, 1536)),
    ("RTX 6000 Ada", (142, 1536)),
    ("RTX A6000", (84, 1536)),
    ("RTX 4090", (128, 1536)),
    ("RTX 3090", (82, 1536)),
    ("V100", (80, 2048)),
    ("T4", (40, 1024)),
)


def multiprocessors(sidecar: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(multiprocessors, threads per multiprocessor) of the recording's GPU: as the
    capture recorded them, else by the GPU's name (:data:`BY_NAME`); None unknown."""
    if not sidecar:
        return None
    sms, threads = sidecar.get("gpu_multiprocessors"), sidecar.get("gpu_threads_per_multiprocessor")
    if isinstance(sms, int) and isinstance(threads, int) and sms > 0 and threads > 0:
        return sms, threads
    name = sidecar.get("gpu")
    if not isinstance(name, str):
        return None
    for part, spec in BY_NAME:
        if part in name:
            return spec
    return None
