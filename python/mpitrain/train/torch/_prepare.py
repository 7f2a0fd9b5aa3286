"""prepare_model: a torch model's gradients averaged across ranks by the C fusion (buckets,
a communication thread, shared memory on a node), overlapped with backward, without a
torch.distributed process group and without linking libtorch.

How (torch's own DDP with gradient_as_bucket_view, and Horovod's hook, over mt_fusion):

- parameters and buffers are broadcast from rank 0;
- every trainable parameter's .grad is a view of one float32 block from mt_fusion_alloc,
  exported by mpitrain._core.Fusion through the buffer protocol (torch.frombuffer): no
  copy in or out, the buckets are averaged in the block itself. The block is laid out last
  layer first (the reverse of model.parameters()), each tensor 64-byte aligned, and the
  tensors are registered in that order, so that the buckets fill in the order backward
  produces gradients;
- a hook on each parameter's gradient accumulation (its AccumulateGrad node, which torch
  1.13 has no public hook for, as Horovod does; register_post_accumulate_grad_hook where
  torch has it) marks it ready: a bucket whose tensors are all ready is averaged by the
  library's thread while backward goes on;
- the first hook of a backward queues a callback on the autograd engine (as DDP does) that
  runs when backward ends: it marks ready what backward did not reach (an unused
  parameter contributes its .grad as it is, zeros after zero_grad, or zeros for None) and
  waits; so ``loss.backward(); opt.step()`` sees averaged gradients;
- a .grad the user replaced (or set to None: zero_grad(set_to_none=True)) is copied into
  its view and the view put back;
- ``no_sync()`` skips the averaging (gradients accumulate locally in the views) until the
  first backward outside it, as DDP's;
- the ranks' parameter lists are compared first (names, shapes, types, devices, layouts):
  a difference is MismatchError on every rank naming the parameter, never a hang;
  a parameter that is not float32, not on the CPU or not contiguous is refused by name.

Lifetime: the block belongs to the fusion, which is destroyed (collectively: it is how a
rank that failed mid-backward meets the others' wait, so nothing hangs) when the attempt's
training function ends. Before that every .grad is copied out of the block and re-pointed,
the hooks are removed, and any other tensor still over the block (a ``g = p.grad`` kept
by the user) is moved onto a copy, so that a model (or a tensor) that outlives fit, or a
second fit, never sees freed memory. The model is then an ordinary module again.
"""
import contextlib
import gc
import sys
import warnings
import zlib
from typing import List, Optional

import numpy as np
import torch

from ... import _collectives
from ... import _core
from ..._core import MismatchError

_ALIGN = 16  # floats: 64 bytes
_COMPRESSION = {None: 0, "none": 0, "fp16": 1, "bf16": 2}
_ALGO = {None: 0, "auto": 0, "flat": 1, "shm": 2, "hier": 3}
_BCAST_DTYPES = {torch.uint8, torch.int32, torch.int64, torch.float32, torch.float64}

# the fusions of this attempt, in creation order (the same on every rank): closed together
# when the training function ends (TorchTrainer's tear-down)
_live: List["_Synced"] = []


def _word(table, value, what):
    key = value.lower() if isinstance(value, str) else value
    if key not in table:
        words = ", ".join(k for k in table if k)
        raise ValueError(f"prepare_model: {what} must be one of {words} (got {value!r})")
    return table[key]


def _describe(name, p) -> str:
    layout = "contiguous" if p.is_contiguous() else f"strides {tuple(p.stride())}"
    return f"{name!r} {str(p.dtype).replace('torch.', '')} {list(p.shape)} {p.device} {layout}"


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def _agree_parameters(descs: List[str]) -> None:
    """Collective: every rank the same list of trainable parameters, else MismatchError on
    every rank naming the first that differs."""
    n = len(descs)
    whole = np.array([n, zlib.crc32("\n".join(descs).encode())], dtype=np.int64)
    seen = _collectives.allgather(whole)
    if (seen == seen[0]).all():
        return
    most = int(seen[:, 0].max())
    mine = np.full(most, -1, dtype=np.int64)
    mine[:n] = [_crc(d) for d in descs]
    every = _collectives.allgather(mine)
    differ = np.nonzero((every != every[0]).any(axis=0))[0]
    i = int(differ[0]) if len(differ) else min(int(seen[:, 0].min()), most - 1)
    text = np.zeros(400, dtype=np.uint8)
    d = (descs[i] if i < n else "no parameter").encode()[:399]
    text[:len(d)] = np.frombuffer(d, dtype=np.uint8)
    texts = _collectives.allgather(text)
    said = [bytes(t).rstrip(b"\0").decode(errors="replace") for t in texts]
    counts = ", ".join(f"rank {r}: {int(c)}" for r, c in enumerate(seen[:, 0]))
    have = "; ".join(f"rank {r} has {s}" for r, s in enumerate(said))
    raise MismatchError(f"prepare_model: the model's trainable parameters differ between ranks "
                        f"(counts {counts}); trainable parameter #{i} (last layer first): "
                        f"{have}")


