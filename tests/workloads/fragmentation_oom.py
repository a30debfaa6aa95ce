"""Provoke a CUDA out-of-memory error caused by fragmentation, in a few seconds.

    python -m vramscope.capture --out DIR tests/workloads/fragmentation_oom.py

The process is limited to ``--allowed-gib`` (3.5 GiB) with
``torch.cuda.set_per_process_memory_fraction``.  It fills that with 4 MiB
tensors, which the caching allocator packs five to a 20 MiB segment, frees
every other one, and asks for 8 MiB: about half the reserved memory is free,
but in 4 MiB holes that are never adjacent, and a new 20 MiB segment would
exceed the limit.  The allocator cannot free a segment either (every one
still holds live tensors), so it raises ``OutOfMemoryError`` although far
more than 8 MiB is free: the textbook fragmentation OOM, the case where
``expandable_segments:True`` helps.  The error is left uncaught so that it
ends the script (exit status 1) after the capture runner has written the
OOM snapshot.
"""

from __future__ import annotations

import argparse
import os
import sys

MiB = 1 << 20
GiB = 1 << 30
SEGMENT = 20 * MiB  # the allocator's segment size for requests between 1 and 10 MiB
TENSOR = 4 * MiB
REQUEST = 8 * MiB


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allowed-gib", type=float, default=3.5)
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("fragmentation_oom: needs a CUDA GPU", file=sys.stderr)
        return 2
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    if "expandable_segments:True" in conf.replace(" ", ""):
        print(
            "fragmentation_oom: expandable segments are on, so this will not fragment",
            file=sys.stderr,
        )

    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    total = torch.cuda.get_device_properties(dev).total_memory
    fraction = min(1.0, args.allowed_gib * GiB / total)
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    limit = int(fraction * total)  # the allocator computes its limit the same way

    # Fill: only ever open a new segment while it still fits under the limit,
    # so the one OOM of this script is the fragmentation one below.
    tensors = []
    while True:
        reserved = torch.cuda.memory_reserved(dev)
        full = torch.cuda.memory_allocated(dev) == reserved
        if full and reserved + SEGMENT > limit:
            break
        tensors.append(torch.empty(TENSOR, dtype=torch.uint8, device=dev))
    reserved = torch.cuda.memory_reserved(dev)

    del tensors[::2]  # free every other tensor: 4 MiB holes between live tensors
    allocated = torch.cuda.memory_allocated(dev)
    print(
        f"fragmentation_oom: limit {limit / MiB:.0f} MiB, reserved {reserved / MiB:.0f} MiB, "
        f"allocated {allocated / MiB:.0f} MiB, free in 4 MiB holes "
        f"{(reserved - allocated) / MiB:.0f} MiB; requesting {REQUEST // MiB} MiB",
        flush=True,
    )
    # Raises torch.cuda.OutOfMemoryError: no hole is 8 MiB, no room for a segment.
    extra = torch.empty(REQUEST, dtype=torch.uint8, device=dev)
    print(
        "fragmentation_oom: no OOM happened (is the allocator configured differently?)",
        file=sys.stderr,
    )
    del extra
    return 3


if __name__ == "__main__":
    sys.exit(main())
