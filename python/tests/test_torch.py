"""mpitrain.train.torch's data-parallel pieces, run on every rank at once (mpirun -np N
python3 -m pytest, and as one process without a launcher), SPMD like test_api.py:
prepare_model's gradients against torch's DDP (gloo) on the same model and batches, the
models DDP users have (tied weights, unused parameters, BatchNorm buffers, frozen layers),
no_sync, replaced gradients, mismatched models, a rank failing mid-backward, a model that
outlives fit, prepare_data_loader; and (no launcher only) a state_dict checkpoint written
at 2 ranks and restored at 1 and 3."""
import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import mpitrain  # noqa: E402
from mpitrain import train  # noqa: E402
from mpitrain.train import (Checkpoint, FailureConfig, RunConfig, ScalingConfig,  # noqa: E402
                            TrainingFailedError)
from mpitrain.train.torch import (TorchTrainer, get_device, prepare_data_loader,  # noqa: E402
                                  prepare_model)

WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
LIMIT = 180 * float(os.environ.get("MT_TEST_TIMEOUT_SCALE", "1"))


def tfit(fn, store, name, **kw):
    run = kw.pop("run_config", None) or RunConfig()
    run.name, run.storage_path, run.verbose = name, store, 0
    return TorchTrainer(fn, run_config=run, **kw).fit()


# ---------------------------------------------------------------- models

class Tied(nn.Module):
    """An embedding and an output layer sharing one weight (a language model's tying)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 8)
        self.mid = nn.Linear(8, 8)
        self.out = nn.Linear(8, 12, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        idx = (x[:, 0].abs() * 100).long() % 12
        return self.out(torch.tanh(self.mid(self.emb(idx) + x[:, :8])))


class Unused(nn.Module):
    """A head used by no rank, and one head per rank parity (unused on half the ranks)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(10, 16)
        self.even = nn.Linear(16, 3)
        self.odd = nn.Linear(16, 3)
        self.never = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return (self.even if dist.get_rank() % 2 == 0 else self.odd)(h)


class BN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 5 * 2, 3)

    def forward(self, x):
        x = x[:, :10].reshape(-1, 1, 5, 2)
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def make(kind):
    torch.manual_seed(1234 + RANK)  # a different start on every rank: the broadcast's job
    if kind == "mlp":
        m = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                          nn.Linear(16, 3))
    elif kind == "tied":
        m = Tied()
    elif kind == "unused":
        m = Unused()
    elif kind == "batchnorm":
        m = BN()
    elif kind == "frozen":
        m = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
        for p in m[0].parameters():
            p.requires_grad_(False)
    return m


def batch(step, n=8, classes=3):
    g = torch.Generator().manual_seed(1000 * step + RANK)
    x = torch.randn(n, 10, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def grads(model):
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for p in model.parameters()]


def same_on_every_rank(tensors):
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    every = mpitrain.allgather(flat)
    for r in range(1, every.shape[0]):
        assert torch.equal(every[r], every[0]), f"rank {r} differs from rank 0"


def close(a, b, what):
    # float32 rounding: the sums run in another order than gloo's
    torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-7, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------- against DDP

@pytest.mark.parametrize("kind", ["mlp", "tied", "unused", "batchnorm", "frozen"])
def test_gradients_equal_ddp(store, run_name, kind):
    """After each backward the gradients are DDP's (gloo) to float32 rounding; after the
    steps the parameters and buffers are the same on every rank, and DDP's."""
    out = {}

    def fn():
        dist.init_process_group("gloo")
        base = make(kind)
        ref = DDP(copy.deepcopy(base), find_unused_parameters=(kind == "unused"))
        ours = prepare_model(base)
        assert ours.module is base
        opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        opt = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
        for p, q in zip(ours.module.parameters(), ref.module.parameters()):
            assert torch.equal(p, q)  # both broadcast from rank 0
        for step in range(4):
            x, y = batch(step, classes=12 if kind == "tied" else 3)
            for m, o in ((ref, opt_ref), (ours, opt)):
                o.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
            for i, (a, b) in enumerate(zip(grads(ours.module), grads(ref.module))):
                close(a, b, f"{kind} step {step} parameter {i}")
            opt_ref.step()
            opt.step()
            if step == 1:  # an evaluation between steps: DDP's buffer rule after it
                for m in (ref, ours):
                    m.eval()
                    with torch.no_grad():
                        m(x)
                    m.train()
        for (n, p), q in zip(ours.module.named_parameters(), ref.module.parameters()):
            close(p.detach(), q.detach(), f"{kind} parameter {n} after the steps")
        for (n, b), c in zip(ours.module.named_buffers(), ref.module.buffers()):
            close(b.float(), c.float(), f"{kind} buffer {n}")
        same_on_every_rank(list(ours.module.parameters()))
        out["algo"] = ours.fusion_algo
        train.report({"ok": 1})

    r = tfit(fn, store, run_name)
    assert r.error is None
    assert out["algo"] == ("none" if WORLD == 1 else "shm")


