#!/usr/bin/env bash
# The cold-open benchmark on a machine where nothing is installed (the GPU host):
#
#     bash tests/bench/gpu_bench.sh [OUT_DIR]
#
# from a copy of the repository root.  Builds the C extensions in place
# (`python3 setup.py build_ext --inplace`; VRAMSCOPE_REQUIRE_NATIVE=1: a failed
# build stops here), makes `vramscope` importable without installing it (a
# namespace directory of symlinks on PYTHONPATH), tiles the bundled 1M-event
# recording to 10M events (tests/bench/tile_trace.py, ~1-2 min), then runs
# run_bench.py on both files: pickle.load vs cold `summary --json`, re-open,
# memory and the per-stage breakdown (best of 3 for the 10M file, whose first cold run
# follows the reference freeing ~4 GB; no GUI rows: the targets there are
# for the cold summary; ~3-4 minutes in all).  Then the what-if (one setting) and advise
# rows on the 10M file (bench_parallel.py, best of 3 each, beside pickle.load): one after
# the other, on 2 cores (taskset) and on all of them (~3 minutes on 16 cores);
# PARALLEL_ROWS=whatif,recommend,advise,batch for every row of make bench.
# Numbers and the JSON go to OUT_DIR (default /tmp/vramscope-bench): bench.txt/json,
# parallel.txt/json.
# CATEGORIES=1 bash tests/bench/gpu_bench.sh OUT_DIR: also the memory categories'
# cost and its per-step breakdown (OUT_DIR/categories.txt; ~1-2 minutes more).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-/tmp/vramscope-bench}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
# Measured as an installed package starts: byte-compiled.  Where the environment forbids
# .pyc files (PYTHONDONTWRITEBYTECODE) and the site-packages hold none, every process
# compiles numpy's source again (0.24 s of each run on the GPU host, in py-spy's
# profile): a byte-code cache of this run's own keeps what one process compiled.
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$OUT/pycache}"
unset PYTHONDONTWRITEBYTECODE
export VRAMSCOPE_REQUIRE_NATIVE=1
if ! "$PY" setup.py -q build_ext --inplace; then
    # e.g. a setuptools too old for pyproject.toml: the same flags, straight to the compiler
    echo "setup.py build_ext failed; compiling viewer/model/_native/*.c directly"
    "$PY" - <<'PYEOF'
import pathlib, subprocess, sysconfig
inc, suffix = sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX")
cc = (sysconfig.get_config_var("CC") or "cc").split()
for src in sorted(pathlib.Path("viewer/model/_native").glob("*.c")):
    subprocess.run([*cc, "-O2", "-pthread", "-shared", "-fPIC", f"-I{inc}", str(src),
                    "-o", str(src.with_suffix("")) + suffix], check=True)
PYEOF
fi
SHIM="$(mktemp -d)"
mkdir -p "$SHIM/vramscope/viewer"
ln -s "$PWD/capture" "$SHIM/vramscope/capture"
# vramscope.viewer = viewer/, with vramscope.viewer.assets = assets/ (as pyproject maps them)
for entry in "$PWD"/viewer/*; do ln -s "$entry" "$SHIM/vramscope/viewer/"; done
ln -s "$PWD/assets" "$SHIM/vramscope/viewer/assets"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import vramscope.viewer.model._native.snapparse, vramscope.viewer.model._native.replay_core, vramscope.viewer.model._native.catcore" \
    || { echo "the compiled modules do not import"; exit 1; }
echo "python $("$PY" -c 'import sys; print(sys.version.split()[0])'), $(nproc) cores, $(uname -r)"
# BENCH_ARGS: more run_bench.py options.  Its own parallel rows (one run each) give way to
# the best of 3 below.
"$PY" tests/bench/run_bench.py --keep "$OUT" --repeat 6 --no-interactive --no-gui --no-parallel \
    --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt"
"$PY" tests/bench/bench_parallel.py "$OUT/tiled_10M.pickle" --only "${PARALLEL_ROWS:-whatif,advise}" \
    --no-ranks --repeat 3 --json "$OUT/parallel.json" 2>&1 | tee "$OUT/parallel.txt"
# CATEGORIES=1: also the memory categories' cost on the 10M file (bench_categories.py:
# first build in a fresh process vs pickle.load) and where it goes, step by step
# (profile_categories.py; --serial: without the second thread, so steps add up).
if [ "${CATEGORIES:-0}" != "0" ]; then
    "$PY" tests/bench/bench_categories.py --keep "$OUT" --repeat 2 2>&1 | tee "$OUT/categories.txt"
    for mode in "" --serial; do
        "$PY" tests/bench/profile_categories.py "$OUT/tiled_10M.pickle" --no-cache $mode \
            2>&1 | tee -a "$OUT/categories.txt"
    done
fi
