"""Checkpoint: a folder of files, as in Ray Train, plus numpy arrays stored as the
checkpoint's HDF5 arrays (checkpoint.h5, readable with h5py), replicated or sharded by rows.

Saving, either Ray idiom (every rank passes a checkpoint, or only rank 0 does and the
others None):

    with tempfile.TemporaryDirectory() as d:
        torch.save(model.state_dict(), os.path.join(d, "model.pt"))
        ck = Checkpoint.from_directory(d)
        ck.set_array("w", w)                          # replicated: rank 0's copy is stored
        ck.set_array("rows", my_rows, sharded=True)   # each rank's rows, in rank order
        ck.set_metadata({"epoch": epoch})
        train.report(metrics, checkpoint=ck)          # committed before report returns

The folder's files are copied into the run's checkpoint folder when report commits: rank
0's as they are named, rank r's as rank<r>/NAME. Only files at the top of the folder are
stored (the library's rule); a subfolder is a ValueError naming it (a PeerError quoting it
on the other ranks). Arrays come from every rank (the same arrays) or from rank 0 alone
(the others None): then rank 0's are stored, a sharded one with rank 0's rows.

Restoring: train.get_checkpoint() inside the function (the latest, on a retry or resume),
Result.checkpoint, Result.best_checkpoints, or Checkpoint.from_directory(path) of a
committed checkpoint folder. as_directory() / to_directory() give the folder; get_array()
reads an array: for the checkpoint get_checkpoint() gives it is collective (every rank
reads the same arrays in the same order; a sharded array gives this rank its rows, re-split
if the world size changed), for any other checkpoint it reads the whole array.
"""
import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from .. import _core

_DTYPES = {_core.U8: np.uint8, _core.I32: np.int32, _core.I64: np.int64,
           _core.F32: np.float32, _core.F64: np.float64}
_JSON = "json:"  # metadata values other than str, int and float are stored as JSON text
_RESERVED = "mt."  # the library's own keys (mt.training_iteration, ...)


class Checkpoint:
    """A checkpoint: a folder (path) and/or arrays and metadata to store."""

    def __init__(self, path: Optional[str] = None, filesystem: Any = None, *, _stored=None):
        self.path = None if path is None else os.fspath(path)
        self.filesystem = filesystem
        self._stored = _stored
        self._arrays: Dict[str, tuple] = {}
        self._metadata: Optional[dict] = None
        if _stored is not None and self.path is None:
            self.path = _stored.path

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    # ------------------------------------------------------------ making
    @classmethod
    def from_directory(cls, path) -> "Checkpoint":
        """A checkpoint of the folder at path (its files are stored when it is reported;
        a committed checkpoint folder can be read back)."""
        return cls(os.fspath(path))

    @classmethod
    def from_arrays(cls, arrays: Optional[Dict[str, np.ndarray]] = None, *,
                    sharded: Optional[Dict[str, np.ndarray]] = None,
                    metadata: Optional[dict] = None) -> "Checkpoint":
        """A checkpoint of arrays only: ``arrays`` replicated (rank 0's stored), ``sharded``
        each rank's rows."""
        ck = cls()
        for k, a in (arrays or {}).items():
            ck.set_array(k, a)
        for k, a in (sharded or {}).items():
            ck.set_array(k, a, sharded=True)
        if metadata is not None:
            ck.set_metadata(metadata)
        return ck

    def set_array(self, name: str, array, *, sharded: bool = False) -> None:
        """Store ``array`` (numpy, or a torch CPU tensor) as the HDF5 array ``name``: its
        memory is read when report commits (no copy before)."""
        mod = type(array).__module__ or ""
        if mod.startswith("torch"):
            array = array.detach().cpu().numpy()
        a = np.ascontiguousarray(array)
        if a.dtype == np.bool_:
            a = a.astype(np.uint8)
        self._arrays[str(name)] = (a, bool(sharded))

    # ------------------------------------------------------------ reading
    def _store(self):
        if self._stored is None and self.path and os.path.exists(
                os.path.join(self.path, "checkpoint.h5")):
            self._stored = _core.open_checkpoint(self.path)
        return self._stored

    def array_names(self) -> List[str]:
        """Names of the arrays (stored and set)."""
        st = self._store()
        names = list(st.arrays()) if st is not None else []
        return names + [k for k in self._arrays if k not in names]

    def get_array(self, name: str) -> np.ndarray:
        """The array ``name`` (collective for the checkpoint train.get_checkpoint() gives)."""
        if name in self._arrays:
            return self._arrays[name][0]
        st = self._store()
        if st is None:
            raise _core.NotFoundError(f"checkpoint {self.path}: no array {name!r}")
        dtype, _sharded, shape = st.array_info(name)
        out = np.empty(shape, dtype=_DTYPES[dtype])
        st.get_array(name, out)
        return out

    def get_metadata(self) -> Dict[str, Any]:
        """The metadata (set_metadata's dict, or the stored one)."""
        if self._metadata is not None:
            return dict(self._metadata)
        st = self._store()
        out: Dict[str, Any] = {}
        for k in st.meta_keys() if st is not None else []:
            if k.startswith(_RESERVED):
                continue
            v = st.get_meta(k)
            if k.startswith(_JSON):
                out[k[len(_JSON):]] = json.loads(v)
            else:
                out[k] = v
        return out

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """Replace the metadata (JSON-serialisable values; str, int and float are stored as
        HDF5 attributes of their type)."""
        self._metadata = dict(metadata)

    def update_metadata(self, metadata: Dict[str, Any]) -> None:
        """Merge into the metadata."""
        md = self.get_metadata()
        md.update(metadata)
        self._metadata = md

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """The checkpoint's folder, as a context manager (a temporary copy holding only
        arrays for a checkpoint that has no folder yet)."""
        if self.path is not None:
            yield self.path
            return
        d = self.to_directory()
        try:
            yield d
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def to_directory(self, path: Optional[str] = None) -> str:
        """Copy the checkpoint's folder into ``path`` (a new temporary folder when None);
        returns it."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="mpitrain-ckpt-")
        os.makedirs(dest, exist_ok=True)
        if self.path is not None and os.path.abspath(self.path) != os.path.abspath(dest):
            shutil.copytree(self.path, dest, dirs_exist_ok=True)
        return dest

    # ------------------------------------------------------------ for report
    def _spec(self):
        files = []
        if self.path is not None and self._stored is None:
            if not os.path.isdir(self.path):
                raise ValueError(f"Checkpoint.from_directory({self.path!r}): not a folder")
            for e in sorted(os.scandir(self.path), key=lambda e: e.name):
                if e.is_dir():
                    raise ValueError(f"Checkpoint.from_directory({self.path!r}): subfolder "
                                     f"{e.name!r}: only the files at the top of the folder are "
                                     f"stored (archive the subfolder, e.g. shutil.make_archive)")
                files.append((e.name, e.path))
        elif self._stored is not None:
            raise ValueError(f"report: {self.path} is a stored checkpoint; report a new one "
                             f"(Checkpoint.from_directory of a folder of yours, or set_array)")
        arrays = [(k, a, sh) for k, (a, sh) in self._arrays.items()]
        meta = []
        for k, v in (self._metadata or {}).items():
            if isinstance(v, (str, float)) or (isinstance(v, int) and not isinstance(v, bool)):
                meta.append((str(k), v))
            else:
                meta.append((_JSON + str(k), json.dumps(v)))
        return files, arrays, meta
