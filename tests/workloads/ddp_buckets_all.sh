#!/usr/bin/env bash
# The DDP bucket recordings of tests/workloads/ddp_buckets.py, all in one device call:
#
#     bash tests/workloads/ddp_buckets_all.sh "$OUT"
#
# from a copy of the repository root, vramscope not installed (made importable
# here as tests/bench/gpu_bench.sh does: a namespace directory of symlinks on
# PYTHONPATH).  Runs the matrix below, JOBS at a time on the GPUs there are
# (each run a `torchrun --standalone --nproc-per-node NPROC -m vramscope.capture`
# of its own, under a timeout, all within BUDGET seconds), one line per run in
# OUT/summary.txt, then packs every run's directory (per rank: the snapshot as
# .pickle.xz, its sidecar, its .truth.json; the run's log) into at most two
# OUT/ddp_buckets_N.tar.xz of at most MAX_TAR bytes each; snapshots that do
# not fit are left out, largest first, and named in summary.txt.
#
# Environment: PYTHON (python3), NPROC (1; 2 on a two-GPU machine), JOBS (4),
# PER_RUN (300 s), BUDGET (500 s for the runs), MAX_TAR (15 MiB), ONLY (a
# substring: only the runs whose name has it), EXTRA (more ddp_buckets.py
# arguments for every run), LAUNCH (the launcher, default torchrun through
# PYTHON; a test replaces it).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:?usage: ddp_buckets_all.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-python3}"
NPROC="${NPROC:-1}"
JOBS="${JOBS:-4}"
PER_RUN="${PER_RUN:-300}"
BUDGET="${BUDGET:-500}"
MAX_TAR="${MAX_TAR:-15728640}"
LAUNCH="${LAUNCH:-$PY -m torch.distributed.run --standalone --nproc-per-node $NPROC}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

