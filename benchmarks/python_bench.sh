#!/bin/sh
# benchmarks/python_bench.sh [BUILD_DIR] [NP]: the Python layer against the C library, both
# measured in this run at NP ranks (default 2), as ratios against docs/design.md's budgets:
#   train.report of 8 metrics      <= 1.5x mt_report + 10 us   (mpitrain-bench --suite report)
#   allreduce of 1 MiB float32     <= 1.05x mt_allreduce       (--suite allreduce --sizes 1M)
#   iter_batches over the shard    >= 0.9x the C shard read    (--suite shard: its layout,
#                                     256 MiB of 4096-byte rows, batch 256)
# A benchmark, not a test: it prints the figures and whether each budget was met. Run it on
# a quiet machine; the interpreter is MT_PYTHON (default /usr/bin/python3).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=$(cd "${1:-$top/build-plain}" && pwd)
np=${2:-2}
py=${MT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-pybench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 PYTHONPATH="$b/python"
mpirun -np "$np" "$b/benchmarks/mpitrain-bench" --suite report,allreduce,shard --quick \
    --sizes 1M --tmpdir "$tmp" --json "$tmp/c.json" >"$tmp/c.out" || true # a missed C budget is not ours
"$py" - "$tmp/data.h5" <<'PY'
import sys, numpy as np, h5py
rows = (256 << 20) // 4096                      # the shard suite's --quick file
with h5py.File(sys.argv[1], "w") as f:
    d = f.create_dataset("bench/x", (rows, 4096), dtype=np.uint8)
    for r in range(0, rows, 8192):
        # a whole block a write: h5py writes a broadcast value row by row
        d[r:r + 8192] = np.repeat((np.arange(r, r + 8192) % 251).astype(np.uint8)[:, None],
                                  4096, axis=1)
PY
cat "$tmp/data.h5" >/dev/null # warm cache, as the C suite's
mpirun -np "$np" -x PYTHONPATH -x OPENBLAS_NUM_THREADS "$py" "$top/benchmarks/python_bench.py" \
    "$tmp/data.h5" "$tmp/py.json"
"$py" - "$tmp/c.json" "$tmp/py.json" <<'PY'
import json, sys
c = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    c[j["suite"]] = j
p = json.load(open(sys.argv[2]))
rep_c = c["report"]["mt_report_median_us"]
ar_c = c["allreduce"]["mt_us"]
sh_c = c["shard"]["independent_GBps"]
rows = [
    ("train.report, 8 metrics (us)", p["report_us"], rep_c, p["report_us"] <= 1.5 * rep_c + 10,
     f"<= 1.5x + 10 us = {1.5 * rep_c + 10:.1f}"),
    ("allreduce 1 MiB float32 (us)", p["allreduce_1MiB_us"], ar_c,
     p["allreduce_1MiB_us"] <= 1.05 * ar_c, f"<= 1.05x = {1.05 * ar_c:.1f}"),
    ("iter_batches (GB/s)", p["iter_batches_GBps"], sh_c, p["iter_batches_GBps"] >= 0.9 * sh_c,
     f">= 0.9x = {0.9 * sh_c:.2f}"),
]
print(f"Python layer vs C at {p['ranks']} ranks (one run):")
print(f"{'what':32s} {'python':>10s} {'C':>10s} {'ratio':>7s}  budget")
for what, py, cv, met, budget in rows:
    print(f"{what:32s} {py:10.2f} {cv:10.2f} {py / cv:7.2f}  {budget}: {'met' if met else 'NOT met'}")
PY
