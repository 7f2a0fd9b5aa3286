"""The five configs, with Ray Train's field names and defaults, mapped onto the C config.

Validation is the C library's (mt_config_validate, one source of truth): DataParallelTrainer
checks its configs when it is made, before any worker starts, and a bad value is a
ValueError (mpitrain.InvalidArgumentError) naming the field, Ray's name first and the C
field after it. What Ray has and mpitrain cannot honour is refused by name (use_gpu=True, a
GPU in resources_per_worker, RunConfig.stop and callbacks).

Where Ray's default cannot fit an MPI launch: ScalingConfig.num_workers=None means the
launcher's number of ranks under mpirun/srun (and 1 without a launcher); num_to_keep=0 keeps
every checkpoint, like None (Ray refuses 0).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from .. import _core

# C field -> the Python field it comes from, for the validator's messages
_NAMES = {
    "scaling.num_workers": "ScalingConfig.num_workers",
    "scaling.cpus_per_worker": "ScalingConfig.resources_per_worker['CPU']",
    "run.name": "RunConfig.name",
    "run.storage_path": "RunConfig.storage_path",
    "run.verbose": "RunConfig.verbose",
    "run.checkpoint.num_to_keep": "CheckpointConfig.num_to_keep",
    "run.checkpoint.score_attribute": "CheckpointConfig.checkpoint_score_attribute",
    "run.checkpoint.score_order": "CheckpointConfig.checkpoint_score_order",
    "run.checkpoint.frequency": "CheckpointConfig.checkpoint_frequency",
    "run.checkpoint.staging_bytes": "CheckpointConfig.checkpoint_staging_bytes",
    "run.resume_from_checkpoint": "resume_from_checkpoint",
    "run.failure.max_failures": "FailureConfig.max_failures",
    "run.failure.stall_warn_s": "FailureConfig.stall_warn_s",
    "run.failure.stall_timeout_s": "FailureConfig.stall_timeout_s",
    "data.datasets_to_split": "DataConfig.datasets_to_split",
}


@dataclass
class ScalingConfig:
    """How many workers (MPI ranks) and what each needs.

    num_workers: None = the launcher's world size (mpirun -np N), else N; without a
        launcher N > 1 starts N-1 more processes (spawn mode). Under a launcher it must
        match the launcher's count.
    resources_per_worker: {"CPU": n}: every rank's affinity mask must hold >= n CPUs.
    use_gpu: GPUs are not supported yet (True is a ValueError).
    """

    num_workers: Optional[int] = None
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    trainer_resources: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"

    def _c(self, out: dict) -> None:
        if self.use_gpu:
            raise ValueError("ScalingConfig.use_gpu=True: GPUs are not supported by mpitrain "
                             "yet (workers are CPU ranks)")
        cpus = 0
        for k, v in (self.resources_per_worker or {}).items():
            if k.upper() == "CPU":
                if isinstance(v, float) and not v.is_integer():
                    raise ValueError(f"ScalingConfig.resources_per_worker['CPU'] must be a "
                                     f"whole number of CPUs (got {v})")
                cpus = int(v)
            elif v:
                raise ValueError(f"ScalingConfig.resources_per_worker[{k!r}]: only 'CPU' is "
                                 f"supported by mpitrain")
        out["num_workers"] = 0 if self.num_workers is None else self.num_workers
        out["cpus_per_worker"] = cpus


@dataclass
class CheckpointConfig:
    """Which checkpoints are kept (Ray's checkpoint manager).

    num_to_keep: None (or 0) = all; else the best K by checkpoint_score_attribute (the
        newest K without one), plus the latest.
    checkpoint_score_order: "max" or "min".
    checkpoint_frequency: N > 0 makes train.get_context().should_checkpoint() true every N
        reports (the function decides what to save).
    checkpoint_at_end: the same for the last report (see set_total_iterations).
    checkpoint_async (mpitrain's): train.report returns once this rank's part of the
        checkpoint is copied into staging memory; the commit goes on in a library thread
        (Ray's CheckpointUploadMode.ASYNC, PyTorch DCP's async_save). The next report with
        a checkpoint and the end of training wait for it; a failed commit is the next
        report's error on every rank. None = MT_CHECKPOINT_ASYNC (default off).
    checkpoint_staging_bytes (mpitrain's): the staging memory a rank holds for that
        (None = MT_CHECKPOINT_STAGING, else 1 GiB); a larger part waits until it fits.
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: Optional[bool] = None
    checkpoint_async: Optional[bool] = None
    checkpoint_staging_bytes: Optional[int] = None

    def _c(self, out: dict) -> None:
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(f"CheckpointConfig.checkpoint_score_order must be 'max' or 'min' "
                             f"(got {self.checkpoint_score_order!r})")
        out["num_to_keep"] = 0 if self.num_to_keep is None else self.num_to_keep
        out["score_attribute"] = self.checkpoint_score_attribute
        out["score_order"] = 1 if self.checkpoint_score_order == "min" else 0
        out["frequency"] = self.checkpoint_frequency
        out["at_end"] = bool(self.checkpoint_at_end)
        out["async_commit"] = bool(self.checkpoint_async)
        out["staging_bytes"] = self.checkpoint_staging_bytes


@dataclass
class FailureConfig:
    """Retries: max_failures failed attempts are retried from the latest checkpoint
    (0 = none, -1 = unlimited). stall_warn_s / stall_timeout_s (mpitrain's): a rank waiting
    in a collective that long is reported, then the job ends (None = 60 s / 600 s)."""

    max_failures: int = 0
    fail_fast: Union[bool, str] = False
    stall_warn_s: Optional[float] = None
    stall_timeout_s: Optional[float] = None

    def _c(self, out: dict) -> None:
        out["max_failures"] = 0 if self.fail_fast else self.max_failures
        out["stall_warn_s"] = self.stall_warn_s
        out["stall_timeout_s"] = self.stall_timeout_s


@dataclass
class DataConfig:
    """datasets_to_split: "all" (default) or a list of names; the datasets named are split
    into equal row ranges, one per rank; the others are read whole by every rank.
    memory_limit (mpitrain's): bytes of a shard held in memory per rank (None = 1 GiB)."""

    datasets_to_split: Union[str, List[str]] = "all"
    execution_options: Any = None
    memory_limit: Optional[int] = None

    def _c(self, out: dict) -> None:
        split = self.datasets_to_split
        if isinstance(split, str):
            if split != "all":
                raise ValueError(f"DataConfig.datasets_to_split must be 'all' or a list of "
                                 f"names (got {split!r})")
            split = None
        out["datasets_to_split"] = None if split is None else [str(s) for s in split]
        out["memory_limit"] = self.memory_limit


@dataclass
class RunConfig:
    """The run: its name (None = mt_<date>_<time>, agreed by every rank), where its folder
    goes (None = ~/mpitrain_results), checkpoints and failures, verbosity (0 silent, 1 a line
    per report, 2 per-rank detail). overwrite and trace are mpitrain's (replace a finished
    run of the same name; write a timeline)."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    verbose: Optional[int] = None
    stop: Any = None
    callbacks: Any = None
    log_to_file: bool = False
    overwrite: bool = False
    trace: bool = False

    def _c(self, out: dict) -> None:
        for what in ("stop", "callbacks"):
            if getattr(self, what):
                raise ValueError(f"RunConfig.{what} is not supported by mpitrain")
        out["name"] = self.name
        out["storage_path"] = None if self.storage_path is None else str(self.storage_path)
        v = self.verbose
        out["verbose"] = 0 if v is None else (-1 if v == 0 else int(v))
        (self.failure_config or FailureConfig())._c(out)
        (self.checkpoint_config or CheckpointConfig())._c(out)
        out["overwrite"] = self.overwrite
        out["trace"] = self.trace


def _translate(message: str) -> str:
    for c, py in sorted(_NAMES.items(), key=lambda kv: -len(kv[0])):
        message = message.replace(c + " ", f"{py} ({c}) ").replace(c + "[", f"{py} ({c})[")
    return message


def to_c(scaling=None, run=None, data=None, resume_from_checkpoint=None) -> dict:
    """The C config fields of these configs, checked by the C validator (ValueError naming
    the field)."""
    out: Dict[str, Any] = {}
    for cfg, cls, what in ((scaling, ScalingConfig, "scaling_config"), (run, RunConfig, "run_config"),
                           (data, DataConfig, "dataset_config")):
        if cfg is not None and not isinstance(cfg, cls):
            raise TypeError(f"{what} must be a {cls.__name__} (got {type(cfg).__name__})")
        (cfg or cls())._c(out)
    if resume_from_checkpoint is not None:
        path = getattr(resume_from_checkpoint, "path", resume_from_checkpoint)
        out["resume_from_checkpoint"] = str(path)
    try:
        _core.validate(out)
    except _core.InvalidArgumentError as e:
        raise _core.InvalidArgumentError(_translate(str(e))) from None
    return out
