"""mpitrain._core.Fusion (python/core_fusion.c), the engine under prepare_model, used
directly (no torch needed): its block through the buffer protocol, averaging, the errors
of each call, close, and a Fusion that outlives its fit. SPMD like test_api.py."""
import os

import numpy as np
import pytest

import mpitrain
from mpitrain import _core, train
from mpitrain.train import DataParallelTrainer, RunConfig, TrainingFailedError

WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def fit(fn, store, name, **kw):
    return DataParallelTrainer(fn, run_config=RunConfig(name=name, storage_path=store,
                                                        verbose=0), **kw).fit()


def test_outside_a_fit():
    with pytest.raises(mpitrain.InvalidArgumentError, match="outside a training function"):
        _core.Fusion()


def test_block_averaged_in_place_and_closed(store, run_name):
    kept = {}

    def fn():
        with pytest.raises(ValueError, match="compression 9"):
            _core.Fusion(compression=9)
        with pytest.raises(ValueError, match="algo 7"):
            _core.Fusion(algo=7)
        with pytest.raises(ValueError, match="bucket_bytes must be >= 0"):
            _core.Fusion(bucket_bytes=-1)
        f = _core.Fusion(bucket_bytes=16)  # 4 floats a bucket: several buckets
        with pytest.raises(BufferError, match="alloc it first"):
            memoryview(f)
        with pytest.raises(ValueError, match="alloc the block first"):
            f.add(0, 1)
        f.alloc(10)
        assert f.count == 10 and f.exports == 0
        a = np.frombuffer(f, dtype=np.float32)  # writable, over the block itself
        assert f.exports == 1 and a.flags.writeable
        assert f.add(4, 6) == 0 and f.add(0, 4) == 1
        with pytest.raises(ValueError, match=r"\[8, 8 \+ 4\) is not inside the block of 10"):
            f.add(8, 4)
        for step in range(3):
            a[:] = np.arange(10, dtype=np.float32) * (RANK + 1) + step
            f.ready(1)
            f.ready(0)
            f.wait()
            want = np.arange(10, dtype=np.float32) * (WORLD + 1) / 2 + step
            np.testing.assert_allclose(a, want, rtol=1e-6)
        with pytest.raises(mpitrain.InvalidArgumentError, match="index 5 is not a tensor"):
            f.ready(5)
        # remembered by the library: the step's wait fails on every rank
        with pytest.raises(mpitrain.MpitrainError, match="index 5 is not a tensor"):
            f.wait()
        f.ready(0)
        f.ready(1)
        f.wait()  # the next step is fine again
        assert f.algo == ("none" if WORLD == 1 else "shm") and f.compression == "none"
        with pytest.raises(BufferError, match="1 buffer"):
            f.close()  # the array would outlive the block
        del a
        f.close()
        f.close()  # idempotent
        assert f.closed and f.algo is None and f.count == 0
        for call in (lambda: f.ready(0), f.wait, lambda: f.alloc(4), lambda: f.add(0, 1)):
            with pytest.raises(ValueError, match="the fusion is closed"):
                call()
        with pytest.raises(BufferError, match="closed"):
            memoryview(f)
        kept["open"] = _core.Fusion()  # never closed: destroyed when dropped after fit
        kept["open"].alloc(4)
        kept["open"].add(0, 4)
        kept["open"].wait()
        train.report({"ok": 1})

    assert fit(fn, store, run_name).error is None
    assert kept["open"].algo is not None  # an orphan now: its calls refuse, it frees
    with pytest.raises(mpitrain.InvalidArgumentError, match="context ended with its fit"):
        kept["open"].wait()
    del kept["open"]


def test_alloc_refused_on_every_rank(store, run_name):
    def fn():
        f = _core.Fusion()
        with pytest.raises(mpitrain.MpitrainError, match="count must be > 0"):
            f.alloc(0)
        f.alloc(3)
        with pytest.raises(ValueError, match="has its block already"):
            f.alloc(3)  # every rank: the second alloc is refused by the library too
        f.close()
        train.report({"ok": 1})

    assert fit(fn, store, run_name).error is None


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
def test_block_sizes_differ(store, run_name):
    def fn():
        f = _core.Fusion()
        f.alloc(4 + RANK)

    with pytest.raises(TrainingFailedError, match="MismatchError"):
        fit(fn, store, run_name)
