"""Dataset shards: train.get_dataset_shard(name) gives this rank's rows of a dataset (an
HDF5 group whose columns share their first dimension), read in parallel by the C library.

    shard = train.get_dataset_shard("train")
    for epoch in range(3):
        for batch in shard.iter_batches(batch_size=64, shuffle=True, seed=1):
            x, y = batch["x"], batch["y"]          # numpy arrays, rows first

Each iter_batches call is the next epoch (a new shuffle, the same on every rank, when asked);
every rank gets the same number of batches. A shard has one cursor: an iterator whose epoch
a later iter_batches on the same shard has started after it raises RuntimeError at its next
batch (never rows of the other epoch); ``dtypes`` apply to that call's epoch alone.
Batches are views of the library's memory (read-only numpy arrays, no copy) when the column is read as one of uint8, int32, int64,
float32 or float64 (the stored type, or one given in ``dtypes``), and copies for other
dtypes. A view keeps its rows while it lives (past the next batch, epoch and fit: the
library reads what comes next into other memory); a batch kept past the next one keeps
its buffers (up to a window of the shard) until its arrays go.
"""
from typing import Dict, Iterator, Optional, Union

import numpy as np

from .. import _core

_C_OF = {np.dtype(np.uint8): _core.U8, np.dtype(np.int32): _core.I32,
         np.dtype(np.int64): _core.I64, np.dtype(np.float32): _core.F32,
         np.dtype(np.float64): _core.F64}
_NP_OF = {v: k for k, v in _C_OF.items()}


class DataIterator:
    """This rank's shard of a dataset (Ray's DataIterator)."""

    def __init__(self, name: str, shard):
        self.name = name
        self._s = shard
        self._epoch = 0
        cols = shard.columns()
        self._names = [c[0] for c in cols]
        self._shapes = {c[0]: tuple(c[1]) for c in cols}
        self._stored = {c[0]: _NP_OF[c[2]] for c in cols}
        self._read_as = {c[0]: c[3] for c in cols}  # each column's dtype in C now
        self._running = None  # the epoch whose batches the shard's cursor gives

    def __repr__(self) -> str:
        return f"DataIterator({self.name!r}, rows={self.count()}, columns={self._names})"

    def count(self) -> int:
        """Rows this rank sees per epoch."""
        return self._s.rows

    num_rows = property(count)

    @property
    def dropped_rows(self) -> int:
        """Rows left out so that every rank has as many (the same on every rank)."""
        return self._s.dropped_rows

    @property
    def columns(self):
        return list(self._names)

    @property
    def column_shapes(self) -> Dict[str, tuple]:
        """Each column's shape on this rank (rows first)."""
        return dict(self._shapes)

    @property
    def column_dtypes(self) -> Dict[str, np.dtype]:
        """Each column's stored dtype."""
        return dict(self._stored)

    def _plan_dtypes(self, dtypes):
        """For one epoch: the dtype each column is read as in C (the stored one unless
        ``dtypes`` gives another the library reads), and those converted in Python after."""
        if dtypes is None:
            dtypes = {}
        elif not isinstance(dtypes, dict):
            dtypes = {n: dtypes for n in self._names}
        c_types = {n: _C_OF[self._stored[n]] for n in self._names}
        after = {}
        for n, dt in dtypes.items():
            if n not in self._shapes:
                raise _core.NotFoundError(f"dataset {self.name!r} has no column {n!r} "
                                          f"(columns: {', '.join(self._names)})")
            d = _torch_to_numpy(dt)
            if d in _C_OF:
                c_types[n] = _C_OF[d]
            else:
                after[n] = d
        return c_types, after

    def iter_batches(self, *, batch_size: int = 256, shuffle: bool = False, seed: int = 0,
                     drop_last: bool = False, dtypes=None, batch_format: str = "numpy",
                     prefetch_batches: int = 1, local_shuffle_buffer_size: Optional[int] = None,
                     local_shuffle_seed: Optional[int] = None) -> Iterator[Dict[str, np.ndarray]]:
        """One epoch of batches: dicts of column name -> numpy array (read-only views that
        keep their rows while they live). Collective at its start (every rank iterates)."""
        if batch_format not in ("numpy", "default"):
            raise ValueError(f"iter_batches: batch_format {batch_format!r} is not supported "
                             f"(numpy)")
        if local_shuffle_buffer_size:
            shuffle = True
        if local_shuffle_seed is not None:
            seed = local_shuffle_seed
        c_types, after = self._plan_dtypes(dtypes)
        epoch = self._epoch
        self._epoch += 1
        return self._batches(epoch, int(batch_size), bool(shuffle), int(seed), bool(drop_last),
                             c_types, after)

    def _batches(self, epoch, batch_size, shuffle, seed, drop_last, c_types, after):
        # runs from the first next(): the dtypes are this epoch's alone (set as it starts,
        # so that an iterator made earlier and started later reads with its own)
        s = self._s
        names = self._names
        for n, t in c_types.items():
            if self._read_as.get(n) != t:
                s.set_column_dtype(n, t)
                self._read_as[n] = t
        me = object()
        self._running = me
        s.begin_epoch(epoch, batch_size, shuffle, seed, drop_last)
        asarray = np.asarray
        while True:
            if self._running is not me:
                # the shard has one cursor: a later epoch started on it moved it
                raise RuntimeError(
                    f"iter_batches: this iterator's epoch of dataset {self.name!r} was ended "
                    f"by a later iter_batches on the same shard, which moved the shard's one "
                    f"cursor; a shard runs one epoch at a time: finish or drop one iterator "
                    f"before starting the next")
            views = s.next()
            if views is None:
                return
            batch = {n: asarray(v) for n, v in zip(names, views)}
            for n, d in after.items():
                batch[n] = batch[n].astype(d)
            yield batch

    def iter_torch_batches(self, *, batch_size: int = 256, shuffle: bool = False,
                           seed: int = 0, drop_last: bool = False, dtypes=None,
                           device: str = "cpu", **kw) -> Iterator[dict]:
        """iter_batches with torch tensors (sharing the batch's memory on the CPU, which
        they keep while they live; read-only by contract)."""
        import warnings

        import torch

        with warnings.catch_warnings():
            # the tensors share the library's read-only memory, on purpose
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            for b in self.iter_batches(batch_size=batch_size, shuffle=shuffle, seed=seed,
                                       drop_last=drop_last, dtypes=dtypes, **kw):
                out = {k: torch.from_numpy(v) for k, v in b.items()}
                if device != "cpu":
                    out = {k: v.to(device) for k, v in out.items()}
                yield out

    def __iter__(self):
        return iter(self.iter_batches())


def _torch_to_numpy(dt) -> np.dtype:
    mod = type(dt).__module__ or ""
    if mod.startswith("torch"):
        import torch

        return np.dtype(torch.empty(0, dtype=dt).numpy().dtype)
    return np.dtype(dt)
