"""The Python layer against the C library, for benchmarks/python_bench.sh (which makes the
data file and prints the table):

    mpirun -np 2 python3 benchmarks/python_bench.py DATA.h5 JSON

Each Python figure has its C baseline measured in this process, in the same fit, taking
turns with it (C first in even pairs, Python first in odd ones), so that the machine's
drift (other jobs on the cores) falls on both alike; the C side is the extension's
_c_bench / Shard._c_epoch, which call the library's C API in a C loop with the GIL
released, exactly as mpitrain-bench's suites do. Each figure is the median over pairs of
the pair's ratio, with the lowest and highest pair's ratio as its spread.

- train.report of 8 numeric metrics against mt_report of 8: per-call times, each call
  after a barrier; per pair the median of its calls, the slowest rank's.
- mpitrain.allreduce / broadcast / allgather of a 1 MiB float32 array (1-d and 512 x 512)
  against mt_allreduce / mt_broadcast / mt_allgather on the same memory: per pair N calls
  after a barrier, the time per call, the slowest rank's.
- iter_batches (batch 256) over DATA.h5's /bench (rows of 4096 uint8, the shard suite's
  layout; data.memory_limit a quarter of the shard, as there) against the C loop of
  mt_shard_begin_epoch / mt_shard_next / mt_batch_column over the same shard: GB/s per
  epoch, the slowest rank's, after one warm-up epoch of each.
"""
import json
import os
import sys
import time

import numpy as np

import mpitrain
from mpitrain import _core, train
from mpitrain.train import DataConfig, DataParallelTrainer, RunConfig

DATA, OUT = sys.argv[1], sys.argv[2]
PAIRS = int(os.environ.get("MT_PYBENCH_PAIRS", "9"))


def slowest(x):
    """The largest value over the ranks (every rank gets it)."""
    a = np.array([x], np.float64)
    _core.allreduce(a, 3)  # max
    return float(a[0])


def figure(pairs):
    """pairs: [(python, c)] of times; the median ratio and its spread."""
    r = sorted(p / c for p, c in pairs)
    return {"python": float(np.median([p for p, _ in pairs])),
            "c": float(np.median([c for _, c in pairs])),
            "ratio": float(np.median(r)), "ratio_min": r[0], "ratio_max": r[-1],
            "pairs": len(r)}


def report_pairs(n=200):
    metrics = {k: 0.5 * i for i, k in enumerate(("loss", "acc", "lr", "grad_norm",
                                                 "samples_per_s", "data_s", "compute_s",
                                                 "comm_s"))}

    def py():
        t = []
        for i in range(n):
            metrics["loss"] = i * 0.001
            mpitrain.barrier()
            t0 = time.perf_counter()
            train.report(metrics)
            t.append(time.perf_counter() - t0)
        return slowest(float(np.median(t)))

    def c():
        return slowest(float(np.median(_core._c_bench("report", n))))

    py(), c()  # warm-up
    out = []
    for p in range(PAIRS):
        if p % 2:
            a = py(); b = c()
        else:
            b = c(); a = py()
        out.append((a, b))
    return out


def collective_pairs(kind, shape, n=20):
    a = np.ones(shape, np.float32)
    world = train.get_context().get_world_size()
    out_buf = np.empty((world,) + shape, np.float32) if kind == "allgather" else None
    call = {"allreduce": lambda: mpitrain.allreduce(a),
            "broadcast": lambda: mpitrain.broadcast(a, 0),
            "allgather": lambda: mpitrain.allgather(a, out_buf)}[kind]

    def py():
        mpitrain.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        return slowest((time.perf_counter() - t0) / n)

    def c():
        return slowest(_core._c_bench(kind, n, a, out_buf) / n)

    py(), c()
    out = []
    for p in range(PAIRS):
        if p % 2:
            x = py(); y = c()
        else:
            y = c(); x = py()
        a.fill(1)  # keep the sums finite
        out.append((x, y))
    return out


def shard_pairs(shard):
    """Times per epoch (seconds; the ratio of throughputs is c / python)."""
    rows = shard.count()
    epoch = [1000]

    def py():
        mpitrain.barrier()
        t0 = time.perf_counter()
        s = 0
        for b in shard.iter_batches(batch_size=256):
            s += int(b["x"][0, 0])
        return slowest(time.perf_counter() - t0)

    def c():
        mpitrain.barrier()
        epoch[0] += 1
        return slowest(shard._s._c_epoch(epoch[0], 256))

    py(), c()
    out = []
    for p in range(max(3, PAIRS // 2)):
        if p % 2:
            x = py(); y = c()
        else:
            y = c(); x = py()
        out.append((x, y))
    gb = rows * train.get_context().get_world_size() * 4096 / 1e9
    return out, gb


def train_func():
    ctx = train.get_context()
    res = {"ranks": ctx.get_world_size()}
    res["report_us"] = figure([(p * 1e6, c * 1e6) for p, c in report_pairs()])
    for kind in ("allreduce", "broadcast", "allgather"):
        for shape, tag in (((1 << 18,), "1d"), ((512, 512), "2d")):
            res[f"{kind}_{tag}_us"] = figure([(p * 1e6, c * 1e6)
                                             for p, c in collective_pairs(kind, shape)])
    pairs, gb = shard_pairs(train.get_dataset_shard("bench"))
    # throughput: GB/s, and the ratio python / c of throughputs = c time / python time
    f = figure([(c, p) for p, c in pairs])  # ratio = c_time / py_time
    res["iter_batches_GBps"] = {"python": gb / float(np.median([p for p, _ in pairs])),
                                "c": gb / float(np.median([c for _, c in pairs])),
                                "ratio": f["ratio"], "ratio_min": f["ratio_min"],
                                "ratio_max": f["ratio_max"], "pairs": f["pairs"]}
    if ctx.get_world_rank() == 0:
        with open(OUT, "w") as fh:
            json.dump(res, fh)


size = os.path.getsize(DATA)
ranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
DataParallelTrainer(train_func, datasets={"bench": (DATA, "/bench")},
                    dataset_config=DataConfig(memory_limit=max(1 << 20, size // ranks // 4)),
                    run_config=RunConfig(name="python-bench", storage_path=os.path.dirname(OUT),
                                         verbose=0, overwrite=True)).fit()