def _broadcast_tensor(t: torch.Tensor) -> None:
    """Collective: rank 0's values of t into every rank's t (in place)."""
    d = t.detach()
    if d.numel() == 0:
        return
    if not d.is_contiguous():
        c = d.contiguous()
        _broadcast_tensor(c)
        d.copy_(c)
        return
    if d.dtype not in _BCAST_DTYPES:  # bool, float16, bfloat16, ...: their bytes
        d = d.view(-1).view(torch.uint8)
    _collectives.broadcast(d, 0)


def _params(module) -> list:
    """(name, parameter) of every parameter once (tied ones once), registration order."""
    out, seen = [], set()
    for name, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def _buffers(module) -> list:
    out, seen = [], set()
    for name, b in module.named_buffers():
        if b is not None and id(b) not in seen:
            seen.add(id(b))
            out.append((name, b))
    return out


def _accumulator(p):
    """p's AccumulateGrad node (Horovod's way: the graph holds it weakly, keep it)."""
    return p.expand_as(p).grad_fn.next_functions[0][0]


class _Synced:
    """One prepared model's fusion, views and hooks, for one attempt."""

    def __init__(self, module, bucket_bytes, compression, algo, broadcast_buffers):
        self.module = module
        self.fusion = None
        self.base = None
        self.params = []    # trainable, last layer first
        self.views = []
        self.index = []     # their fusion indices
        self.ready = []
        self.handles = []
        self.accs = []
        self.queued = False
        self.no_sync = False
        self.active = False
        self.buffers = []   # broadcast before a forward (DDP's way)
        self.forward_sync = True  # the previous forward had grad on and was not in no_sync
        self.lo = self.hi = 0
        named = _params(module)
        trainable = [(n, p) for n, p in reversed(named) if p.requires_grad]
        taken = {id(p) for s in _live for p in s.params}
        for n, p in trainable:  # the same program on every rank: refused on every rank
            if id(p) in taken:
                raise ValueError(f"prepare_model: parameter {n!r} belongs to a model prepared "
                                 f"already in this training function (prepare each model "
                                 f"once; its gradients would be averaged twice)")
        _live.append(self)  # closed at the attempt's end even if the set-up fails below
        _agree_parameters([_describe(n, p) for n, p in trainable])
        for n, p in trainable:  # the same on every rank now: so is a refusal
            if p.dtype != torch.float32:
                raise TypeError(f"prepare_model: parameter {n!r} is {p.dtype}; the fused "
                                f"averaging takes float32 parameters (convert the model with "
                                f".float(), or freeze it: requires_grad_(False))")
            if p.device.type != "cpu":
                raise ValueError(f"prepare_model: parameter {n!r} is on {p.device}; mpitrain "
                                 f"averages CPU tensors (model.to('cpu'))")
            if not p.is_contiguous():
                raise ValueError(f"prepare_model: parameter {n!r} is not contiguous (strides "
                                 f"{tuple(p.stride())}); make it contiguous before "
                                 f"prepare_model (p.data = p.data.contiguous())")
            if p.is_sparse:
                raise ValueError(f"prepare_model: parameter {n!r} is sparse")
        with torch.no_grad():
            for _, p in named:
                _broadcast_tensor(p)
            for _, b in _buffers(module):
                _broadcast_tensor(b)
        if broadcast_buffers:
            self.buffers = [b for _, b in _buffers(module)]
        self.fusion = _core.Fusion(bucket_bytes, compression, algo)
        offsets, total = [], 0
        for _, p in trainable:
            offsets.append(total)
            total += (p.numel() + _ALIGN - 1) // _ALIGN * _ALIGN
        self.fusion.alloc(max(total, 1))
        self.base = torch.frombuffer(self.fusion, dtype=torch.float32)
        self.lo = self.base.data_ptr()
        self.hi = self.lo + self.base.numel() * 4
        for (n, p), off in zip(trainable, offsets):
            v = self.base[off:off + p.numel()].view(p.shape)
            if p.grad is not None:
                v.copy_(p.grad)
            p.grad = v
            self.params.append(p)
            self.views.append(v)
            self.index.append(self.fusion.add(off, p.numel()))
        self.ready = [False] * len(self.params)
        for k, p in enumerate(self.params):
            self._hook(k, p)
        # the registration check now, while every rank is here (and the first step's
        # ready stays local): averages the block, zeros unless .grads were set before
        self.fusion.wait()
        self.active = True

    def _hook(self, k, p):
        v, i, ready = self.views[k], self.index[k], self.ready
        mark = self.fusion.ready
        queue = torch.autograd.Variable._execution_engine.queue_callback

        def hook(*_):  # the hot path: a few attribute reads and one C call
            if self.no_sync or not self.active:
                return
            if not self.queued:
                self.queued = True
                queue(self._finish)
            if p.grad is not v:  # the same tensor object while nothing replaced it
                self._put_back(k)
            ready[k] = True
            mark(i)

        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            self.handles.append(p.register_post_accumulate_grad_hook(lambda _p: hook()))
        else:
            acc = _accumulator(p)
            self.handles.append(acc.register_hook(hook))
            self.accs.append(acc)

    def _put_back(self, k):
        p, v = self.params[k], self.views[k]
        g = p.grad
        if g is None:
            v.zero_()
            p.grad = v
        elif g.data_ptr() != v.data_ptr() or g.shape != v.shape or g.stride() != v.stride():
            v.copy_(g)  # replaced by the user or by zero_grad(set_to_none=True)
            p.grad = v

    def _finish(self):
        """Backward's end (the engine's queued callback): the rest ready, then the wait."""
        try:
            for k in range(len(self.params)):
                if not self.ready[k]:  # unused in this backward: its .grad as it is
                    self._put_back(k)
                    self.fusion.ready(self.index[k])
            self.fusion.wait()
        finally:
            self.queued = False
            self.ready[:] = [False] * len(self.ready)  # in place: the hooks hold it

    def sync_buffers(self):
        """Collective: rank 0's buffers on every rank."""
        with torch.no_grad():
            for b in self.buffers:
                _broadcast_tensor(b)

    def close(self):
        """Collective (every rank, the attempt's end): .grads copied out of the block, the
        hooks removed, tensors left over the block moved onto a copy, the fusion closed."""
        self.active = False
        for h in self.handles:
            h.remove()
        self.handles, self.accs = [], []
        if self.fusion is None:
            return
        with torch.no_grad():
            for p in self.params:
                g = p.grad
                if g is not None and self.lo <= g.data_ptr() < self.hi:
                    p.grad = g.clone()
            g = None
            copy = self.base.clone() if self.base is not None else None
        ptr = self.base.data_ptr() if self.base is not None else 0
        self.views, self.params, self.base = [], [], None
        # references now: self.fusion's and getrefcount's; one more is the storage of
        # tensors over the block that the user still holds (`g = p.grad` kept)
        if copy is not None and sys.getrefcount(self.fusion) > 2:
            _move_off(ptr, copy)
        self.fusion.close()
        self.fusion = None
        self.module = None
        self.buffers = []


