#!/usr/bin/python3
"""The PyTorch DistributedDataParallel (gloo) baseline for mpitrain-bench's train suite.

The same model (784-256-128-10 MLP, ReLU, cross-entropy), the same global batch (128),
SGD with momentum and weight decay, synthetic batches, one thread per rank. Run it with the
same launcher and rank count as the train suite:

    mpirun -np 2 /usr/bin/python3 benchmarks/ddp_mlp.py [--steps 400]

Across nodes, rank 0's node address and the network interface gloo must use (it would
otherwise take the one the host name resolves to):

    mpirun --hostfile hosts python3 ddp_mlp.py --master 10.1.0.1 --ifname eth0

Prints per-rank samples/s (rank 0), the figure the train suite compares against.
Needs the Debian package python3-torch (scripts/setup.sh --bench).
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--timeout", type=float, default=120, help="seconds for any collective")
    p.add_argument("--master", default=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                   help="rank 0's address (default $MASTER_ADDR or 127.0.0.1)")
    p.add_argument("--ifname", default=os.environ.get("GLOO_SOCKET_IFNAME"),
                   help="the interface gloo sends on (default $GLOO_SOCKET_IFNAME)")
    a = p.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    torch.set_num_threads(1)
    # a peer that never comes (or a step that hangs) fails instead of waiting 30 minutes
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}:{a.port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=a.timeout))
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    n = max(1, 128 // size)
    x = torch.rand(n, 784)
    y = torch.randint(0, 10, (n,))

    def step():
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()

    for _ in range(max(1, a.steps // 10)):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    t = time.perf_counter() - t0
    rate = torch.tensor([n * a.steps / t])
    dist.all_reduce(rate)
    if rank == 0:
        print(f"ddp_mlp: {size} ranks, batch/rank {n}: {rate.item() / size:.0f} samples/s per rank "
              f"(PyTorch {torch.__version__}, gloo)", flush=True)
    # every rank done before any leaves: across emulated nodes a rank whose peer had exited
    # sometimes spun in gloo's teardown until the launcher's timeout; nothing is left to
    # tear down that the process's end does not
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
