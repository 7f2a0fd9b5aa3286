"""Ray Train's snippet, with only the imports changed, and the smallest real model that
makes it train: a linear classifier of Fashion-MNIST in PyTorch, its gradients averaged by
torch's DistributedDataParallel over the process group TorchTrainer prepares.

    mpitrain-import fashion-mnist --output fmnist.h5
    mpirun -np 2 python3 ray_snippet.py fmnist.h5      # under a launcher
    python3 ray_snippet.py fmnist.h5                   # or alone: it starts the 2nd worker
"""
import sys

import torch
import torch.distributed as dist

from mpitrain import train
from mpitrain.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig

DATA = sys.argv[1] if len(sys.argv) > 1 else "fmnist.h5"
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 2


def train_func():
    dataset_shard = train.get_dataset_shard("train")
    world_size = train.get_context().get_world_size()
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(784, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
    for epoch in range(EPOCHS):
        total, correct, loss_sum = 0, 0, 0.0
        for batch in dataset_shard.iter_torch_batches(batch_size=64, shuffle=True, seed=epoch):
            x = batch["x"].reshape(-1, 784).float() / 255.0
            y = batch["y"].long()
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss) * len(y)
            correct += int((out.argmax(1) == y).sum())
            total += len(y)
        train.report({"epoch": epoch, "loss": loss_sum / total, "accuracy": correct / total})


trainer = train.torch.TorchTrainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(name="ray-snippet", failure_config=FailureConfig(max_failures=1),
                         checkpoint_config=CheckpointConfig(num_to_keep=2), overwrite=True),
    datasets={"train": (DATA, "/train")},
    dataset_config=DataConfig(datasets_to_split=["train"]),
)
result = trainer.fit()
print(f"accuracy {result.metrics['accuracy']:.3f} after {result.metrics['epoch'] + 1} epochs; "
      f"run directory {result.path}")