def _move_off(ptr: int, copy: torch.Tensor) -> None:
    """Every tensor whose storage is the block's set onto one copy of the block, at its
    own offset, size and strides: the views keep their values and their sharing."""
    storage = copy.storage()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on deprecated objects (dist.reduce_op)
        for obj in gc.get_objects():
            if not isinstance(obj, torch.Tensor):
                continue
            try:
                on_block = (obj.device.type == "cpu" and not obj.is_sparse and
                            obj.storage().data_ptr() == ptr)
            except (RuntimeError, NotImplementedError):  # a tensor without a storage
                continue
            if on_block:
                obj.set_(storage, obj.storage_offset(), obj.size(), obj.stride())


def close_all() -> None:
    """Collective: every prepared model of this attempt released (TorchTrainer's
    tear-down, on every rank, in the order they were prepared)."""
    global _live
    live, _live = _live, []
    for s in live:
        s.close()


class DistributedModel(torch.nn.Module):
    """What prepare_model returns: the model (``.module``) whose gradients are averaged
    across ranks during backward. ``forward`` is the module's; ``no_sync()`` as DDP's."""

    def __init__(self, module, synced):
        super().__init__()
        self.module = module
        object.__setattr__(self, "_synced", synced)

    def forward(self, *args, **kwargs):
        s = self._synced
        if s.buffers and s.active:  # DDP's rule: when the previous forward synchronised
            if s.forward_sync:
                s.sync_buffers()
            s.forward_sync = torch.is_grad_enabled() and not s.no_sync
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally; the first one outside
        averages the sum."""
        s = self._synced
        old, s.no_sync = s.no_sync, True
        try:
            yield
        finally:
            s.no_sync = old

    @property
    def fusion_algo(self) -> Optional[str]:
        """The C fusion's algorithm ("shm", "mpi", "hier", "none"), None after fit."""
        f = self._synced.fusion
        return f.algo if f is not None else None


