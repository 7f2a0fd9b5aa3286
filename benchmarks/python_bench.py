"""The Python layer's figures, for benchmarks/python_bench.sh (which measures the C paths
with mpitrain-bench in the same run and prints the ratios against the budgets):

    mpirun -np 2 python3 benchmarks/python_bench.py DATA.h5 JSON

- train.report of 8 numeric metrics: median microseconds per call (after a warm-up);
- mpitrain.allreduce of a 1 MiB float32 array: median microseconds per call;
- iter_batches (batch 256) over DATA.h5's /bench (rows of 4096 uint8, the shard suite's
  layout; data.memory_limit a quarter of the shard, as there): GB/s, median of 3 epochs
  after one warm-up, the slowest rank's.
"""
import json
import os
import sys
import time

import numpy as np

import mpitrain
from mpitrain import train
from mpitrain.train import DataConfig, DataParallelTrainer, RunConfig

DATA, OUT = sys.argv[1], sys.argv[2]
REPORTS, ALLREDUCES = 2000, 100


def median_us(fn, n, warm=50):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(n):
        mpitrain.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def train_func():
    ctx = train.get_context()
    metrics = {f"m{i}": 0.5 * i for i in range(8)}
    report_us = median_us(lambda: train.report(metrics), REPORTS)
    a = np.ones(1 << 18, np.float32)  # 1 MiB
    allreduce_us = median_us(lambda: mpitrain.allreduce(a), ALLREDUCES, warm=10)
    shard = train.get_dataset_shard("bench")
    rows = shard.count()
    speeds = []
    for epoch in range(4):
        mpitrain.barrier()
        t0 = time.perf_counter()
        s = 0
        for b in shard.iter_batches(batch_size=256):
            s += int(b["x"][0, 0])
        t = np.array([time.perf_counter() - t0])
        mpitrain.allreduce(t, op="max")
        if epoch:
            speeds.append(rows * ctx.get_world_size() * 4096 / t[0] / 1e9)
    if ctx.get_world_rank() == 0:
        with open(OUT, "w") as f:
            json.dump({"ranks": ctx.get_world_size(), "report_us": report_us,
                       "allreduce_1MiB_us": allreduce_us,
                       "iter_batches_GBps": float(np.median(speeds))}, f)


size = os.path.getsize(DATA)
ranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
DataParallelTrainer(train_func, datasets={"bench": (DATA, "/bench")},
                    dataset_config=DataConfig(memory_limit=max(1 << 20, size // ranks // 4)),
                    run_config=RunConfig(name="python-bench", storage_path=os.path.dirname(OUT),
                                         verbose=0, overwrite=True)).fit()
