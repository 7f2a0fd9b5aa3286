#!/usr/bin/python3
"""prepare_model against PyTorch DDP (gloo), both measured in this run, in one job:

    mpirun -np 2 python3 benchmarks/torch_bench.py [--data F.h5] [--json out.json]

At one torch thread a rank, batch 64 a rank, the same model, batches and recipe (Adam):
- samples/s a rank of the MLP (784-256-128-10) and of the small CNN of
  examples/python/fmnist_torch.py, with mpitrain (prepare_model), with DDP (gloo, its
  default buckets), and with no communication at all (the ceiling: every rank steps alone,
  at the same time, so the machine is as busy). The three take turns, round after round;
  each figure is the median of its rounds, a rank's figure the slowest rank's, and each
  ratio the median of the rounds' ratios (with their spread);
- with --data (the file of mpitrain-import fashion-mnist): the MLP trained on it from the
  same start with mpitrain and with DDP on the same batches, the two taking turns batch by
  batch, tested every quarter epoch, and each one's training time (its steps only) until
  its test accuracy first reaches --target (0.88).
Prints a table and writes --json. A benchmark, not a test.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mpitrain
from mpitrain import train
from mpitrain.train import DataConfig, RunConfig
from mpitrain.train.torch import TorchTrainer, prepare_model

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
from fmnist_torch import make_model  # noqa: E402  (the models the example trains)

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--data", default=None, help="Fashion-MNIST HDF5 file for the time to accuracy")
p.add_argument("--target", type=float, default=0.88)
p.add_argument("--epochs", type=int, default=10, help="at most, for the time to accuracy")
p.add_argument("--rounds", type=int, default=9)
p.add_argument("--seconds", type=float, default=1.2, help="a round's length per mode (about)")
p.add_argument("--models", default="mlp,cnn")
p.add_argument("--json", default=None)
p.add_argument("--storage-path", default=os.environ.get("TMPDIR", "/tmp"))
args = p.parse_args()
BATCH = 64


def make(kind):
    """The example's model (examples/python/fmnist_torch.py), from the same seed."""
    torch.manual_seed(0)
    return make_model(kind)


def slowest(seconds):
    t = np.array([seconds], dtype=np.float64)
    mpitrain.allreduce(t, op="max")
    return float(t[0])


def steps_per_s(model, opt, xs, ys, steps):
    """Collective: `steps` steps; the slowest rank's time."""
    mpitrain.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xs[i % len(xs)]), ys[i % len(ys)]).backward()
        opt.step()
    return slowest(time.perf_counter() - t0)


def throughput(kind):
    rank = train.get_context().get_world_rank()
    g = torch.Generator().manual_seed(rank)
    xs = [torch.rand(BATCH, 784, generator=g) for _ in range(16)]
    ys = [torch.randint(0, 10, (BATCH,), generator=g) for _ in range(16)]
    base = make(kind)
    alone = copy.deepcopy(base)
    ddp = DDP(copy.deepcopy(base))
    ours = prepare_model(copy.deepcopy(base))
    modes = {"ceiling": alone, "mpitrain": ours, "ddp": ddp}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in modes.items()}
    # a round's step count from a short probe of the ceiling (the same on every rank)
    for k in modes:
        steps_per_s(modes[k], opts[k], xs, ys, 5)  # warm up
    probe = steps_per_s(alone, opts["ceiling"], xs, ys, 20) / 20
    steps = max(20, int(args.seconds / probe))
    got = {k: [] for k in modes}
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for k in order:
            got[k].append(steps * BATCH / steps_per_s(modes[k], opts[k], xs, ys, steps))
    out = {k: statistics.median(v) for k, v in got.items()}
    out["spread"] = {k: [min(v), max(v)] for k, v in got.items()}
    # ratios round by round (the ways of a round ran back to back, so a slow spell of the
    # machine slows all three): their medians and spreads, less noisy than the medians'
    # ratio
    for name, a, b in (("mt_ddp", "mpitrain", "ddp"), ("mt_ceiling", "mpitrain", "ceiling"),
                       ("ddp_ceiling", "ddp", "ceiling")):
        r = [x / y for x, y in zip(got[a], got[b])]
        out[name] = statistics.median(r)
        out[name + "_spread"] = [min(r), max(r)]
    out["algo"] = ours.fusion_algo
    out["steps_per_round"] = steps
    return out