@pytest.mark.parametrize("kind", ["mlp", "batchnorm"])
def test_no_sync_and_replaced_gradients(store, run_name, kind):
    """Two backward passes under no_sync then one outside average the sum (DDP's, buffers
    included); a .grad set to None (zero_grad(set_to_none=True)) or replaced is copied into
    its view, and the .grads are views of the block again after the backward."""
    def fn():
        dist.init_process_group("gloo")
        base = make(kind)
        ref = DDP(copy.deepcopy(base))
        ours = prepare_model(base)
        s = ours._synced
        for step in range(3):
            for m in (ref, ours):
                m.zero_grad(set_to_none=True)
                with m.no_sync():
                    for k in range(2):
                        x, y = batch(10 * step + k)
                        nn.functional.cross_entropy(m(x), y).backward()
                if m is ours and step == 1:  # replaced by the user, outside of backward
                    for p in m.parameters():
                        p.grad = p.grad.clone()
                x, y = batch(10 * step + 2)
                nn.functional.cross_entropy(m(x), y).backward()
            for i, (a, b) in enumerate(zip(grads(ours.module), grads(ref.module))):
                close(a, b, f"step {step} parameter {i}")
            for p in ours.parameters():
                assert s.lo <= p.grad.data_ptr() < s.hi, "the .grad is not a view of the block"
        for (n, b), c in zip(ours.module.named_buffers(), ref.module.buffers()):
            close(b.float(), c.float(), f"buffer {n}")
        train.report({"ok": 1})

    assert tfit(fn, store, run_name).error is None


# ---------------------------------------------------------------- refusals and failures

@pytest.mark.skipif(WORLD < 2, reason="needs 2 ranks")
@pytest.mark.parametrize("how, text", [
    ("shape", "rank 1 has '4.weight' float32 [3, 32]"),
    ("count", "counts rank 0: 6, rank 1: 8"),
    ("dtype", "float64"),
    ("frozen", "'0.weight'"),
])
def test_models_that_differ_between_ranks(store, run_name, how, text):
    """Rank 1's model differs (a shape, a layer more, a type, a layer frozen): every rank
    fails at prepare_model naming the parameter, no hang."""
    def fn():
        m = make("mlp")
        if RANK == 1:
            if how == "shape":
                m[4] = nn.Linear(32, 3)
                m[2] = nn.Linear(32, 32)
            elif how == "count":
                m.append(nn.Linear(3, 3))
            elif how == "dtype":
                m[4].double()
            elif how == "frozen":
                m[0].weight.requires_grad_(False)
        prepare_model(m)

    with pytest.raises(TrainingFailedError) as e:
        tfit(fn, store, run_name)
    msg = str(e.value)
    assert "MismatchError" in msg and "trainable parameters differ between ranks" in msg, msg
    assert text in msg, msg


@pytest.mark.parametrize("how, text", [
    ("double", "parameter '4.bias' is torch.float64"),
    ("strided", "parameter '0.weight' is not contiguous"),
])
def test_parameters_refused_by_name(store, run_name, how, text):
    def fn():
        m = make("mlp")
        if how == "double":
            m[4].double()
        else:
            m[0].weight.data = m[0].weight.data.t().contiguous().t()
        prepare_model(m)

    with pytest.raises(TrainingFailedError) as e:
        tfit(fn, store, run_name)
    assert text in str(e.value), str(e.value)


def test_prepared_twice_refused(store, run_name):
    """A model (or a part of one) prepared twice in one function is refused by name; the
    first preparation keeps working."""
    def fn():
        m = make("mlp")
        ours = prepare_model(m)
        with pytest.raises(ValueError, match="parameter '1.bias' belongs to a model prepared"):
            prepare_model(nn.Sequential(nn.Linear(3, 3), m[2]))
        x, y = batch(0)
        nn.functional.cross_entropy(ours(x), y).backward()
        same_on_every_rank([p.grad for p in ours.parameters()])
        train.report({"ok": 1})

    assert tfit(fn, store, run_name).error is None


