"""Launch modes and stops, each a script run as users run them (not under the pytest
process's own MPI): spawn mode with no launcher, a killed worker, SIGTERM / SIGUSR1 / Ctrl-C
taking the preemption path (checkpoint, exit status 75, resume on the next start), and a
user's `except Exception` that cannot swallow the stop."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

LIMIT = 120 * float(os.environ.get("MT_TEST_TIMEOUT_SCALE", "1"))

SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from mpitrain import train
    from mpitrain.train import Checkpoint, RunConfig, ScalingConfig, FailureConfig

    MODE = sys.argv[1]
    print("START", os.getpid(), flush=True)

    def train_func(config):
        c = train.get_context()
        ck = train.get_checkpoint()
        start = 0 if ck is None else int(ck.get_array("i")[0]) + 1
        print(f"RANK {c.get_world_rank()} OF {c.get_world_size()} FROM {start} "
              f"ATTEMPT {c.get_attempt()}", flush=True)
        for i in range(start, config["steps"]):
            if MODE == "kill" and c.get_world_rank() == 1 and i == 2:
                os.kill(os.getpid(), 9)
            if MODE in ("stop", "swallow"):
                time.sleep(0.05)
                if i == 3 and c.get_world_rank() == 0:
                    print("READY", flush=True)
            ck = Checkpoint.from_arrays({"i": np.array([i])})
            if MODE == "swallow":
                try:
                    train.report({"i": i}, checkpoint=ck)
                except Exception:
                    print("SWALLOWED", flush=True)
            else:
                train.report({"i": i}, checkpoint=ck)

    trainer = train.DataParallelTrainer(
        train_func, train_loop_config={"steps": int(sys.argv[3])},
        scaling_config=ScalingConfig(num_workers=int(sys.argv[2])),
        run_config=RunConfig(name=sys.argv[4], storage_path=sys.argv[5], verbose=0,
                             failure_config=FailureConfig(stall_warn_s=10,
                                                          stall_timeout_s=60)))
    result = trainer.fit()
    print("AFTER FIT", os.getpid(), result.metrics["i"], result.metrics["training_iteration"],
          flush=True)
""")


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "job.py"
    p.write_text(SCRIPT)
    return str(p)


pytestmark = pytest.mark.skipif("OMPI_COMM_WORLD_SIZE" in os.environ,
                                reason="starts its own jobs: run once, without a launcher")


def clean_env():
    return dict(os.environ)


def run(args, **kw):
    return subprocess.run(args, env=clean_env(), capture_output=True, text=True, timeout=LIMIT,
                          **kw)


@pytest.mark.parametrize("workers", [2, 4])
def test_spawn_mode(script, store, run_name, workers, tmp_path):
    """python3 job.py with num_workers=N: N workers, code after fit() in the first only."""
    os.chdir(tmp_path)  # a relative script path works too
    out = run([sys.executable, "-u", os.path.basename(script), "ok", str(workers), "3", run_name,
               store])
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("AFTER FIT") == 1, out.stdout
    assert out.stdout.count("START") == workers
    for r in range(workers):
        assert f"RANK {r} OF {workers} FROM 0" in out.stdout
    assert "AFTER FIT" in out.stdout and " 2 3" in out.stdout


def test_spawned_worker_killed(script, store, run_name):
    """A spawned worker killed (SIGKILL): the job ends with status 77 naming it, no hang."""
    t0 = time.monotonic()
    out = run([sys.executable, script, "kill", "2", "10", run_name, store])
    assert out.returncode == 77, out.stdout + out.stderr
    assert "AFTER FIT" not in out.stdout
    assert "rank 1" in out.stderr, out.stderr
    assert time.monotonic() - t0 < 60  # well inside the stall timeout's 60 s


def start(args):
    return subprocess.Popen(args, env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_ready(p):
    for line in p.stdout:
        if "READY" in line:
            return
    raise AssertionError("the job never got ready: " + p.stderr.read())


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "swallow"])
def test_stop_checkpoints_exits_75_and_resumes(script, store, run_name, how):
    """A stop request (SIGTERM, or Ctrl-C) while training: the next report commits a
    checkpoint, fit() exits with 75; the same command again resumes after it. A user's
    `except Exception` around report does not swallow the stop."""
    mode = "swallow" if how == "swallow" else "stop"
    args = [sys.executable, script, mode, "1", "200", run_name, store]
    p = start(args)
    wait_ready(p)
    p.send_signal(signal.SIGINT if how == "SIGINT" else signal.SIGTERM)
    rest, err = p.communicate(timeout=LIMIT)
    assert p.returncode == 75, rest + err
    assert "AFTER FIT" not in rest and "SWALLOWED" not in rest
    assert "preempted" in err
    again = run([sys.executable, script, "ok", "1", "6", run_name, store])
    assert again.returncode == 0, again.stdout + again.stderr
    line = [x for x in again.stdout.splitlines() if x.startswith("RANK 0")][0]
    resumed = int(line.split("FROM ")[1].split()[0])
    assert resumed >= 4 and "ATTEMPT 1" in line, line


def test_sigusr1_under_mpirun(script, store, run_name):
    """mpirun forwards SIGUSR1 (Slurm's preemption signal) to the ranks: exit 75 on all."""
    p = start(["mpirun", "--oversubscribe", "-np", "2", sys.executable, script, "stop", "2",
               "200", run_name, store])
    wait_ready(p)
    p.send_signal(signal.SIGUSR1)
    rest, err = p.communicate(timeout=LIMIT)
    assert p.returncode == 75, rest + err
    assert "AFTER FIT" not in rest
