"""The Python package's API, run on every rank at once (mpirun -np N python3 -m pytest, and
at one process without a launcher): every test is SPMD."""
import os
import resource
import sys

import numpy as np
import pytest

import mpitrain
from mpitrain import train
from mpitrain.train import (Checkpoint, CheckpointConfig, DataConfig, DataParallelTrainer,
                            FailureConfig, Result, RunConfig, ScalingConfig,
                            TrainingFailedError)

WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
DATA_ROWS = 1000  # tests/python.sh's file: /train has 1000 rows, /test 100


def fit(fn, store, name, **kw):
    run = kw.pop("run_config", None) or RunConfig()
    run.name, run.storage_path, run.verbose = name, store, 0
    return DataParallelTrainer(fn, run_config=run, **kw).fit()


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


# ---------------------------------------------------------------- errors and configs

def test_error_classes():
    for cls, base in ((mpitrain.InvalidArgumentError, ValueError),
                      (mpitrain.NotFoundError, LookupError),
                      (mpitrain.OutOfMemoryError, MemoryError),
                      (mpitrain.InputOutputError, OSError)):
        assert issubclass(cls, mpitrain.MpitrainError) and issubclass(cls, base)
    assert mpitrain.InvalidArgumentError.code == -1
    assert mpitrain.MismatchError.code == -8
    assert issubclass(train.StopTraining, BaseException)
    assert not issubclass(train.StopTraining, Exception)
    assert issubclass(train.Preempted, SystemExit)
    assert issubclass(TrainingFailedError, RuntimeError)


def test_config_defaults_are_rays():
    assert ScalingConfig().num_workers is None and ScalingConfig().use_gpu is False
    ck = CheckpointConfig()
    assert (ck.num_to_keep, ck.checkpoint_score_attribute, ck.checkpoint_score_order,
            ck.checkpoint_frequency) == (None, None, "max", 0)
    assert FailureConfig().max_failures == 0
    assert DataConfig().datasets_to_split == "all"
    r = RunConfig()
    assert (r.name, r.storage_path, r.failure_config, r.checkpoint_config) == (None,) * 4


@pytest.mark.parametrize("kw, field", [
    (dict(scaling_config=ScalingConfig(num_workers=-1)), "ScalingConfig.num_workers"),
    (dict(scaling_config=ScalingConfig(resources_per_worker={"CPU": -2})),
     "ScalingConfig.resources_per_worker['CPU']"),
    (dict(scaling_config=ScalingConfig(use_gpu=True)), "ScalingConfig.use_gpu"),
    (dict(scaling_config=ScalingConfig(resources_per_worker={"GPU": 1})),
     "ScalingConfig.resources_per_worker['GPU']"),
    (dict(run_config=RunConfig(checkpoint_config=CheckpointConfig(num_to_keep=-2))),
     "CheckpointConfig.num_to_keep"),
    (dict(run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=-1))),
     "CheckpointConfig.checkpoint_frequency"),
    (dict(run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_score_order="up"))),
     "CheckpointConfig.checkpoint_score_order"),
    (dict(run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_score_attribute=""))),
     "CheckpointConfig.checkpoint_score_attribute"),
    (dict(run_config=RunConfig(checkpoint_config=CheckpointConfig(
        checkpoint_async=True, checkpoint_staging_bytes=2**41))),
     "CheckpointConfig.checkpoint_staging_bytes"),
    (dict(run_config=RunConfig(failure_config=FailureConfig(max_failures=-2))),
     "FailureConfig.max_failures"),
    (dict(run_config=RunConfig(failure_config=FailureConfig(stall_warn_s=10, stall_timeout_s=5))),
     "FailureConfig.stall_timeout_s"),
    (dict(run_config=RunConfig(name="a/b")), "RunConfig.name"),
    (dict(run_config=RunConfig(storage_path="")), "RunConfig.storage_path"),
    (dict(run_config=RunConfig(verbose=3)), "RunConfig.verbose"),
    (dict(dataset_config=DataConfig(datasets_to_split="some")), "DataConfig.datasets_to_split"),
    (dict(dataset_config=DataConfig(datasets_to_split=[""])), "DataConfig.datasets_to_split"),
    (dict(resume_from_checkpoint=""), "resume_from_checkpoint"),
])
def test_bad_config_field(kw, field):
    """A bad field is a ValueError naming it, raised when the trainer is made (before any
    worker starts), on every rank."""
    with pytest.raises(ValueError) as e:
        DataParallelTrainer(lambda: None, **kw)
    assert field in str(e.value), str(e.value)


