"""mpitrain.train: Ray Train 2.x's API on MPI ranks.

    from mpitrain import train
    from mpitrain.train import Checkpoint, RunConfig, ScalingConfig

    def train_func(config):
        shard = train.get_dataset_shard("train")
        for epoch in range(config["epochs"]):
            for batch in shard.iter_batches(batch_size=64, shuffle=True):
                ...
            train.report({"epoch": epoch, "loss": loss})

    trainer = train.torch.TorchTrainer(train_func, train_loop_config={"epochs": 2},
                                       scaling_config=ScalingConfig(num_workers=2),
                                       datasets={"train": ("fmnist.h5", "/train")})
    result = trainer.fit()

``train.torch`` is imported when first used (users who do not use torch never import it).
"""
from .._core import StopTraining
from ._checkpoint import Checkpoint
from ._config import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
from ._data import DataIterator
from ._result import Result, TrainingFailedError
from ._session import TrainContext, get_checkpoint, get_context, get_dataset_shard, report
from ._trainer import DataParallelTrainer, Preempted

__all__ = [
    "report", "get_checkpoint", "get_context", "get_dataset_shard",
    "Checkpoint", "Result", "TrainContext", "DataIterator",
    "ScalingConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "DataConfig",
    "DataParallelTrainer", "TrainingFailedError", "StopTraining", "Preempted",
]


def __getattr__(name):
    if name == "torch":  # train.torch.TorchTrainer, imported on first use
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
