#!/bin/sh
# benchmarks/python_bench.sh [BUILD_DIR] [NP]: the Python layer against the C library at NP
# ranks (default 2), as ratios against docs/design.md's budgets:
#   train.report of 8 metrics              <= 1.5x mt_report + 10 us
#   allreduce of 1 MiB float32 (1-d, 2-d)  <= 1.05x mt_allreduce (broadcast, allgather: the same)
#   iter_batches over the shard            >= 0.9x the C shard read (the shard suite's
#                                             layout: 256 MiB of 4096-byte rows, batch 256)
# Each C baseline is the same C API measured in the same process, taking turns with the
# Python figure (benchmarks/python_bench.py says how); each ratio is the median of the
# pairs' ratios, printed with its spread (lowest, highest pair).
# A benchmark, not a test: it prints the figures and whether each budget was met. Run it on
# a quiet machine; the interpreter is MT_PYTHON (default /usr/bin/python3).
bench=pybench
. "$(dirname "$0")/python_env.sh"
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
"$py" - "$tmp/py.json" <<'PY'
import json, sys, time
p = json.load(open(sys.argv[1]))
print(f"Python layer vs C at {p['ranks']} ranks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
      f" (each C baseline measured in the same process, in turns; median of pairs' ratios):")
print(f"{'what':34s} {'python':>9s} {'C':>9s} {'ratio':>6s} {'spread':>12s}  budget")
def row(what, f, met, budget):
    print(f"{what:34s} {f['python']:9.2f} {f['c']:9.2f} {f['ratio']:6.3f} "
          f"{f['ratio_min']:5.2f}-{f['ratio_max']:<5.2f}  {budget}: {'met' if met else 'NOT met'}")
r = p["report_us"]
row("train.report, 8 metrics (us)", r, r["python"] <= 1.5 * r["c"] + 10,
    f"<= 1.5x + 10 us = {1.5 * r['c'] + 10:.1f}")
for kind in ("allreduce", "broadcast", "allgather"):
    for tag, shape in (("1d", "262144"), ("2d", "512x512")):
        f = p[f"{kind}_{tag}_us"]
        row(f"{kind} 1 MiB f32 {shape} (us)", f, f["ratio"] <= 1.05, "<= 1.05x")
f = p["iter_batches_GBps"]
row("iter_batches, batch 256 (GB/s)", f, f["ratio"] >= 0.9, ">= 0.9x")
PY