def test_prepare_model_outside_torch_trainer(store, run_name):
    def fn():
        prepare_model(make("mlp"))

    r = None
    with pytest.raises(TrainingFailedError) as e:
        r = train.DataParallelTrainer(fn, run_config=RunConfig(
            name=run_name, storage_path=store, verbose=0)).fit()
    assert r is None and "inside the training function of" in str(e.value)
    with pytest.raises(RuntimeError, match="only valid inside the training function"):
        prepare_model(make("mlp"))


class _Boom(torch.autograd.Function):
    """Identity forward; its backward raises on the chosen rank at the chosen step."""

    @staticmethod
    def forward(ctx, x, fail):
        ctx.fail = fail
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.fail:
            raise ValueError("boom in backward on purpose")
        return g, None


@pytest.mark.parametrize("at_step", [0, 2])
def test_rank_raising_mid_backward(store, run_name, at_step):
    """Rank 1 (the only rank at 1) raises in the middle of a backward, after the last
    layer's gradients were handed to the library: every rank's fit fails with rank 1's
    error, nobody hangs, and the retry trains to the end."""
    bad = 1 if WORLD > 1 else 0
    seen = []

    def fn():
        m = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 3))
        ours = prepare_model(m, bucket_bytes=1024)  # several buckets: some handed over
        opt = torch.optim.SGD(ours.parameters(), lr=0.1)
        attempt = train.get_context().get_attempt()
        for step in range(4):
            x, y = batch(step)
            opt.zero_grad()
            h = ours.module[1](ours.module[0](x))
            h = _Boom.apply(h, attempt == 0 and RANK == bad and step == at_step)
            loss = nn.functional.cross_entropy(ours.module[4](ours.module[3](ours.module[2](h))), y)
            loss.backward()
            opt.step()
        seen.append(attempt)
        train.report({"attempt": attempt})

    with pytest.raises(TrainingFailedError) as e:
        tfit(fn, store, run_name)
    msg = str(e.value)
    assert f"rank {bad} failed" in msg and "boom in backward on purpose" in msg, msg
    r = tfit(fn, store, run_name + "-retry",
             run_config=RunConfig(failure_config=FailureConfig(max_failures=1)))
    assert r.error is None and r.metrics["attempt"] == 1 and seen == [1]


# ---------------------------------------------------------------- lifetime

def test_model_outlives_fit_and_a_second_fit(store, run_name):
    """After fit the model's .grads (and a .grad the user kept) hold the last averaged
    values in memory of their own, the hooks are gone (a local backward and step work);
    a second fit prepares the same model again and trains it."""
    model = make("mlp")
    kept = {}

    def fn():
        ours = prepare_model(model)
        s = ours._synced
        opt = torch.optim.SGD(ours.parameters(), lr=0.1)
        for step in range(3):
            x, y = batch(step)
            opt.zero_grad()
            nn.functional.cross_entropy(ours(x), y).backward()
            opt.step()
        kept["grad"] = model[0].weight.grad  # a view of the block, held past fit
        kept["slice"] = model[4].bias.grad[1:]
        kept["values"] = [p.grad.clone() for p in model.parameters()]
        kept["range"] = (s.lo, s.hi)
        train.report({"ok": 1})

    for fit_no in range(2):
        assert tfit(fn, store, f"{run_name}-{fit_no}").error is None
        lo, hi = kept["range"]
        for p, v in zip(model.parameters(), kept["values"]):
            assert not lo <= p.grad.data_ptr() < hi, "a .grad still over the freed block"
            assert torch.equal(p.grad, v)
        for t in (kept["grad"], kept["slice"]):
            assert not lo <= t.data_ptr() < hi, "a kept tensor still over the freed block"
        assert torch.equal(kept["grad"], kept["values"][0])
        assert torch.equal(kept["slice"], kept["values"][5][1:])
        kept["slice"] += 1.0  # writable memory of its own
        x, y = batch(99)
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # no hook, no fusion
        torch.optim.SGD(model.parameters(), lr=0.1).step()


# ---------------------------------------------------------------- data loaders

