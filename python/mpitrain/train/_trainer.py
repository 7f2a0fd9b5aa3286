"""DataParallelTrainer: runs the training function on every worker (MPI rank) with
mt_trainer_fit, retries and resumes as the configs say, and returns a Result.

Launch modes: under ``mpirun -np N python3 script.py`` (or srun) every rank runs the script
and fit() runs the function on this rank and returns the Result on every rank. Without a
launcher, ``python3 script.py`` with ScalingConfig(num_workers=N) starts N-1 more processes
(the same interpreter, flags and arguments; the C library's spawn mode): they run the
script from the top, reach fit(), train, and exit when fit() ends, so code after fit() runs
in the first process only. A worker killed ends the whole job with a clear error (exit 77),
never a hang.

Failures: an exception in the function on any rank fails the attempt on every rank (the
traceback in the run's error record and in Result.error); it is retried from the latest
checkpoint up to FailureConfig.max_failures, then fit() raises TrainingFailedError. A
SystemExit (sys.exit) or KeyboardInterrupt raised in the function ends the run as failed,
without a retry: fit() raises it again on that rank, TrainingFailedError naming it on the
others. A stop
request (SIGTERM, SIGUSR1, Ctrl-C) makes should_checkpoint() true; the report that carries
the next checkpoint ends the run and fit() exits the process with status 75 (Preempted);
running the same command again resumes from that checkpoint.
"""
import inspect
import os
import sys
from typing import Any, Callable, Dict, Optional

from .. import _core
from . import _session
from ._config import DataConfig, RunConfig, ScalingConfig, to_c
from ._result import Result, TrainingFailedError


_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class Preempted(SystemExit):
    """fit() stopped for a stop request after a checkpoint: the process exits with status 75
    (requeue it: the same command resumes). A SystemExit, so ``except Exception`` passes it."""

    def __init__(self, message: str):
        super().__init__(_core.EXIT_PREEMPTED)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _datasets(datasets) -> list:
    out = []
    for name, spec in (datasets or {}).items():
        if isinstance(spec, (str, os.PathLike)):
            file, group = os.fspath(spec), "/" + str(name)
        else:
            try:
                file, group = spec
            except (TypeError, ValueError):
                raise TypeError(f"datasets[{name!r}] must be an HDF5 file path or (path, "
                                f"group), got {spec!r}") from None
            file = os.fspath(file)
        out.append((str(name), os.path.abspath(file), str(group)))
    return out


class DataParallelTrainer:
    """Run ``train_loop_per_worker`` on every worker (Ray's DataParallelTrainer).

        trainer = DataParallelTrainer(train_func, train_loop_config={"lr": 0.1},
                                      scaling_config=ScalingConfig(num_workers=2),
                                      datasets={"train": ("data.h5", "/train")})
        result = trainer.fit()

    The function takes no argument or one (train_loop_config). ``datasets``: name ->
    (HDF5 file, group), or name -> file for the group named like the key. The configs are
    checked now (ValueError naming the field) before any worker starts.
    """

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 backend_config: Any = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint=None,
                 metadata: Optional[Dict[str, Any]] = None):
        if not callable(train_loop_per_worker):
            raise TypeError("train_loop_per_worker must be callable")
        n = _arity(train_loop_per_worker)
        if n > 1:
            raise ValueError(f"train_loop_per_worker takes {n} arguments; it takes none or "
                             f"one (train_loop_config)")
        self._fn = train_loop_per_worker
        self._takes_config = n == 1
        self.train_loop_config = train_loop_config
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = datasets or {}
        self.dataset_config = dataset_config or DataConfig()
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = metadata
        self._cfg = to_c(self.scaling_config, self.run_config, self.dataset_config,
                         resume_from_checkpoint)
        self._ds = _datasets(self.datasets)

    # a subclass's set-up and tear-down around the function, on every worker, every attempt
    def _worker_setup(self) -> None:
        pass

    def _worker_teardown(self) -> None:
        pass

    def _run_worker(self) -> None:
        _session._current = _session._Session(self)
        # what fit set in the C environment (RANK, WORLD_SIZE, ..., OMP_NUM_THREADS), into
        # os.environ for Python code that reads it (torch.distributed's env:// rendezvous)
        for k in _ENV:
            v = _core.getenv(k)
            if v is not None:
                os.environ[k] = v
        try:
            self._worker_setup()
            try:
                if self._takes_config:
                    self._fn(self.train_loop_config if self.train_loop_config is not None else {})
                else:
                    self._fn()
            finally:
                self._worker_teardown()
        finally:
            _session._current = None

    def fit(self) -> Result:
        """Collective. Train; the Result on every rank, or TrainingFailedError after the
        retries, or Preempted (exit status 75) for a stop request."""
        from .. import _ensure_init, _spawned

        if _session._current is not None:
            raise RuntimeError("fit() was called inside a training function; fits run one at a time")
        _ensure_init()
        code, core, _tracebacks = _core.fit(self._run_worker, self._cfg, self._ds)
        result = Result(core) if core is not None else None
        if _spawned:  # a process spawn mode started: the first process carries on alone
            sys.stdout.flush()
            raise SystemExit(0 if code == 0 else (_core.EXIT_PREEMPTED if code == _core.ESTOP
                                                  else _core.EXIT_FAILED))
        if code == 0:
            return result
        text = (result.error and str(result.error)) or f"fit failed (code {code})"
        if code == _core.ESTOP:
            path = result.path if result else "?"
            if _core.job_rank() == 0:
                print(f"mpitrain: preempted after a checkpoint; run the same command again to "
                      f"resume ({path})", file=sys.stderr, flush=True)
            raise Preempted(text)
        raise TrainingFailedError(text)


def _arity(fn) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in params if p.default is p.empty and
               p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
