"""Print vramscope's memory categories beside the ground truth, one row per recording.

    .venv/bin/python tests/workloads/categories_vs_truth.py [NAME ...] [--json]

Reads every NAME.truth.json in tests/data/truth (snapshots there or in
../shared/truth) and prints a Markdown table (for the issue note): parameters
and optimizer state at the peak against the program's own bytes of the blocks
live there (deviation in %), gradients at the peak and at the end against the
last iteration's .grad bytes, activations against the storages saved for
backward, the unknown share of the peak, iterations found, and leaks found
against the planted one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for categories_truth

import categories_truth as ct


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="only these recordings")
    ap.add_argument("--json", action="store_true", help="machine-readable rows")
    args = ap.parse_args(argv)
    files = [
        p for p in ct.truth_files() if not args.names or p.name[: -len(".truth.json")] in args.names
    ]
    if not files:
        print("no truth recordings found in " + ", ".join(map(str, ct.TRUTH_DIRS)), file=sys.stderr)
        return 1
    rows = [ct.compare(p) for p in files]
    if args.json:
        json.dump(
            [
                {
                    "name": c.name,
                    "kind": c.kind,
                    "error": c.error,
                    "peak_bytes": c.peak_bytes,
                    "ours_at_peak": c.ours_at_peak,
                    "truth_live_at_peak": c.truth_live_at_peak,
                    "truth_bytes": c.truth_bytes,
                    "address_mismatch": c.address_mismatch,
                    "ours_at_end": c.ours_at_end,
                    "iterations_found": c.iterations_found,
                    "leaks": [lk.to_dict() for lk in c.leaks],
                }
                for c in rows
            ],
            sys.stdout,
            indent=1,
        )
        print()
    else:
        print(ct.table(rows))
        second = ct.profiler_table(rows)
        if second:
            print("\nSecond opinion (torch.profiler's memory timeline, same process):\n")
            print(second)
    return 0


if __name__ == "__main__":
    sys.exit(main())
