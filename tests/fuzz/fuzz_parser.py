"""Fuzz the compiled snapshot parser against the pure-Python one.

    .venv/bin/python tests/fuzz/fuzz_parser.py --inputs 1000000 [--seed N] [--rss-mb 2048]

Every input goes through ``snapparse.parse`` (the C parser; serially and with
its device traces split into parallel regions, which must answer the same) and
the full loader.  The C parser must answer one of its four forms and never crash,
hang or grow without bound; where it accepts an input (or reports an error
itself) the pure-Python loader runs too and both must agree: the same
columns, ids and warnings, or the same one-line error.

Inputs are mutations of a seed corpus: small real snapshots (trimmed to a few
events, every pickle protocol), the hostile catalogue of tests/bad_inputs.py,
and what the mutators make of them: byte flips, interesting length values,
whole opcodes deleted / duplicated / inserted (MARK, POP, GET, MEMOIZE,
APPENDS, SETITEMS, GLOBAL ...), truncation and splicing of two seeds.

The run happens in a child process with an address-space limit
(``resource.setrlimit``) and a watchdog (``faulthandler``) per input, so a
runaway allocation or a hang is a reported failure, not a stuck machine.
Crashing inputs are written to ``--crash-dir``.  ``atheris`` is not needed;
with it installed, ``--atheris`` runs the same check under libFuzzer.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import pickle
import pickletools
import random
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SEED_FILES = [
    "side_stream_pending.pickle",
    "cuda_graph_pool.pickle",
    "capacity_oom.pickle",
    "ddp_2ranks/vm_pid592_rank0_cuda0_oom_20261121-073430-254.pickle",
]
HANG_SECONDS = 10.0
MAX_INPUT = 1 << 16

# Opcodes worth inserting: structure, memo, containers, refused ones, length-prefixed.
INSERTS = [
    b"(",
    b"0",
    b"1",
    b"2",
    b"N",
    b"\x88",
    b"\x89",
    b"}",
    b"]",
    b")",
    b"\x8f",
    b"e",
    b"u",
    b"a",
    b"s",
    b"t",
    b"l",
    b"d",
    b"\x90",
    b"\x91",
    b"\x85",
    b"\x86",
    b"\x87",
    b"\x94",
    b"h\x00",
    b"h\x05",
    b"h\xff",
    b"j\x00\x00\x00\x00",
    b"j\xff\xff\xff\x7f",
    b"q\x00",
    b"r\x00\x00\x00\x40",
    b"K\x07",
    b"J\xff\xff\xff\xff",
    b"\x8a\x09" + b"\x01" * 9,
    b"\x8c\x06action",
    b"\x8c\x05alloc",
    b"\x8c\x0ddevice_traces",
    b"\x8c\x06frames",
    b"\x8c\x04size",
    b"\x8c\x03N/A",
    b"X\xff\xff\xff\x00",
    b"\x95" + struct.pack("<Q", 1 << 40),
    b"c",
    b"\x93",
    b"R",
    b"b",
    b"\x81",
    b"\x82\x01",
    b"Q",
    b"\x97",
    b"G" + b"\x00" * 8,
    b"I1\n",
    b"p0\n",
    b"g0\n",
    b"\x80\x05",
    b"\x80\x09",
    b".",
]
INTERESTING32 = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


def _trimmed(obj, events: int, segments: int):
    """A real snapshot cut to a few events and segments (shared frames kept)."""
    if type(obj) is not dict:
        return obj
    out = dict(obj)
    out["segments"] = list(obj.get("segments", []))[:segments]
    out["device_traces"] = [list(t)[:events] for t in obj.get("device_traces", [])]
    return out


def seed_corpus() -> list[bytes]:
    from tests.bad_inputs import cases
    from vramscope.viewer.model.io.safe_pickle import safe_loads

    seeds: list[bytes] = []
    for i, name in enumerate(SEED_FILES):
        obj = safe_loads((DATA / name).read_bytes())
        small = _trimmed(obj, events=8 + 6 * i, segments=2 + i)
        for proto in (2, 3, 4, 5) if i else (0, 1, 2, 3, 4, 5):
            seeds.append(pickle.dumps(small, protocol=proto))  # trusted test data
    seeds.append((DATA / "side_stream_pending.pickle").read_bytes())
    for _, data, _ in cases():
        if len(data) <= MAX_INPUT:
            seeds.append(data)
    return seeds


def _opcode_starts(data: bytes) -> list[int]:
    starts = []
    try:
        for _, _, pos in pickletools.genops(data):
            starts.append(pos)
    except Exception:
        pass
    return starts


class Mutator:
    def __init__(self, seeds: list[bytes], rng: random.Random) -> None:
        self.seeds = seeds
        self.starts = [_opcode_starts(s) for s in seeds]
        self.rng = rng

    def __call__(self) -> bytes:
        rng = self.rng
        i = rng.randrange(len(self.seeds))
        data = bytearray(self.seeds[i])
        starts = self.starts[i]
        for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
            data = self._one(data, starts)
        return bytes(data[:MAX_INPUT])

    def _one(self, data: bytearray, starts: list[int]) -> bytearray:
        rng = self.rng
        n = len(data)
        if not n:
            return bytearray(rng.choice(INSERTS))
        kind = rng.randrange(10)
        pos = rng.randrange(n)
        if starts and kind in (0, 1, 2, 3):
            k = rng.randrange(len(starts))
            a = min(starts[k], n)
            b = min(starts[k + 1] if k + 1 < len(starts) else n, n)
            if kind == 0:  # delete one opcode
                return data[:a] + data[b:]
            if kind == 1:  # duplicate one opcode
                return data[:b] + data[a:b] + data[b:]
            if kind == 2:  # insert an opcode before one
                return data[:a] + rng.choice(INSERTS) + data[a:]
            # move one opcode elsewhere
            piece = data[a:b]
            rest = data[:a] + data[b:]
            c = rng.randrange(len(rest) + 1)
            return rest[:c] + piece + rest[c:]
        if kind == 4:  # flip bits
            data[pos] ^= 1 << rng.randrange(8)
            return data
        if kind == 5:  # a random byte
            data[pos] = rng.randrange(256)
            return data
        if kind == 6:  # an interesting 32-bit value (lengths, memo ids)
            data[pos : pos + 4] = struct.pack("<I", rng.choice(INTERESTING32))
            return data
        if kind == 7:  # truncate
            return data[:pos]
        if kind == 8:  # splice with another seed
            other = rng.choice(self.seeds)
            c = rng.randrange(len(other) + 1)
            return data[:pos] + other[c : c + rng.randrange(1, 4096)]
        # delete a range
        return data[:pos] + data[pos + rng.randrange(1, 64) :]


def check(data: bytes) -> str:
    """Run one input; returns a short outcome tag, raises AssertionError on a finding."""
    from tests.parser_paths import assert_identical, parallel_parse, pure_python, same_parse
    from vramscope.viewer.model import Snapshot, SnapshotError, load_bytes
    from vramscope.viewer.model._native import native_module

    mod = native_module("snapparse")
    answer = mod.parse(data)
    assert type(answer) is tuple and answer[0] in ("ok", "fallback", "truncated", "refused"), answer
    # the parallel sections (every event its own checkpoint) give the serial VM's answer
    assert same_parse(parallel_parse(data), answer), "parallel sections differ"
    fast = slow = None
    try:
        fast = load_bytes(data)
    except SnapshotError as exc:
        fast = exc
    if answer[0] == "fallback":
        return "fallback"  # both paths ran the same Python code
    with pure_python():
        try:
            slow = load_bytes(data)
        except SnapshotError as exc:
            slow = exc
    if isinstance(slow, Snapshot):
        assert isinstance(fast, Snapshot), f"python loaded it, native said: {fast}"
        assert_identical(fast, slow)
        return "equal"
    assert isinstance(fast, SnapshotError), "native loaded what python refused: " + str(slow)
    assert type(fast) is type(slow) and str(fast) == str(slow), f"{fast!r} != {slow!r}"
    assert str(fast) and "\n" not in str(fast)
    return "same-error"


def run_inputs(count: int, seed: int, report_every: int, crash_dir: Path) -> dict:
    rng = random.Random(seed)
    seeds = seed_corpus()
    mutate = Mutator(seeds, rng)
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    for i in range(count):
        data = seeds[i] if i < len(seeds) else mutate()
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
        try:
            tag = check(data)
        except BaseException:
            crash_dir.mkdir(parents=True, exist_ok=True)
            (crash_dir / f"finding-{seed}-{i}.pickle").write_bytes(data)
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()
        outcomes[tag] = outcomes.get(tag, 0) + 1
        if report_every and (i + 1) % report_every == 0:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            print(
                f"{i + 1} inputs, {time.perf_counter() - start:.0f} s, peak RSS {rss} MiB, "
                f"{outcomes}",
                flush=True,
            )
    return outcomes


def child(args) -> int:
    if args.rss_mb > 0:  # 0: no limit (sanitizer builds reserve terabytes of shadow memory)
        limit = args.rss_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.perf_counter()
    outcomes = run_inputs(args.inputs, args.seed, args.report_every, Path(args.crash_dir))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"done: {args.inputs} inputs in {time.perf_counter() - start:.1f} s, peak RSS {rss} MiB, "
        f"outcomes {outcomes}",
        flush=True,
    )
    return 0


def atheris_main(args) -> int:  # pragma: no cover - optional tool
    import atheris

    # Coverage feedback from the Python side (the C parser is not instrumented:
    # gcc has no libFuzzer; the sanitizer build below covers its memory safety).
    with atheris.instrument_imports(include=["vramscope"]):
        from vramscope.viewer.model.io import fast_pickle, load, safe_pickle, schema  # noqa: F401
    from vramscope.viewer.model._native import native_module

    assert native_module("snapparse") is not None
    corpus = Path(args.crash_dir) / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(seed_corpus()):
        (corpus / f"seed{i}").write_bytes(s)

    def one(data: bytes) -> None:
        check(data)

    atheris.Setup(
        [
            sys.argv[0],
            f"-runs={args.inputs}",
            f"-rss_limit_mb={args.rss_mb}",
            f"-timeout={int(HANG_SECONDS)}",
            f"-max_len={MAX_INPUT}",
            f"-artifact_prefix={args.crash_dir}/",
            str(corpus),
        ],
        one,
    )
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rss-mb", type=int, default=2048, help="address-space limit of the run (0: none)"
    )
    parser.add_argument("--report-every", type=int, default=50_000)
    parser.add_argument("--crash-dir", default="fuzz-findings")
    parser.add_argument("--atheris", action="store_true", help="run under atheris/libFuzzer")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.atheris:
        return atheris_main(args)
    if args.child:
        return child(args)
    cmd = [sys.executable, __file__, "--child", *sys.argv[1:]]
    return subprocess.call(cmd, env=dict(os.environ, PYTHONFAULTHANDLER="1"))


if __name__ == "__main__":
    sys.exit(main())
