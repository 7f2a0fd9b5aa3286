"""Collectives on numpy arrays and torch CPU tensors, in place, inside a training function.

Every rank calls the same collectives in the same order with arrays of the same size, type
and shape; otherwise every rank raises ``MismatchError`` naming the calls, shapes included
(never a hang). The shape travels in the call's one agreement: no extra collective.
The array's memory is used as it is (no copy): it must be C-contiguous. Each call releases
the GIL while it waits.

    a = np.full(4, float(train.get_context().get_world_rank()), dtype=np.float32)
    mpitrain.allreduce(a, op="mean")          # a now holds the mean over ranks
"""
import numpy as np

from . import _core

_OPS = {"sum": 0, "mean": 1, "min": 2, "max": 3}


def _buffer(a, what):
    """The object whose buffer the C layer uses: the array itself, or a torch tensor's
    numpy view (same memory)."""
    if isinstance(a, np.ndarray):
        if not a.flags.c_contiguous:
            raise ValueError(f"{what}: the array is not C-contiguous (use np.ascontiguousarray)")
        return a
    mod = type(a).__module__ or ""
    if mod.startswith("torch"):
        if a.device.type != "cpu":
            raise ValueError(f"{what}: the tensor is on {a.device}; only CPU tensors are supported")
        if not a.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (use .contiguous())")
        return a.detach().numpy()
    return a


def _op(op):
    code = _OPS.get(op) if isinstance(op, str) else None  # the common case, first
    if code is not None:
        return code
    key = str(op).lower().rsplit(".", 1)[-1]  # "sum", "SUM", ReduceOp.SUM
    if key not in _OPS:
        raise ValueError(f"allreduce: op must be one of sum, mean, min, max (got {op!r})")
    return _OPS[key]


def _checked(fn, *args):
    """fn(*args), or this rank's argument error carried to every rank (the others raise
    PeerError quoting it, none waits for this one), then raised here."""
    try:
        return fn(*args)
    except Exception as e:
        _core.fail_collective(e)
        raise


def allreduce(a, op="sum"):
    """Collective. Reduce ``a`` over every rank in place (sum, mean, min or max) and return
    it. ``mean`` of integers truncates."""
    buf, code = _checked(lambda: (_buffer(a, "allreduce"), _op(op)))
    _core.allreduce(buf, code)
    return a


def broadcast(a, root=0):
    """Collective. Copy rank ``root``'s ``a`` into every rank's ``a`` (in place); returns a."""
    buf, r = _checked(lambda: (_buffer(a, "broadcast"), int(root)))
    _core.broadcast(buf, r)
    return a


def allgather(a, out=None):
    """Collective. Every rank's ``a``, in rank order: ``out`` (shape ``(world_size, *a.shape)``,
    allocated when None) is filled and returned."""
    def prepare(out):
        send = _buffer(a, "allgather")
        if out is None:
            shape = (_core.world_size(),) + tuple(a.shape)
            if send is a:
                out = np.empty(shape, dtype=np.asarray(a).dtype)
            else:  # a torch tensor: a tensor back
                import torch

                out = torch.empty(shape, dtype=a.dtype)
        return send, out, _buffer(out, "allgather (out)")

    send, out, recv = _checked(prepare, out)
    _core.allgather(send, recv)
    return out


def barrier():
    """Collective. Wait until every rank is here."""
    _core.barrier()