def time_to_accuracy():
    """The MLP trained from the same start with mpitrain and with DDP on the same batches,
    taking turns batch by batch (so both see the machine's load alike); each way's training
    seconds (its steps only, the slowest rank's) until its test accuracy first reaches the
    target, tested every quarter epoch. A third way in the rotation, the MLP stepping with
    no communication on the same batches until mpitrain reaches the target, gives this
    run's limit: the training seconds of mpitrain's steps had averaging cost nothing (its
    "seconds"; its accuracy is not tested)."""
    shard = train.get_dataset_shard("train")
    test = train.get_dataset_shard("test")
    ways = {"mpitrain": prepare_model(make("mlp")), "ddp": DDP(make("mlp")),
            "ceiling": make("mlp")}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in ways.items()}
    spent = {k: 0.0 for k in ways}
    res = {k: {"seconds": None, "curve": []} for k in ways}
    n_batches = -(-60000 // (BATCH * train.get_context().get_world_size()))
    every = max(1, n_batches // 4)
    i = 0
    for epoch in range(args.epochs):
        for b in shard.iter_torch_batches(batch_size=BATCH, shuffle=True, seed=epoch,
                                          dtypes={"x": np.float32}):
            x = b["x"].reshape(len(b["x"]), 784) / 255.0
            y = b["y"].long()
            going = [k for k in ways if res[k]["seconds"] is None]
            for k in (going if i % 2 == 0 else list(reversed(going))):
                t0 = time.perf_counter()
                opts[k].zero_grad()
                nn.functional.cross_entropy(ways[k](x), y).backward()
                opts[k].step()
                spent[k] += time.perf_counter() - t0
            i += 1
            if i % every == 0:
                for k in going:  # mpitrain's test first: the ceiling stops with it
                    t = slowest(spent[k])
                    if k == "ceiling":
                        res[k]["curve"].append((round(t, 3), None))
                        if res["mpitrain"]["seconds"] is not None:
                            res[k]["seconds"] = t
                        continue
                    acc = evaluate(ways[k], test)
                    res[k]["curve"].append((round(t, 3), acc))
                    if acc >= args.target:
                        res[k]["seconds"] = t
                if all(r["seconds"] is not None for r in res.values()):
                    break
        if all(r["seconds"] is not None for r in res.values()):
            break
    if train.get_context().get_world_rank() == 0:
        for k, r in res.items():
            print(f"torch_bench: time to {args.target}: {k} {r['seconds']} s of training "
                  f"(after each test: {r['curve']})", flush=True)
    return res


def evaluate(m, test):
    counts = np.zeros(2, dtype=np.int64)
    m.eval()
    with torch.no_grad():
        for b in test.iter_torch_batches(batch_size=1000, dtypes={"x": np.float32}):
            out = m(b["x"].reshape(len(b["x"]), 784) / 255.0)
            counts += [int((out.argmax(1) == b["y"].long()).sum()), len(b["y"])]
    m.train()
    mpitrain.allreduce(counts)
    return float(counts[0]) / float(counts[1])


RESULT = {}


def fn():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = train.get_context()
    RESULT["ranks"] = ctx.get_world_size()
    for kind in args.models.split(","):
        RESULT[kind] = throughput(kind)
        r = RESULT[kind]
        if ctx.get_world_rank() == 0:  # as it goes, for a run cut short
            print(f"torch_bench: {kind}: ceiling {r['ceiling']:.0f}, mpitrain {r['mpitrain']:.0f}, "
                  f"DDP {r['ddp']:.0f} samples/s a rank", flush=True)
    if args.data:
        RESULT["time_to_accuracy"] = time_to_accuracy()
    train.report({"done": 1})


kw = {}
if args.data:
    kw = dict(datasets={"train": (args.data, "/train"), "test": (args.data, "/test")},
              dataset_config=DataConfig(datasets_to_split=["train", "test"]))
TorchTrainer(fn, run_config=RunConfig(name=f"torch-bench-{os.getpid()}",
                                      storage_path=args.storage_path, verbose=0), **kw).fit()
if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    sys.exit(0)
print(f"prepare_model vs DDP (gloo) at {RESULT['ranks']} ranks, one torch thread a rank, "
      f"batch {BATCH} a rank (medians of {args.rounds} rounds, samples/s a rank):")
print(f"{'model':6s} {'ceiling':>9s} {'mpitrain':>9s} {'DDP':>9s} {'mt/DDP':>16s} {'mt/ceil':>16s} "
      f"{'DDP/ceil':>16s}  algo   (ratios: median of the rounds' ratios, min-max)")
for kind in args.models.split(","):
    r = RESULT[kind]
    cells = " ".join(f"{r[k]:5.2f} ({r[k + '_spread'][0]:.2f}-{r[k + '_spread'][1]:.2f})"
                     for k in ("mt_ddp", "mt_ceiling", "ddp_ceiling"))
    print(f"{kind:6s} {r['ceiling']:9.0f} {r['mpitrain']:9.0f} {r['ddp']:9.0f} {cells}  {r['algo']}")
if "time_to_accuracy" in RESULT:
    t = RESULT["time_to_accuracy"]
    a, d, c = (t[k]["seconds"] for k in ("mpitrain", "ddp", "ceiling"))
    ratio = f"{a / d:.2f}" if a and d else "n/a"
    limit = f"{c / d:.2f}" if c and d else "n/a"
    print(f"MLP time to {args.target} test accuracy (training seconds): mpitrain "
          f"{a if a is None else round(a, 2)}, DDP {d if d is None else round(d, 2)}, "
          f"mpitrain/DDP {ratio}; mpitrain's steps with no communication "
          f"{c if c is None else round(c, 2)} s, /DDP {limit} (the limit)")
if args.json:
    with open(args.json, "w") as f:
        json.dump(RESULT, f, indent=1)
