"""A PyTorch model trained on the Fashion-MNIST file `mpitrain-import fashion-mnist --output
F.h5` writes, its gradients averaged by mpitrain's fused C path (prepare_model: buckets in
shared memory on a node, overlapped with backward; no torch.distributed process group):
the C trainer's MLP (784-256-128-10) or a small CNN, a checkpoint (the state_dict) each
epoch, retries and resume from it.

    mpitrain-import fashion-mnist --output F.h5
    mpirun -np 2 python3 fmnist_torch.py F.h5 --model mlp --epochs 10
    python3 fmnist_torch.py F.h5 --model cnn --workers 2      # no launcher: spawn mode

Each epoch reports the test accuracy (the test set split across the ranks, the counts
summed); --target ACC ends the run after the first epoch that reaches it. The last line
says the accuracy and the epochs it took. Ctrl-C (or SIGTERM) saves a checkpoint and exits
with 75; running the same command again resumes at the next epoch.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

import mpitrain
from mpitrain import train
from mpitrain.train import (Checkpoint, CheckpointConfig, DataConfig, FailureConfig,
                            RunConfig, ScalingConfig)
from mpitrain.train.torch import TorchTrainer, prepare_model


def positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
        return v
    return parse


def accuracy(text):
    v = positive(float)(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"an accuracy is at most 1 (got {text})")
    return v


def make_model(kind: str) -> nn.Module:
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                         nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def train_func(config):
    ctx = train.get_context()
    torch.manual_seed(0)
    model = prepare_model(make_model(config["model"]), compression=config["compression"])
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start = 0
    ck = train.get_checkpoint()
    if ck is not None:  # a retry or a resume: rank 0's state_dict, on every rank
        with ck.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
    shard = train.get_dataset_shard("train")
    test = train.get_dataset_shard("test")
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start, config["epochs"]):
        t0 = time.perf_counter()
        model.train()
        loss_sum, n = 0.0, 0
        for b in shard.iter_torch_batches(batch_size=config["batch_size"], shuffle=True,
                                          seed=epoch, dtypes={"x": np.float32}):
            x = b["x"].reshape(len(b["x"]), 784) / 255.0
            y = b["y"].long()
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # averaged across ranks when it returns
            opt.step()
            loss_sum += float(loss) * len(y)
            n += len(y)
        seconds = time.perf_counter() - t0
        model.eval()
        counts = np.zeros(2, dtype=np.int64)
        with torch.no_grad():
            for b in test.iter_torch_batches(batch_size=1000, dtypes={"x": np.float32}):
                out = model(b["x"].reshape(len(b["x"]), 784) / 255.0)
                counts += [int((out.argmax(1) == b["y"].long()).sum()), len(b["y"])]
        mpitrain.allreduce(counts)  # the whole test set's
        acc = float(counts[0]) / float(counts[1])
        with tempfile.TemporaryDirectory() as d:  # copied into the run by report
            ckpt = None
            if ctx.get_world_rank() == 0:  # the model is the same on every rank
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                ckpt = Checkpoint.from_directory(d)
            train.report({"epoch": epoch, "train_loss": loss_sum / max(n, 1), "test_acc": acc,
                          "epoch_s": seconds, "samples_per_s": n / seconds},
                         checkpoint=ckpt)
        if config["target"] is not None and acc >= config["target"]:
            break  # acc is the same on every rank: every rank stops here


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the HDF5 file of mpitrain-import fashion-mnist (/train, /test)")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="784-256-128-10 MLP, or two 5x5 convolutions (16, 32) with pooling")
    p.add_argument("--epochs", type=positive(int), default=10, help="at most this many (10)")
    p.add_argument("--batch-size", type=positive(int), default=64, help="per rank (64)")
    p.add_argument("--lr", type=positive(float), default=None,
                   help="Adam's learning rate (mlp 1e-3, cnn 2e-3)")
    p.add_argument("--target", type=accuracy, default=None,
                   help="stop after the first epoch whose test accuracy reaches it")
    p.add_argument("--workers", type=positive(int), default=None,
                   help="workers with no launcher (spawn mode); under mpirun: its -np")
    p.add_argument("--compression", choices=["none", "fp16", "bf16"], default=None,
                   help="gradients on the network in 16 bits (default: MT_FUSION_COMPRESS)")
    p.add_argument("--name", default=None, help="the run's name (fmnist-torch-MODEL)")
    p.add_argument("--storage-path", default=None, help="where runs are kept")
    args = p.parse_args()
    if not os.path.isfile(args.data):
        p.error(f"{args.data}: no such file (make it with mpitrain-import fashion-mnist --output "
                f"{args.data})")
    return args


def main():
    args = parse_args()
    lr = args.lr or (1e-3 if args.model == "mlp" else 2e-3)
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"model": args.model, "epochs": args.epochs, "lr": lr,
                           "batch_size": args.batch_size, "target": args.target,
                           "compression": args.compression},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(name=args.name or f"fmnist-torch-{args.model}",
                             storage_path=args.storage_path,
                             failure_config=FailureConfig(max_failures=2),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
        datasets={"train": (args.data, "/train"), "test": (args.data, "/test")},
        dataset_config=DataConfig(datasets_to_split=["train", "test"]),
    )
    result = trainer.fit()
    m = result.metrics
    if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "0":  # one line
        print(f"fmnist_torch: {args.model} test accuracy {m['test_acc']:.4f} after "
              f"{m['epoch'] + 1} epochs ({m['samples_per_s']:.0f} samples/s a rank in the last); "
              f"run directory {result.path}", flush=True)


if __name__ == "__main__":
    main()