def test_prepare_data_loader(store, run_name):
    """Each rank gets its part (together: every row, the short one padded), the same
    number of batches on every rank, a new order every epoch (by itself, or by set_epoch)."""
    from torch.utils.data import DataLoader, TensorDataset

    n = 103
    out = {}

    def fn():
        ds = TensorDataset(torch.arange(n))
        loader = prepare_data_loader(DataLoader(ds, batch_size=8, shuffle=True))
        fixed = prepare_data_loader(DataLoader(ds, batch_size=8))
        epochs = [torch.cat([b[0] for b in loader]) for _ in range(2)]
        loader.sampler.set_epoch(0)
        again = torch.cat([b[0] for b in loader])
        assert torch.equal(again, epochs[0])
        assert not torch.equal(epochs[0], epochs[1]) or n // WORLD < 3
        nb = mpitrain.allgather(np.array([len(loader)], dtype=np.int64))
        assert (nb == nb[0]).all()
        part = epochs[0]
        every = mpitrain.allgather(part)
        assert set(every.reshape(-1).tolist()) == set(range(n))
        assert every.numel() == -(-n // WORLD) * WORLD
        order = torch.cat([b[0] for b in fixed])
        total = -(-n // WORLD) * WORLD
        idx = list(range(n)) + list(range(total - n))  # the tail padded from the start
        assert order.tolist() == idx[RANK:total:WORLD]
        out["device"] = get_device()
        train.report({"ok": 1})

    assert tfit(fn, store, run_name).error is None
    assert out["device"] == torch.device("cpu")


def test_prepare_data_loader_refusals(store, run_name):
    from torch.utils.data import DataLoader, IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(4))

    def fn():
        with pytest.raises(ValueError, match="IterableDataset"):
            prepare_data_loader(DataLoader(Stream(), batch_size=2))
        with pytest.raises(TypeError, match="DataLoader is needed"):
            prepare_data_loader([1, 2])
        train.report({"ok": 1})

    assert tfit(fn, store, run_name).error is None


# ---------------------------------------------------------------- checkpoints, world sizes

CKPT = textwrap.dedent("""
    import os, sys, torch, torch.nn as nn
    from mpitrain import train
    from mpitrain.train import Checkpoint, RunConfig, ScalingConfig
    from mpitrain.train.torch import TorchTrainer, prepare_model

    MODE, N, NAME, STORE, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

    def fn():
        torch.manual_seed(7 + train.get_context().get_world_rank())
        m = prepare_model(nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        ck = train.get_checkpoint()
        if ck is not None:
            with ck.as_directory() as d:
                m.module.load_state_dict(torch.load(os.path.join(d, "model.pt")))
        rank = train.get_context().get_world_rank()
        for step in range(3 if MODE == "save" else 0):
            g = torch.Generator().manual_seed(step * 10 + rank)
            opt.zero_grad()
            m(torch.randn(16, 6, generator=g)).square().mean().backward()
            opt.step()
        d = os.path.join(OUT, f"ck{rank}")
        os.makedirs(d, exist_ok=True)
        torch.save(m.module.state_dict(), os.path.join(d, "model.pt"))
        if rank == 0:
            print("WORLD", train.get_context().get_world_size(), flush=True)
        train.report({"w": float(m.module[0].weight.sum())},
                     checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)

    resume = None
    if MODE == "restore":
        resume = Checkpoint.from_directory(os.path.join(STORE, sys.argv[6]))
    r = TorchTrainer(fn, scaling_config=ScalingConfig(num_workers=N),
                     run_config=RunConfig(name=NAME, storage_path=STORE, verbose=0),
                     resume_from_checkpoint=resume).fit()
    print("W", repr(r.metrics["w"]), r.checkpoint.path, flush=True)
""")


@pytest.mark.skipif(os.environ.get("MT_PYTEST_MODE") != "plain", reason="runs its own jobs")
def test_state_dict_checkpoint_at_another_world_size(store, run_name, tmp_path):
    """A state_dict saved at 2 ranks (rank 0's checkpoint) is restored at 1 and 3 ranks:
    every rank starts from it (the broadcast after the load changes nothing)."""
    script = tmp_path / "ck.py"
    script.write_text(CKPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env["OMP_NUM_THREADS"] = "1"

    def run(mode, n, name, *extra):
        out = tmp_path / name
        out.mkdir()
        p = subprocess.run([sys.executable, str(script), mode, str(n), name, store, str(out),
                            *extra], env=env, capture_output=True, text=True, timeout=LIMIT)
        assert p.returncode == 0, p.stdout + p.stderr
        w = [line.split() for line in p.stdout.splitlines() if line.startswith("W ")]
        worlds = [line for line in p.stdout.splitlines() if line.startswith("WORLD ")]
        assert worlds == [f"WORLD {n}"], p.stdout  # the first process's lines only
        return float(w[-1][1]), w[-1][2]

    saved, path = run("save", 2, run_name + "-save")
    ck_dir = os.path.relpath(path, store)
    for n in (1, 3):
        got, _ = run("restore", n, f"{run_name}-at{n}", ck_dir)
        assert got == saved, (n, got, saved)