def prepare_model(model, move_to_device=True, parallel_strategy="ddp",
                  parallel_strategy_kwargs=None, *, bucket_bytes=None, compression=None,
                  algo=None, broadcast_buffers=True):
    """Collective: ``model`` ready for data-parallel training (Ray's prepare_model).

    Every rank calls it with the same model architecture, inside the training function of
    TorchTrainer.fit(). Returns a DistributedModel (``.module`` is ``model``): call it as
    the model; ``loss.backward(); opt.step()`` then steps with gradients averaged over
    every rank. ``bucket_bytes`` (default: MT_FUSION_BYTES or 25 MiB), ``compression``
    ("none", "fp16", "bf16"; default MT_FUSION_COMPRESS or none) and ``algo`` ("auto",
    "flat", "shm", "hier"; default MT_FUSION_ALGO or auto) are the C fusion's options.
    ``broadcast_buffers``: rank 0's buffers (BatchNorm's running statistics) copied to every
    rank before a forward, as DDP does (when the previous forward ran with grad enabled and
    outside no_sync: collective then). ``parallel_strategy_kwargs`` may hold
    DDP's ``bucket_cap_mb`` and ``broadcast_buffers``; other DDP options are accepted and
    need nothing here (unused parameters are always handled).
    """
    from ... import train as _train

    _train._session._session("torch.prepare_model")
    from . import TorchTrainer

    trainer = _train._session._current.trainer
    if not isinstance(trainer, TorchTrainer):
        raise RuntimeError("prepare_model: call it inside the training function of "
                           "mpitrain.train.torch.TorchTrainer (it releases the model's "
                           "averaging when the function ends)")
    if parallel_strategy not in ("ddp", None):
        raise ValueError(f"prepare_model: parallel_strategy {parallel_strategy!r} is not "
                         f"supported (only 'ddp': data parallel)")
    kw = dict(parallel_strategy_kwargs or {})
    if bucket_bytes is None and kw.get("bucket_cap_mb") is not None:
        bucket_bytes = int(float(kw["bucket_cap_mb"]) * 1024 * 1024)
    if "broadcast_buffers" in kw:
        broadcast_buffers = bool(kw["broadcast_buffers"])
    if bucket_bytes is not None and (not isinstance(bucket_bytes, int) or bucket_bytes < 0):
        raise ValueError(f"prepare_model: bucket_bytes must be an int >= 0 (got {bucket_bytes!r})")
    comp = _word(_COMPRESSION, compression, "compression")
    alg = _word(_ALGO, algo, "algo")
    if isinstance(model, DistributedModel):
        model = model.module
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"prepare_model: model must be a torch.nn.Module (got "
                        f"{type(model).__name__})")
    if move_to_device:
        model = model.to(get_device())
    synced = _Synced(model, bucket_bytes or 0, comp, alg, broadcast_buffers)
    return DistributedModel(model, synced)


def get_device() -> torch.device:
    """This worker's device: the CPU (mpitrain averages CPU tensors)."""
    return torch.device("cpu")
