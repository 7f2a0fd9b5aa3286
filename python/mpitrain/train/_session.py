"""What the training function calls: report, get_checkpoint, get_context,
get_dataset_shard (Ray Train's session functions), over the fit that runs it."""
from typing import Any, Dict, Optional

from .. import _core
from ._checkpoint import Checkpoint
from ._data import DataIterator


class _Session:
    """The fit in progress on this rank (one at a time)."""

    def __init__(self, trainer):
        self.trainer = trainer


_current: Optional[_Session] = None


def _session(what: str) -> _Session:
    if _current is None or not _core.in_fit():
        raise RuntimeError(f"train.{what}() is only valid inside the training function that "
                           f"DataParallelTrainer.fit() / TorchTrainer.fit() runs")
    return _current


class TrainContext:
    """This worker's place in the run (Ray's TrainContext)."""

    def get_world_size(self) -> int:
        return _core.world_size()

    def get_world_rank(self) -> int:
        return _core.world_rank()

    def get_local_rank(self) -> int:
        return _core.local_rank()

    def get_local_world_size(self) -> int:
        return _core.local_world_size()

    def get_node_rank(self) -> int:
        return _core.node_rank()

    def get_experiment_name(self) -> str:
        return _core.experiment_name()

    def get_trial_name(self) -> str:
        return _core.experiment_name()

    def get_trial_dir(self) -> str:
        """The run directory (<storage_path>/<name>)."""
        return _core.run_dir()

    def get_num_cpus(self) -> int:
        """CPUs assigned to this worker (its affinity mask)."""
        return _core.num_cpus()

    def get_trial_resources(self) -> Dict[str, float]:
        return {"CPU": float(_core.num_cpus())}

    def get_attempt(self) -> int:
        """0 for the first attempt, +1 per retry or resume."""
        return _core.attempt()

    def get_training_iteration(self) -> int:
        """Reports so far in the whole run (across retries and resumes)."""
        return _core.training_iteration()

    def should_checkpoint(self) -> bool:
        """True when this report should carry a checkpoint (checkpoint_frequency, or a stop
        request: then the report with a checkpoint ends the run). The same on every rank."""
        return _core.should_checkpoint()

    def set_total_iterations(self, n: int) -> None:
        """Announce the last report's number (for CheckpointConfig.checkpoint_at_end)."""
        _core.set_total_iterations(int(n))


def get_context() -> TrainContext:
    """This worker's context (world size and rank, local rank, node, CPUs, run folder)."""
    _session("get_context")
    return TrainContext()


def report(metrics: Dict[str, Any], *, checkpoint: Optional[Checkpoint] = None) -> None:
    """Collective: every rank reports once per iteration. Rank 0's metrics are the run's
    (numbers and str; nested dicts as "a/b"); the min/mean/max over ranks is recorded too.
    A checkpoint (from every rank, or only some: the others None) is committed before this
    returns. Raises StopTraining (a BaseException) after the checkpoint that a stop request
    (SIGTERM, SIGUSR1, Ctrl-C) asked for."""
    _session("report")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"report: checkpoint must be a Checkpoint (got {type(checkpoint).__name__})")
    spec = None
    if checkpoint is not None:
        try:
            spec = checkpoint._spec()
        except Exception as e:  # raised on every rank by the report's agreement
            spec = e
    _core.report(metrics, spec)


def get_checkpoint() -> Optional[Checkpoint]:
    """The latest checkpoint of this run when the attempt is a retry or a resume (or the
    trainer's resume_from_checkpoint), else None. Its get_array is collective."""
    _session("get_checkpoint")
    st = _core.get_checkpoint()
    return None if st is None else Checkpoint(_stored=st)


def get_dataset_shard(name: str) -> DataIterator:
    """Collective. This rank's shard of the dataset ``name`` given to the trainer."""
    _session("get_dataset_shard")
    return DataIterator(name, _core.get_dataset_shard(name))
