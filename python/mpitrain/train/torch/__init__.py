"""mpitrain.train.torch: TorchTrainer (Ray's), DataParallelTrainer plus torch's set-up on
every worker, every attempt:

- MASTER_ADDR and MASTER_PORT agreed by every rank (rank 0's address and a free port), so
  that ``torch.distributed.init_process_group("gloo")`` works inside the function (RANK,
  WORLD_SIZE, LOCAL_RANK come from the library); a process group left open is destroyed
  when the function ends, so that a retry can make a new one;
- torch's thread count set to the CPUs assigned to the worker
  (train.get_context().get_num_cpus()), unless the user set OMP_NUM_THREADS.

and the data-parallel pieces of Ray's train.torch, over the C library (torch is imported
when they are first used):

- prepare_model(model): the model's gradients averaged across ranks during backward by the
  C fusion (_prepare.py), no process group needed; released when the function ends;
- prepare_data_loader(loader): this rank's part of a DataLoader's dataset (_loader.py);
- get_device(): the CPU.
"""
import os
import socket

import numpy as np

from ... import _collectives
from ... import _core
from .._trainer import DataParallelTrainer

__all__ = ["TorchTrainer", "TorchConfig", "prepare_model", "prepare_data_loader", "get_device",
           "DistributedModel", "RankSampler"]

_LAZY = {"prepare_model": "_prepare", "get_device": "_prepare", "DistributedModel": "_prepare",
         "prepare_data_loader": "_loader", "RankSampler": "_loader"}


def __getattr__(name):
    if name in _LAZY:  # torch imported on first use
        import importlib

        return getattr(importlib.import_module("." + _LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class TorchConfig:
    """Ray's TorchConfig: backend (gloo: CPU ranks) and timeout_s for the process group."""

    def __init__(self, backend: str = "gloo", init_method: str = "env", timeout_s: int = 1800):
        self.backend = backend
        self.init_method = init_method
        self.timeout_s = timeout_s


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _agree_master() -> tuple:
    """Collective: rank 0's address and a free port of its, on every rank."""
    buf = np.zeros(256, dtype=np.uint8)
    if _core.world_rank() == 0:
        if _core.local_world_size() == _core.world_size():
            addr = "127.0.0.1"  # one node
        else:
            addr = socket.gethostbyname(socket.gethostname())
        text = f"{addr} {_free_port()}".encode()
        buf[:len(text)] = np.frombuffer(text, dtype=np.uint8)
    _collectives.broadcast(buf, 0)
    addr, port = bytes(buf).rstrip(b"\0").decode().split()
    return addr, int(port)


def _threads_per_worker() -> int:
    """The CPUs assigned to this worker: its affinity mask's (mt_num_cpus), but never more
    than its share of the mask when the node's workers were not bound apart (spawn mode, or
    mpirun --bind-to none: every local worker sees the same CPUs, and as many torch threads
    each would oversubscribe them; measured here, 2 workers on 2 cores: an epoch of
    examples/python/ray_snippet.py took 13.8 s with 2 threads each, 3.2 s with 1)."""
    cpus = _core.num_cpus()
    local = max(1, _core.local_world_size())
    if local > 1 and len(os.sched_getaffinity(0)) >= (os.cpu_count() or 1):
        cpus = min(cpus, (os.cpu_count() or 1) // local)  # unbound: a share of the node
    return max(1, cpus)


class TorchTrainer(DataParallelTrainer):
    """DataParallelTrainer with torch set up on every worker (see the module's text)."""

    def __init__(self, train_loop_per_worker, *, torch_config=None, **kwargs):
        super().__init__(train_loop_per_worker, **kwargs)
        self.torch_config = torch_config or TorchConfig()
        from ... import _user_threads

        self._user_threads = _user_threads

    def _worker_setup(self) -> None:
        import torch

        addr, port = _agree_master()
        os.environ["MASTER_ADDR"] = addr
        os.environ["MASTER_PORT"] = str(port)
        if not self._user_threads:
            torch.set_num_threads(_threads_per_worker())

    def _worker_teardown(self) -> None:
        import sys

        prepared = sys.modules.get(__name__ + "._prepare")
        if prepared is not None:  # collective: every rank releases its prepared models
            prepared.close_all()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