SHIM="$WORK/shim"
mkdir -p "$SHIM/vramscope/viewer"
ln -s "$PWD/capture" "$SHIM/vramscope/capture"
for entry in "$PWD"/viewer/*; do ln -s "$entry" "$SHIM/vramscope/viewer/"; done
ln -s "$PWD/assets" "$SHIM/vramscope/viewer/assets"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# name|ddp_buckets.py arguments; most wanted first (a short budget drops the last).
RUNS=(
    "gpt2_viewoff_acc1|--model gpt2 --bucket-view off --accum 1"
    "gpt2_viewon_acc1|--model gpt2 --bucket-view on --accum 1"
    "gpt2_viewoff_acc4|--model gpt2 --bucket-view off --accum 4"
    "gpt2_viewon_acc4|--model gpt2 --bucket-view on --accum 4"
    "resnet_viewoff_acc1|--model resnet --bucket-view off --accum 1"
    "resnet_viewon_acc1|--model resnet --bucket-view on --accum 1"
    "resnet_viewoff_acc4|--model resnet --bucket-view off --accum 4"
    "resnet_viewon_acc4|--model resnet --bucket-view on --accum 4"
    "gpt2_viewoff_acc1_b8|--model gpt2 --bucket-view off --accum 1 --batch 8"
    "resnet_viewoff_acc1_b64|--model resnet --bucket-view off --accum 1 --batch 64"
)
T0=$SECONDS
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
say "ddp_buckets_all: ${#RUNS[@]} runs, $JOBS at a time, nproc $NPROC, budget ${BUDGET}s;" \
    "$("$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"

run_one() {  # name, args, timeout
    local name="$1" args="$2" limit="$3" dir="$WORK/runs/$1" start=$SECONDS rc
    mkdir -p "$dir"
    # shellcheck disable=SC2086  # LAUNCH, args and EXTRA are word lists
    timeout -k 15 "$limit" $LAUNCH -m vramscope.capture --max-entries 1000000 --out "$dir" \
        tests/workloads/ddp_buckets.py --name "$name" --out "$dir" $args ${EXTRA:-} > "$dir/log.txt" 2>&1
    rc=$?
    local snaps truths lines
    snaps=$(find "$dir" -maxdepth 1 -name '*.pickle' | wc -l)
    truths=$(find "$dir" -maxdepth 1 -name '*.truth.json' | wc -l)
    lines=$(grep -o 'ddp_buckets: [^ ]*_rank[0-9]* .*' "$dir/log.txt" | sed 's/^ddp_buckets: //' | tr '\n' ';')
    local status=ok
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && status=timeout
    [ "$status" = ok ] && [ "$rc" != 0 ] && status=failed
    [ "$status" = ok ] && [ "$truths" -lt "$NPROC" ] && status=incomplete
    say "RUN $name $status rc=$rc ${snaps}snap ${truths}truth $((SECONDS - start))s | $lines"
    if [ "$status" != ok ]; then
        tail -n 5 "$dir/log.txt" | sed 's/^/    /' | tee -a "$SUMMARY"
    fi
}

for run in "${RUNS[@]}"; do
    name="${run%%|*}"
    args="${run#*|}"
    if [ -n "${ONLY:-}" ] && [[ "$name" != *"$ONLY"* ]]; then continue; fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    left=$((BUDGET - (SECONDS - T0)))
    limit=$((left < PER_RUN ? left : PER_RUN))
    if [ "$limit" -lt 60 ]; then
        say "RUN $name skipped (${left}s of the budget left)"
        continue
    fi
    run_one "$name" "$args" "$limit" &
done
wait
say "runs done in $((SECONDS - T0))s"

# Snapshots as .pickle.xz (all cores), then the run directories into at most two tar.xz
# (Python's lzma: the host need not have the xz tool).
"$PY" - "$WORK/runs" "$OUT" "$MAX_TAR" "${RUNS[@]%%|*}" <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import lzma, os, re, shutil, sys, tarfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def xz(path):
    Path(str(path) + ".xz").write_bytes(lzma.compress(Path(path).read_bytes(), preset=6))
    os.unlink(path)


runs, out, cap, order = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
runs.mkdir(parents=True, exist_ok=True)
with ProcessPoolExecutor(os.cpu_count()) as pool:
    list(pool.map(xz, list(runs.rglob("*.pickle"))))
shutil.copy(out / "summary.txt", runs / "summary.txt")
files = [f for f in runs.rglob("*") if f.is_file()]
snaps = [f for f in files if f.name.endswith(".pickle.xz")]
small = [f for f in files if f not in snaps]
rank = lambda f: int(m.group(1)) if (m := re.search(r"_rank(\d+)_", f.name)) else 0
run_at = lambda f: order.index(f.parent.name) if f.parent.name in order else len(order)
# Rank 0 of every run first (most wanted run first), then rank 1, ...: what does not
# fit is the later ranks of the later runs.
snaps.sort(key=lambda f: (rank(f), run_at(f)))
room = [cap - 64_000 - sum(f.stat().st_size for f in small) // 4, cap - 64_000]
groups: list[list[Path]] = [list(small), []]
dropped = []
for f in snaps:
    n = f.stat().st_size
    i = 0 if room[0] >= room[1] else 1
    if n > room[i]:
        dropped.append(f"{f.parent.name}/{f.name} ({n / 2**20:.1f} MiB)")
        continue
    groups[i].append(f)
    room[i] -= n
for n, group in enumerate((g for g in groups if g), 1):
    tar = out / f"ddp_buckets_{n}.tar.xz"
    with tarfile.open(tar, "w:xz", preset=3) as tf:
        for f in sorted(group):
            tf.add(f, arcname=str(f.relative_to(runs)))
    print(f"packed {tar.name}: {len(group)} files, {tar.stat().st_size / 2**20:.1f} MiB")
print("dropped (too large to bring back): " + (", ".join(dropped) or "none"))
PYEOF
say "done in $((SECONDS - T0))s"