def test_bad_config_types():
    with pytest.raises(TypeError, match="scaling_config must be a ScalingConfig"):
        DataParallelTrainer(lambda: None, scaling_config=RunConfig())
    with pytest.raises(ValueError, match="takes 2 arguments"):
        DataParallelTrainer(lambda a, b: None)
    with pytest.raises(TypeError, match="num_workers must be an integer"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers="2"))


def test_outside_a_training_function():
    with pytest.raises(RuntimeError, match="only valid inside the training function"):
        train.report({"a": 1})
    with pytest.raises(RuntimeError):
        train.get_context()
    with pytest.raises(mpitrain.InvalidArgumentError, match="outside a training function"):
        mpitrain.allreduce(np.zeros(2, np.float32))


def test_torch_is_lazy():
    import subprocess

    code = ("import sys, mpitrain.train as t; assert 'torch' not in sys.modules; "
            "t.DataParallelTrainer; print('ok')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------- context and collectives

def test_context(store, run_name):
    seen = {}

    def fn():
        c = train.get_context()
        seen.update(world=c.get_world_size(), rank=c.get_world_rank(), local=c.get_local_rank(),
                    local_world=c.get_local_world_size(), node=c.get_node_rank(),
                    name=c.get_experiment_name(), dir=c.get_trial_dir(), cpus=c.get_num_cpus(),
                    attempt=c.get_attempt())
        train.report({"x": 1})

    r = fit(fn, store, run_name)
    assert seen["world"] == WORLD and seen["rank"] == RANK
    assert seen["local"] == RANK and seen["local_world"] == WORLD and seen["node"] == 0
    assert seen["name"] == run_name
    assert seen["dir"] == os.path.join(store, run_name) == r.path
    assert seen["cpus"] >= 1 and seen["attempt"] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_allreduce_ops(store, run_name, dtype):
    out = {}

    def fn():
        r = train.get_context().get_world_rank()
        for op in ("sum", "mean", "min", "max"):
            a = np.full((2, 3), r + 1, dtype=dtype)
            b = mpitrain.allreduce(a, op=op)
            assert b is a  # in place
            out[op] = a.copy()
        train.report({"x": 1})

    fit(fn, store, run_name)
    n = WORLD
    want = {"sum": n * (n + 1) // 2, "mean": (n * (n + 1) // 2) / n, "min": 1, "max": n}
    for op, v in want.items():
        expect = np.full((2, 3), v, dtype=np.float64)
        if np.issubdtype(dtype, np.integer):
            expect = np.trunc(expect)
        assert out[op].dtype == dtype
        np.testing.assert_allclose(out[op], expect.astype(dtype), err_msg=op)


def test_broadcast_allgather_barrier(store, run_name):
    def fn():
        r = train.get_context().get_world_rank()
        a = np.full(5, r, dtype=np.int64)
        mpitrain.broadcast(a, root=WORLD - 1)
        assert (a == WORLD - 1).all()
        g = mpitrain.allgather(np.array([r, 10 * r], dtype=np.float32))
        assert g.shape == (WORLD, 2)
        np.testing.assert_array_equal(g[:, 1], 10 * np.arange(WORLD))
        mpitrain.barrier()
        # a non-contiguous array is refused on every rank alike (before any collective)
        with pytest.raises(ValueError, match="not C-contiguous"):
            mpitrain.allreduce(np.zeros((4, 4), np.float32)[:, 1])
        with pytest.raises(TypeError, match="unsupported element type"):
            mpitrain.allreduce(np.zeros(4, np.float16))
        with pytest.raises(ValueError, match="op must be one of"):
            mpitrain.allreduce(np.zeros(4, np.float32), op="prod")
        train.report({"x": 1})

    fit(fn, store, run_name)


def test_torch_tensors_in_place(store, run_name):
    torch = pytest.importorskip("torch")

    def fn():
        r = train.get_context().get_world_rank()
        t = torch.full((3,), float(r + 1))
        mpitrain.allreduce(t, op="sum")
        assert torch.equal(t, torch.full((3,), float(WORLD * (WORLD + 1) // 2)))
        g = mpitrain.allgather(torch.tensor([r], dtype=torch.int64))
        assert isinstance(g, torch.Tensor) and g.flatten().tolist() == list(range(WORLD))
        train.report({"x": 1})

    fit(fn, store, run_name)


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
@pytest.mark.parametrize("call", ["allreduce", "broadcast", "allgather"])
@pytest.mark.parametrize("kind", ["size", "shape", "ndim", "type"])
def test_mismatched_collectives(store, run_name, kind, call):
    """Different sizes, shapes (same count) or types across ranks, only rank 1 differing:
    MismatchError on every rank, naming both ranks' calls (both shapes)."""
    caught = []

    def fn():
        r = train.get_context().get_world_rank()
        if kind == "size":
            a = np.zeros(4 + (r == 1), np.float32)
        elif kind == "shape":
            a = np.zeros((2, 3) if r == 1 else (3, 2), np.float32)
        elif kind == "ndim":
            a = np.zeros((2, 3) if r == 1 else 6, np.float32)
        else:
            a = np.zeros(4, np.float64 if r == 1 else np.float32)
        try:
            getattr(mpitrain, call)(a)
        except mpitrain.MismatchError as e:
            caught.append(str(e))
        b = np.arange(6, dtype=np.float32).reshape(2, 3)  # the next call works again
        mpitrain.allreduce(b)
        assert b[1, 2] == 5 * WORLD
        train.report({"x": 1})

    fit(fn, store, run_name)
    assert len(caught) == 1, caught
    assert f"rank 0 called {call}(" in caught[0] and f"rank 1 called {call}(" in caught[0]
    if kind == "shape":
        assert "shape=(3, 2)" in caught[0] and "shape=(2, 3)" in caught[0], caught[0]
    if kind == "ndim":
        assert "shape=(2, 3)" in caught[0], caught[0]


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
@pytest.mark.parametrize("bad", ["float16", "not_contiguous", "read_only", "op", "out_size",
                                 "not_an_array", "root_out_of_range"])
def test_bad_collective_argument_on_one_rank(store, run_name, bad):
    """Rank 1 alone passes a bad argument: its own exception there, a PeerError quoting it
    on the others (none waits for rank 1, whatever rank 1 does next)."""
    caught = []

    def fn():
        r = train.get_context().get_world_rank()
        a = np.zeros((4, 2), np.float32)
        call, kw = mpitrain.allreduce, {}
        if r == 1:
            if bad == "float16":
                a = a.astype(np.float16)
            elif bad == "not_contiguous":
                a = np.zeros((4, 4), np.float32)[:, ::2]
            elif bad == "read_only":
                a.flags.writeable = False
            elif bad == "op":
                kw = {"op": "median"}
            elif bad == "out_size":
                call, kw = mpitrain.allgather, {"out": np.zeros(3, np.float32)}
            elif bad == "root_out_of_range":
                call, kw = mpitrain.broadcast, {"root": 2**31}
            else:
                a = "four floats"
        if bad == "out_size" and r != 1:
            call = mpitrain.allgather
        if bad == "root_out_of_range" and r != 1:
            call, kw = mpitrain.broadcast, {"root": 0}
        try:
            call(a, **kw)
        except Exception as e:
            caught.append((type(e).__name__, str(e)))
        train.report({"x": 1})  # every rank goes on together

    r = fit(fn, store, run_name)
    assert r.error is None and len(caught) == 1, caught
    name, text = caught[0]
    if RANK == 1:
        assert name in ("TypeError", "ValueError"), caught
    else:
        assert name == "PeerError" and "rank 1 failed" in text, caught


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
def test_collective_shapes_that_agree(store, run_name):
    """Same shapes agree (0-d, 1-d, n-d, more than 8 dimensions, empty), and a 1-d array
    of the same count as a plain C call's: no false mismatch."""
    def fn():
        for shape in [(), (5,), (2, 3), (1,) * 10 + (2,), (0, 3)]:
            a = np.ones(shape, np.float64)
            mpitrain.allreduce(a)
            assert a.shape == shape and np.all(a == WORLD)
            mpitrain.broadcast(a, root=1)
            g = mpitrain.allgather(a)
            assert g.shape == (WORLD,) + shape
        train.report({"x": 1})

    fit(fn, store, run_name)


# ---------------------------------------------------------------- report, result, checkpoints

def test_report_and_result(store, run_name):
    def fn(config):
        for i in range(config["n"]):
            train.report({"loss": 1.0 / (i + 1), "step": i, "tag": "t", "val": {"acc": 0.5 + i},
                          "np": np.float32(0.25), "ni": np.int64(7)})

    r = fit(fn, store, run_name, train_loop_config={"n": 4})
    assert r.error is None and r.attempts == 1
    m = r.metrics
    assert m["loss"] == 0.25 and m["step"] == 3 and m["tag"] == "t" and m["val/acc"] == 3.5
    assert isinstance(m["step"], int) and isinstance(m["loss"], float) and m["ni"] == 7
    assert m["training_iteration"] == 4
    df = r.metrics_dataframe
    assert list(df["step"]) == [0, 1, 2, 3] and "time_total_s" in df.columns
    again = Result.from_path(r.path)
    assert again.metrics["step"] == 3 and len(again.metrics_dataframe) == 4


def test_report_array_and_tensor_scalars(store, run_name):
    """0-d arrays and one-element tensors are numbers (Ray's {"loss": loss} with a tensor):
    integers stay integers, floats floats."""
    vals = {"f0d": np.array(0.5), "i0d": np.array(4), "f1": np.array([0.25]), "b": np.bool_(True)}
    try:
        import torch
        vals.update(tf=torch.tensor(0.75), ti=torch.tensor(3), tf1=torch.tensor([1.5]))
    except ImportError:
        pass

    def fn():
        train.report(dict(vals))

    m = fit(fn, store, run_name).metrics
    assert m["f0d"] == 0.5 and isinstance(m["f0d"], float)
    assert m["i0d"] == 4 and isinstance(m["i0d"], int)
    assert m["f1"] == 0.25 and m["b"] == 1
    if "tf" in vals:
        assert m["tf"] == 0.75 and m["ti"] == 3 and isinstance(m["ti"], int) and m["tf1"] == 1.5


@pytest.mark.parametrize("bad", ["array", "cycle", "deep"])
def test_unreportable_metric_on_one_rank(store, run_name, bad):
    """An array of more than one number, a dict that holds itself, dicts nested 100,000
    deep, on one rank: that rank's error naming the key, a PeerError on the others, no
    crash and no hang."""
    who = WORLD - 1
    caught = []

    def fn():
        m = {"x": 1}
        if train.get_context().get_world_rank() == who:
            if bad == "array":
                m["x"] = np.arange(3.0)
            elif bad == "cycle":
                m["self"] = m
            else:
                d = m
                for _ in range(100000):
                    d["d"] = {}
                    d = d["d"]
        try:
            train.report(m)
        except (TypeError, ValueError, mpitrain.PeerError) as e:
            caught.append((type(e).__name__, str(e)))
            raise

    with pytest.raises(TrainingFailedError) as e:
        fit(fn, store, run_name)
    kind, text = caught[0]
    if RANK == who:
        assert kind == ("TypeError" if bad == "array" else "ValueError")
        assert ('"x"' if bad == "array" else "nested more than") in text
    else:
        assert kind == "PeerError"
    assert f"rank {who} failed" in str(e.value)


def test_runs_without_a_name_get_their_own(store, run_name):
    """Fits with no run name, one after another within a second in one storage folder:
    each its own run (mt_<time>, then mt_<time>_2, ...)."""
    folder = os.path.join(store, run_name)

    def fn():
        train.report({"x": 1})

    paths = [DataParallelTrainer(fn, run_config=RunConfig(storage_path=folder, verbose=0))
             .fit().path for _ in range(3)]
    assert len(set(paths)) == 3, paths
    names = [os.path.basename(p) for p in paths]
    assert all(n.startswith("mt_") for n in names)
    assert sorted(os.listdir(folder)) == sorted(names)  # rank 0's names, every rank's runs


def test_bad_metric_on_one_rank(store, run_name):
    """A metric that cannot be reported, on one rank: that rank's TypeError, a PeerError on
    the others, and the attempt fails on every rank (no rank left waiting)."""
    bad = WORLD - 1
    caught = []

    def fn():
        r = train.get_context().get_world_rank()
        try:
            train.report({"x": [1, 2] if r == bad else 1})
        except (TypeError, mpitrain.PeerError) as e:
            caught.append(type(e).__name__)
            raise

    with pytest.raises(TrainingFailedError) as e:
        fit(fn, store, run_name)
    assert caught == (["TypeError"] if RANK == bad else ["PeerError"])
    assert f"rank {bad} failed" in str(e.value) and "TypeError" in str(e.value)


@pytest.mark.parametrize("who", ["every", "rank0"])
def test_checkpoint_files_arrays_metadata(store, run_name, who, tmp_path):
    h5py = pytest.importorskip("h5py")

    def fn():
        r = train.get_context().get_world_rank()
        d = tmp_path / f"ck{r}"
        d.mkdir()
        (d / "model.txt").write_text(f"rank {r}")
        ck = Checkpoint.from_directory(d)
        # every rank's arrays, or rank 0's alone (the others None: Ray's other idiom)
        ck.set_array("w", np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1))
        ck.set_array("rows", np.full((r + 1, 2), r, dtype=np.int64), sharded=True)
        ck.set_metadata({"epoch": 3, "lr": 0.5, "name": "m", "cfg": {"a": [1, 2]}})
        give = who == "every" or r == 0
        train.report({"loss": 0.5}, checkpoint=ck if give else None)

    r = fit(fn, store, run_name)
    ck = r.checkpoint
    assert ck is not None and os.path.isdir(ck.path)
    assert ck.get_metadata() == {"epoch": 3, "lr": 0.5, "name": "m", "cfg": {"a": [1, 2]}}
    with ck.as_directory() as d:
        assert open(os.path.join(d, "model.txt")).read() == "rank 0"
        if who == "every" and WORLD > 1:
            assert open(os.path.join(d, "rank1", "model.txt")).read() == "rank 1"
        if who == "rank0" and WORLD > 1:
            assert not os.path.exists(os.path.join(d, "rank1"))
    np.testing.assert_array_equal(ck.get_array("w"), np.arange(6).reshape(2, 3))  # rank 0's
    ranks = range(WORLD) if who == "every" else [0]
    want_rows = np.concatenate([np.full((q + 1, 2), q) for q in ranks])
    np.testing.assert_array_equal(ck.get_array("rows"), want_rows)
    with h5py.File(os.path.join(ck.path, "checkpoint.h5"), "r") as f:  # plain HDF5
        np.testing.assert_array_equal(f["w"][()], np.arange(6).reshape(2, 3))
        np.testing.assert_array_equal(f["rows"][()], want_rows)
        assert f["w"].dtype == np.float32 and f["rows"].dtype == np.int64
    copy = ck.to_directory(str(tmp_path / "copy"))
    assert os.path.exists(os.path.join(copy, "model.txt"))
    assert Checkpoint.from_directory(ck.path).get_metadata()["epoch"] == 3


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
def test_arrays_from_rank0_alone_restored_everywhere(store, run_name):
    """Rank 0's arrays with None elsewhere are stored (rank 0's copy; its rows) and a retry
    restores them on every rank (get_array is collective)."""
    seen = []

    def fn():
        r = train.get_context().get_world_rank()
        ck = train.get_checkpoint()
        if ck is None:
            mine = None
            if r == 0:
                mine = Checkpoint.from_arrays({"w": np.arange(4.0), "s": np.int64(7)},
                                              sharded={"rows": np.ones((3, 2), np.float32)},
                                              metadata={"step": 1})
            train.report({"x": 1}, checkpoint=mine)
            raise RuntimeError("fail once")
        seen.append((ck.get_array("w").tolist(), int(ck.get_array("s")),
                     ck.get_metadata()["step"]))
        train.report({"x": 2})

    r = fit(fn, store, run_name, run_config=RunConfig(failure_config=FailureConfig(max_failures=1)))
    assert r.error is None and r.attempts == 2
    assert seen == [([0.0, 1.0, 2.0, 3.0], 7, 1)]
    np.testing.assert_array_equal(r.checkpoint.get_array("rows"), np.ones((3, 2)))


@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
@pytest.mark.parametrize("case", ["rank1_only", "different_counts"])
def test_arrays_that_cannot_agree_fail_every_rank(store, run_name, case):
    """Arrays from rank 1 alone (rank 0 none), or ranks with different arrays: the same
    kind of error on every rank saying why, and the next report works."""
    caught = []

    def fn():
        r = train.get_context().get_world_rank()
        if case == "rank1_only":
            ck = Checkpoint.from_arrays({"w": np.zeros(3)}) if r == 1 else None
        else:
            ck = Checkpoint.from_arrays({f"a{i}": np.zeros(2) for i in range(1 + (r == 1))})
        try:
            train.report({"x": 1}, checkpoint=ck)
        except mpitrain.MpitrainError as e:
            caught.append((type(e).__name__, str(e)))
        train.report({"x": 2})

    r = fit(fn, store, run_name)
    assert r.error is None and r.checkpoint is None
    assert len(caught) == 1, caught
    if case == "rank1_only":
        assert caught[0][0] == "InvalidArgumentError" and "rank 0's holds none" in caught[0][1]
    else:
        assert caught[0][0] == "MismatchError" and "different numbers of arrays" in caught[0][1]


@pytest.mark.parametrize("who", [0, 1])
def test_checkpoint_subfolder_refused_on_every_rank(store, run_name, tmp_path, who):
    """A subfolder in one rank's checkpoint folder (rank 0's or rank 1's alone): that rank's
    ValueError, a PeerError on the others, both naming the folder and the subfolder."""
    if who >= WORLD:
        pytest.skip("needs 2 ranks")
    caught = []

    def fn():
        r = train.get_context().get_world_rank()
        d = tmp_path / f"c{r}"
        d.mkdir()
        (d / "model.txt").write_text("m")
        if r == who:
            (d / "sub").mkdir()
        try:
            train.report({"x": 1}, checkpoint=Checkpoint.from_directory(d))
        except (ValueError, mpitrain.PeerError) as e:
            caught.append((type(e).__name__, str(e)))
        train.report({"x": 2})

    r = fit(fn, store, run_name)
    assert r.checkpoint is None and len(caught) == 1, caught
    name, text = caught[0]
    assert name == ("ValueError" if RANK == who else "PeerError"), caught
    assert "subfolder 'sub'" in text and f"c{who}" in text, text
    if RANK != who:
        assert f"rank {who} failed" in text


def test_best_checkpoints(store, run_name):
    def fn():
        for i, loss in enumerate([0.5, 0.1, 0.9]):
            train.report({"loss": loss}, checkpoint=Checkpoint.from_arrays({"i": np.array([i])}))

    cfg = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                           checkpoint_score_order="min")
    r = fit(fn, store, run_name, run_config=RunConfig(checkpoint_config=cfg))
    losses = [m["loss"] for _, m in r.best_checkpoints]
    assert losses[0] == 0.1 and 0.5 not in losses[:1]
    assert int(r.get_best_checkpoint("loss", "min").get_array("i")[0]) == 1
    assert int(r.get_best_checkpoint("loss", "max").get_array("i")[0]) == 2
    assert r.get_best_checkpoint("absent", "max") is None
    with pytest.raises(ValueError, match="mode"):
        r.get_best_checkpoint("loss", "up")


# ---------------------------------------------------------------- failures and retries

def test_exception_on_one_rank_is_retried_from_the_checkpoint(store, run_name):
    """rank WORLD-1 raises in the first attempt after a checkpoint; every rank retries, and
    get_checkpoint() gives the checkpoint (its arrays read collectively)."""
    log = []
    bad = WORLD - 1

    def fn():
        c = train.get_context()
        ck = train.get_checkpoint()
        start = 0
        if ck is not None:
            start = int(ck.get_array("step")[0]) + 1
            np.testing.assert_array_equal(ck.get_array("part"), np.full((1, 2), c.get_world_rank()))
        log.append((c.get_attempt(), start))
        for i in range(start, 4):
            ck = Checkpoint.from_arrays({"step": np.array([i])},
                                        sharded={"part": np.full((1, 2), c.get_world_rank())})
            train.report({"i": i}, checkpoint=ck)
            if i == 1 and c.get_attempt() == 0 and c.get_world_rank() == bad:
                raise ValueError("boom on purpose")

    r = fit(fn, store, run_name, run_config=RunConfig(failure_config=FailureConfig(max_failures=1)))
    assert log == [(0, 0), (1, 2)]
    assert r.error is None and r.attempts == 2 and r.metrics["i"] == 3


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_exit_on_one_rank_is_no_preemption(store, run_name, how):
    """sys.exit() or KeyboardInterrupt in the function on one rank: that rank gets it back
    from fit(), the others TrainingFailedError naming it; no retry, and the run is failed,
    not preempted (no exit status 75 anywhere)."""
    bad = WORLD - 1
    calls = []

    def fn():
        calls.append(1)
        train.report({"x": 1})
        if train.get_context().get_world_rank() == bad:
            if how == "exit":
                sys.exit(3)
            raise KeyboardInterrupt
        train.report({"x": 2})

    want = SystemExit if how == "exit" else KeyboardInterrupt
    with pytest.raises(want if RANK == bad else TrainingFailedError) as e:
        fit(fn, store, run_name, run_config=RunConfig(failure_config=FailureConfig(max_failures=2)))
    assert not isinstance(e.value, train.Preempted)
    if RANK == bad and how == "exit":
        assert e.value.code == 3
    if RANK != bad:
        assert f"rank {bad} failed" in str(e.value) and want.__name__ in str(e.value)
    assert len(calls) == 1  # not retried
    r = Result.from_path(os.path.join(store, run_name))
    assert r.error is not None and want.__name__ in str(r.error)
    import json
    with open(os.path.join(store, run_name, "run.json")) as f:
        assert json.load(f)["status"] == "failed"


def test_retries_exhausted(store, run_name):
    bad = 1 if WORLD > 1 else 0

    def fn():
        train.report({"x": 1})
        if train.get_context().get_world_rank() == bad:
            raise KeyError("the missing key")
        train.report({"x": 2})

    with pytest.raises(TrainingFailedError) as e:
        fit(fn, store, run_name, run_config=RunConfig(failure_config=FailureConfig(max_failures=2)))
    text = str(e.value)
    assert f"rank {bad} failed" in text and "Traceback" in text
    assert "KeyError: 'the missing key'" in text and "in fn" in text
    r = Result.from_path(os.path.join(store, run_name))
    assert r.error is not None and "KeyError" in str(r.error)


# ---------------------------------------------------------------- data

def test_dataset_shard(store, run_name, data):
    seen = {}

    def fn():
        s = train.get_dataset_shard("train")
        seen["rows"], seen["shapes"] = s.count(), s.column_shapes
        total = np.zeros(1, np.int64)
        epochs = []
        for epoch in range(2):
            order = []
            for b in s.iter_batches(batch_size=64, shuffle=epoch == 1, seed=5):
                x, y = b["x"], b["y"]
                assert isinstance(x, np.ndarray) and not x.flags.writeable  # a view
                assert x.dtype == np.float32 and x.shape[1:] == (4,) and y.dtype == np.int64
                np.testing.assert_array_equal(x[:, 0], y.astype(np.float32))
                order.extend(y.tolist())
            epochs.append(order)
            total += sum(order)
            # every rank's rows of the epoch: each row at most once over the ranks
            rows = mpitrain.allgather(np.array(order, np.int64)).ravel()
            seen.setdefault("distinct", []).append(len(np.unique(rows)))
        mpitrain.allreduce(total)
        seen["total"] = int(total[0])
        seen["epochs"] = epochs
        n = sum(len(b["y"]) for b in s.iter_batches(batch_size=300, drop_last=True))
        seen["dropped"] = n
        b = next(iter(s.iter_batches(batch_size=10, dtypes={"x": np.float64, "z": np.float16})))
        seen["dt"] = (b["x"].dtype, b["z"].dtype, b["x"].flags.writeable, b["z"].flags.writeable)
        test = train.get_dataset_shard("test")
        seen["test_rows"] = test.count()
        train.report({"x": 1})

    fit(fn, store, run_name, datasets={"train": (data, "/train"), "test": data},
        dataset_config=DataConfig(datasets_to_split=["train"]))
    per = DATA_ROWS // WORLD
    assert seen["rows"] == per and seen["shapes"]["x"] == (per, 4)
    # every row once per epoch (the DATA_ROWS % WORLD rows past an even split are dropped:
    # the last ones in order, any in a shuffled epoch)
    assert seen["distinct"] == [per * WORLD, per * WORLD]
    if DATA_ROWS % WORLD == 0:
        assert seen["total"] == 2 * sum(range(DATA_ROWS))
    else:
        assert seen["total"] <= 2 * sum(range(DATA_ROWS)) - sum(range(per * WORLD, DATA_ROWS))
    assert [len(e) for e in seen["epochs"]] == [per, per]
    assert seen["epochs"][0] == sorted(seen["epochs"][0])  # in order without shuffle
    assert seen["epochs"][1] != seen["epochs"][0]  # shuffled (across the whole dataset)
    assert seen["dropped"] == (per // 300) * 300
    assert seen["dt"] == (np.float64, np.float16, False, True)  # converted in C; copied
    assert seen["test_rows"] == 100  # not split: whole on every rank


def test_one_epoch_at_a_time_and_dtypes_per_call(store, run_name, data):
    """Two iterators of one shard taken in turn: the older raises RuntimeError once the
    newer has started (never rows of the other's epoch); dtypes given to one iter_batches
    call are that epoch's alone, whichever order iterators are made and started in."""
    seen = {}

    def fn():
        s = train.get_dataset_shard("train")
        a, b = s.iter_batches(batch_size=4), s.iter_batches(batch_size=4)
        first = next(a)["y"].tolist()
        second = next(b)["y"].tolist()  # b's epoch starts: a's is over
        try:
            next(a)
            seen["a"] = "went on"
        except RuntimeError as e:
            seen["a"] = str(e)
        seen["b"] = (first, second, next(b)["y"].tolist())
        wide = s.iter_batches(batch_size=4, dtypes={"x": np.float64})
        plain = s.iter_batches(batch_size=4)  # made after, started before
        seen["dt"] = [next(plain)["x"].dtype]
        seen["dt"].append(next(wide)["x"].dtype)
        seen["dt"].append(next(iter(s.iter_batches(batch_size=4)))["x"].dtype)
        seen["stored"] = s.column_dtypes["x"]
        train.report({"x": 1})

    fit(fn, store, run_name, datasets={"train": data})
    assert "ended by a later iter_batches" in seen["a"] and "'train'" in seen["a"]
    first, second, third = seen["b"]
    assert first == second and third == [y + 4 for y in second]  # b's epoch from its start
    assert first == list(range(first[0], first[0] + 4))  # in order, no rows skipped
    assert seen["dt"] == [np.float32, np.float64, np.float32]
    assert seen["stored"] == np.float32


@pytest.mark.parametrize("mode", ["plain", "shuffle", "convert", "torch"])
def test_batch_views_outlive_batch_epoch_and_fit(store, run_name, data, mode):
    """Views kept past the next batch, the next window (the shard streamed in windows), the
    next epoch and the end of the fit still read their own rows: never another batch's
    rows, never freed memory."""
    torch = pytest.importorskip("torch") if mode == "torch" else None
    kept = []

    def check():
        for x, y, y0 in kept:
            if torch is not None and isinstance(x, torch.Tensor):
                x, y = x.numpy(), y.numpy()
            np.testing.assert_array_equal(y, y0)
            np.testing.assert_array_equal(x[:, 0], y0.astype(x.dtype))

    def fn():
        s = train.get_dataset_shard("train")
        kw = dict(batch_size=10, shuffle=mode == "shuffle", seed=3,
                  dtypes={"x": np.float64, "y": np.int32} if mode == "convert" else None)
        it = s.iter_torch_batches if mode == "torch" else s.iter_batches
        for epoch in range(2):
            for i, b in enumerate(it(**kw)):
                if i % 7 == 0:
                    y0 = b["y"].numpy() if torch is not None else b["y"]
                    kept.append((b["x"], b["y"], np.array(y0)))  # the view and a copy
                check()
        held = next(iter(s.iter_batches(batch_size=10)))  # an epoch left unfinished
        kept.append((held["x"], held["y"], held["y"].copy()))
        for b in s.iter_batches(batch_size=20):  # a new layout: the buffers are made again
            pass
        check()
        train.report({"x": 1})

    # 25 bytes a row: windows of 50 rows, so 5 to 20 windows an epoch and the read-ahead runs
    fit(fn, store, run_name, datasets={"train": data},
        dataset_config=DataConfig(memory_limit=25 * 100))
    per = DATA_ROWS // WORLD
    batches = -(-per // 10)
    assert len(kept) == 2 * -(-batches // 7) + 1  # every 7th batch of 2 epochs, and the held one
    check()  # the fit is over and its shard freed: the views still hold their rows


def test_iter_torch_batches(store, run_name, data):
    torch = pytest.importorskip("torch")
    seen = []

    def fn():
        s = train.get_dataset_shard("train")
        for b in s.iter_torch_batches(batch_size=100, dtypes={"y": torch.float32}):
            assert isinstance(b["x"], torch.Tensor) and b["y"].dtype == torch.float32
            seen.append(int(b["x"].shape[0]))
        train.report({"x": 1})

    fit(fn, store, run_name, datasets={"train": data})
    assert sum(seen) == DATA_ROWS // WORLD


def test_missing_dataset_file(store, run_name, tmp_path):
    def fn():
        train.get_dataset_shard("train")

    with pytest.raises(TrainingFailedError, match="nope.h5"):
        fit(fn, store, run_name, datasets={"train": str(tmp_path / "nope.h5")})


# ---------------------------------------------------------------- torch

def test_torch_trainer_process_group(store, run_name):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    seen = {}

    def fn():
        dist.init_process_group("gloo")
        t = torch.ones(2) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        seen["sum"] = t.tolist()
        seen["threads"] = torch.get_num_threads()
        train.report({"x": 1})

    r = train.torch.TorchTrainer(fn, run_config=RunConfig(name=run_name, storage_path=store,
                                                          verbose=0)).fit()
    assert r.error is None
    assert seen["sum"] == [WORLD * (WORLD + 1) / 2] * 2
    if "OMP_NUM_THREADS" not in os.environ:
        assert seen["threads"] >= 1
    assert not dist.is_initialized()  # torn down for the next attempt or fit


# ---------------------------------------------------------------- memory stays flat

def test_ten_thousand_calls_flat_memory(store, run_name, data):
    """10,000 reports, batches and collectives: RSS grows by at most a few MiB (a reference
    leak of a dict, an array or a view per call would show as growth). The count is the
    leak check's at 1 and 2 ranks (every path a rank can take: rank 0's and another's);
    at 3 and 4 ranks, oversubscribed on a busy machine (where every MPI call, raw
    MPI_Allreduce too, waits for the scheduler: a round took 27 ms, 4 minutes in all),
    200 after 100 show the same calls work there."""
    growth = {}
    warm, n = (1000, 10000) if WORLD <= 2 else (100, 200)

    def fn():
        s = train.get_dataset_shard("train")
        a = np.ones(256, np.float32)

        def round_(n):
            done = 0
            while done < n:
                for b in s.iter_batches(batch_size=10):
                    mpitrain.allreduce(a)
                    a[:] = 1
                    train.report({"loss": 0.5, "n": done, "x": float(b["x"][0, 0])})
                    done += 1
                    if done == n:
                        break

        round_(warm)
        before = rss_kib()
        round_(n)
        growth["kib"] = rss_kib() - before

    fit(fn, store, run_name, datasets={"train": data})
    assert growth["kib"] < 8 * 1024, growth
