"""Result: what fit() returns (Ray's Result), the same on every rank, and Result.from_path
for a run directory on disk."""
from typing import Any, Dict, List, Optional, Tuple

from .. import _core
from ._checkpoint import Checkpoint


class TrainingFailedError(RuntimeError):
    """fit() failed after its retries (Ray's TrainingFailedError). The message is the run's
    error: the failing rank and its message (a Python traceback for an exception of the
    training function)."""


class Result:
    """metrics (the last report, with the automatic keys), checkpoint (the latest),
    best_checkpoints ([(Checkpoint, metrics)], best first), metrics_dataframe (every
    reported row, pandas), path (the run directory), error (None, or a TrainingFailedError
    with the run's error text)."""

    def __init__(self, core):
        self._core = core
        self.metrics: Optional[Dict[str, Any]] = core.metrics()
        st = core.checkpoint()
        self.checkpoint: Optional[Checkpoint] = None if st is None else Checkpoint(_stored=st)
        self.best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = [
            (Checkpoint(_stored=s), m) for s, m in core.best()]
        self.path: str = core.path
        text = core.error
        self.error: Optional[BaseException] = None if text is None else TrainingFailedError(text)
        self.attempts: int = core.attempts

    def __repr__(self) -> str:
        return (f"Result(metrics={self.metrics!r}, path={self.path!r}, checkpoint="
                f"{self.checkpoint!r}, error={self.error!r})")

    @property
    def metrics_dataframe(self):
        """Every reported row of the run (result.json) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self._core.rows(), columns=self._core.columns())

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        """The kept checkpoint whose report has the highest ("max") or lowest ("min")
        ``metric``; None when no kept checkpoint has it."""
        if mode not in ("max", "min"):
            raise ValueError(f"get_best_checkpoint: mode must be 'max' or 'min' (got {mode!r})")
        try:
            st, _m = self._core.best_checkpoint(metric, mode)
        except _core.NotFoundError:
            return None
        return Checkpoint(_stored=st)

    @classmethod
    def from_path(cls, path) -> "Result":
        """The result of the run whose directory is ``path``."""
        import os

        return cls(_core.load_result(os.fspath(path)))
