"""A numpy model trained on the Fashion-MNIST file `mpitrain-import fashion-mnist --output
F.h5` writes: a 784-128-10 MLP, its gradients averaged with mpitrain.allreduce (in place on
one flat numpy array), a checkpoint each epoch (the weights as the checkpoint's HDF5 arrays),
retries and resume from it.

    mpitrain-import fashion-mnist --output F.h5
    mpirun -np 2 python3 fmnist_numpy.py F.h5 --epochs 3
    python3 fmnist_numpy.py F.h5 --workers 2            # no launcher: spawn mode

Stop it with Ctrl-C (or SIGTERM): it saves a checkpoint, exits with 75, and running the same
command again resumes at the next epoch.
"""
import argparse

import numpy as np

import mpitrain
from mpitrain import train
from mpitrain.train import (Checkpoint, CheckpointConfig, DataConfig, DataParallelTrainer,
                            FailureConfig, RunConfig, ScalingConfig)

p = argparse.ArgumentParser()
p.add_argument("data")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--workers", type=int, default=None)
p.add_argument("--name", default="fmnist-numpy")
p.add_argument("--storage-path", default=None)
p.add_argument("--lr", type=float, default=0.1)
args = p.parse_args()

SHAPES = {"w1": (784, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}


def views(flat):
    """The parameters as views of one flat array (so one allreduce averages them all)."""
    out, off = {}, 0
    for k, s in SHAPES.items():
        n = int(np.prod(s))
        out[k] = flat[off:off + n].reshape(s)
        off += n
    return out


def forward(p, x):
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    z = h @ p["w2"] + p["b2"]
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return h, e / e.sum(axis=1, keepdims=True)


def train_func(config):
    ctx = train.get_context()
    size = sum(int(np.prod(s)) for s in SHAPES.values())
    params, grads = np.zeros(size, np.float32), np.zeros(size, np.float32)
    p, g = views(params), views(grads)
    start = 0
    ck = train.get_checkpoint()
    if ck is not None:  # a retry or a resume: every rank reads the same arrays (collective)
        params[:] = ck.get_array("params")
        start = ck.get_metadata()["epoch"] + 1
    else:
        rng = np.random.default_rng(0)  # the same initial weights on every rank
        p["w1"][:] = rng.normal(0, np.sqrt(2 / 784), SHAPES["w1"])
        p["w2"][:] = rng.normal(0, np.sqrt(2 / 128), SHAPES["w2"])
    shard = train.get_dataset_shard("train")
    test = train.get_dataset_shard("test")
    for epoch in range(start, config["epochs"]):
        loss_sum, n = 0.0, 0
        for b in shard.iter_batches(batch_size=64, shuffle=True, seed=epoch,
                                    dtypes={"x": np.float32}):
            x = b["x"].reshape(len(b["x"]), -1) / 255.0
            y = b["y"].astype(np.int64)
            h, prob = forward(p, x)
            loss_sum += float(-np.log(prob[np.arange(len(y)), y] + 1e-9).sum())
            n += len(y)
            d = prob
            d[np.arange(len(y)), y] -= 1
            d /= len(y)
            g["w2"][:] = h.T @ d
            g["b2"][:] = d.sum(0)
            dh = (d @ p["w2"].T) * (h > 0)
            g["w1"][:] = x.T @ dh
            g["b1"][:] = dh.sum(0)
            mpitrain.allreduce(grads, op="mean")  # in place, every rank the same average
            params -= config["lr"] * grads
        correct = total = 0
        for b in test.iter_batches(batch_size=500):
            _, prob = forward(p, b["x"].reshape(len(b["x"]), -1).astype(np.float32) / 255.0)
            correct += int((prob.argmax(1) == b["y"]).sum())
            total += len(b["y"])
        ck = Checkpoint.from_arrays({"params": params}, metadata={"epoch": epoch})
        train.report({"epoch": epoch, "train_loss": loss_sum / n, "test_acc": correct / total},
                     checkpoint=ck)


trainer = DataParallelTrainer(
    train_func,
    train_loop_config={"epochs": args.epochs, "lr": args.lr},
    scaling_config=ScalingConfig(num_workers=args.workers),
    run_config=RunConfig(name=args.name, storage_path=args.storage_path,
                         failure_config=FailureConfig(max_failures=2),
                         checkpoint_config=CheckpointConfig(
                             num_to_keep=2, checkpoint_score_attribute="test_acc")),
    datasets={"train": (args.data, "/train"), "test": (args.data, "/test")},
    dataset_config=DataConfig(datasets_to_split=["train"]),
)
result = trainer.fit()
best = result.get_best_checkpoint("test_acc", "max")
print(f"fmnist_numpy: test accuracy {result.metrics['test_acc']:.4f}, best checkpoint "
      f"{best.path if best else None}; run directory {result.path}")
