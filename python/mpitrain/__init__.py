"""mpitrain for Python: Ray Train's API on MPI ranks, over the mpitrain C library.

    from mpitrain import train
    from mpitrain.train import ScalingConfig

    def train_func():
        ctx = train.get_context()
        train.report({"rank": ctx.get_world_rank()})

    result = train.torch.TorchTrainer(train_func,
                                      scaling_config=ScalingConfig(num_workers=2)).fit()

Run it under ``mpirun -np 2 python3 script.py`` (every rank runs the script), or as
``python3 script.py`` (the first process starts the other workers itself). This module holds
the collectives (in place on numpy arrays and torch CPU tensors) and the error classes:
``MpitrainError`` and one subclass per error kind of the C library, each carrying the C
message (``.message``) and code (``.code``).
"""
import atexit
import os
import sys

__version__ = "0.1.0"


def _load_core():
    # Open MPI loads its plugins with dlopen; they need libmpi's symbols global, as a C
    # program that links libmpi has them (mpi4py does the same)
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        # the build tree: the library is next door in <builddir>/.libs, not installed
        here = os.path.dirname(os.path.abspath(__file__))
        lib = os.path.join(here, "..", "..", ".libs", "libmpitrain.so.0")
        if os.path.exists(lib) and os.path.exists(os.path.join(here, "..", "..", "Makefile")):
            import ctypes

            ctypes.CDLL(os.path.normpath(lib), mode=os.RTLD_GLOBAL)
        from . import _core as core
    finally:
        sys.setdlopenflags(flags)
    return core


_core = _load_core()

from ._core import (  # noqa: E402  (after the loader above)
    FormatError,
    InputOutputError,
    InvalidArgumentError,
    MismatchError,
    MPIError,
    MpitrainError,
    NotFoundError,
    OutOfMemoryError,
    PeerError,
    StopRequestedError,
)
from ._collectives import allgather, allreduce, barrier, broadcast  # noqa: E402

_initialised = False
# whether the user set torch's / OpenMP's thread count (before fit sets it per worker)
_user_threads = "OMP_NUM_THREADS" in os.environ
# a process spawn mode started (set by the library in the children's environment)
_spawned = "MT_SPAWN_BOARD" in os.environ


def _argv():
    """The command line spawn mode starts again: this interpreter, its flags, the script
    (made absolute, so that a child started elsewhere finds it) and its arguments."""
    args = list(getattr(sys, "orig_argv", sys.argv))[1:]
    script = sys.argv[0] if sys.argv else ""
    if script and script not in ("-c", "-m") and os.path.isfile(script):
        for i, a in enumerate(args):
            if a == script:
                args[i] = os.path.abspath(script)
                break
    return [sys.executable] + args


def _ensure_init():
    """mt_init, once per process (MPI_Init_thread unless MPI is up already, e.g. mpi4py)."""
    global _initialised
    if not _initialised:
        _core.init(_argv())
        _initialised = True
        atexit.register(_finalize)


def _finalize():
    global _initialised
    if _initialised:
        _initialised = False
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        _core.finalize()


__all__ = [
    "allreduce",
    "broadcast",
    "allgather",
    "barrier",
    "MpitrainError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "InputOutputError",
    "NotFoundError",
    "FormatError",
    "MPIError",
    "PeerError",
    "MismatchError",
    "StopRequestedError",
]
