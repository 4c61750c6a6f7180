"""A rank killed, a launcher restarting, a run resumed from its checkpoint: under each backend."""

import subprocess
import time

import pytest

from distbench.training import faults
from tests.conftest import MNIST_ARGS, MNIST_STEPS
from tests.helpers import child_env, launch, read_record, run_cmd

TIMEOUT_S = 60


def _leftovers(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.strip()


def _killed(cmd: list[str], env: dict, out, timeout_s: int = TIMEOUT_S) -> None:
    """Run `cmd`, whose rank 1 the fault kills or hangs: the launcher ends the whole job within the collective
    timeout (+ 30 s, + its start-up), with a failure, no record and no process of the job left behind."""
    t0 = time.time()
    proc = run_cmd(cmd, timeout=timeout_s + 90, env=env, expect_rc=None)
    print(f"rank 1 faulted; {cmd[0]} exited {proc.returncode} after {time.time() - t0:.1f} s")
    assert proc.returncode != 0
    assert not out.exists()
    time.sleep(1)
    assert _leftovers(str(out)) == "", "processes of the failed job are still running"


@pytest.mark.multiproc
@pytest.mark.timeout(400)
# a rank killed: fabric run's teardown (torchrun's agent, as torchrun's and accelerate launch's) and the same command
# resuming in test_a_killed_fabric_run_resumes_to_ddps_uninterrupted_run; the launchers that continue a job in
# test_continue.py. A rank hung, alive and silent: under torchrun, rank 0's collective times out (--timeout-s), and
# torchrun ends the job; Horovod's in test_a_hung_horovod_rank_is_ended_by_the_watchdog_and_the_same_command_resumes
@pytest.mark.parametrize("backend,noticed_by", [("ddp", 0)])
def test_a_hung_rank_stops_the_job_within_the_timeout(tmp_path, backend, noticed_by):
    out, timeout_s, events = tmp_path / "never-written.json", 15, faults.Events(tmp_path / "ckpt")
    args = ["--no-progress", "--threads", "1", "--timeout-s", str(timeout_s), "--epochs", "50", "--fault", "hang:1@5"]
    args += ["--checkpoint-dir", str(events.path.parent)]  # where the run keeps its events
    _killed(launch(backend, 2, [*args, "--output", str(out)]), child_env(tmp_path), out, timeout_s)
    hung = next(e["t"] for e in events.read() if e["event"] == "fault")
    noticed = next(e for e in events.read() if e["event"] == "noticed" and e["rank"] == 0)
    print(f"{backend}: rank 0 noticed the hang after {noticed['t'] - hung:.1f} s ({noticed['error']})")
    assert timeout_s + noticed_by - 1 <= noticed["t"] - hung < timeout_s + 30  # nothing noticed it sooner


def _resume_run(tmp_path, name, backend="ddp", launcher=None, fault=None, timeout_s=TIMEOUT_S):
    """A run of conftest.mnist_run's settings (its uninterrupted run: the reference) that checkpoints every 10 steps."""
    out = tmp_path / f"{name}.json"
    args = [*MNIST_ARGS, "--timeout-s", str(timeout_s), "--checkpoint-dir", str(tmp_path / f"ckpt-{name}")]
    args += ["--checkpoint-every", "10", "--output", str(out), "--force", *(["--fault", fault] if fault else [])]
    return launch(backend, 2, args, launcher), child_env(tmp_path), out


def _assert_same_run(rec, straight):
    assert rec["steps"] == straight["steps"] == MNIST_STEPS
    assert rec["loss_history"] == straight["loss_history"]  # exactly: same threads, same order, same RNG
    assert rec["param_checksum"] == straight["param_checksum"]
    assert rec["eval_accuracy"] == straight["eval_accuracy"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_straggler_slows_every_step_and_changes_nothing_else(mnist_run):
    """ddp x2 with rank 1 computing 3 times as long (`--fault slow:1:3`: it waits twice its forward and backward's
    CPU time after them): every rank waits for it at each all-reduce, and the run is the same run. By how much each
    library slows is measured by the benchmark, not here (docs/faults.md: 2.2-2.7x, nothing else running); under
    the suite's load, slower at all (an injected wait of twice the computation: 1.46x with the suite beside it)."""
    plain, slow = mnist_run("ddp", 2), mnist_run("ddp", 2, "--fault", "slow:1:3")
    ratio = slow["step_time_ms"]["p50"] / plain["step_time_ms"]["p50"]
    print(f"ddp x2, rank 1 three times slower: step time {ratio:.2f}x")
    assert ratio > 1.0
    assert slow["loss_history"] == plain["loss_history"] and slow["param_checksum"] == plain["param_checksum"]
    said = {"spec": "slow:1:3", "kind": "slow", "rank": 1, "step": None, "factor": 3.0, "met": True}
    assert slow["fault"] == {**said, "world_size_after": 2, "nodes_after": 1}


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_hung_horovod_rank_is_ended_by_the_watchdog_and_the_same_command_resumes(tmp_path, mnist_run):
    """Horovod's cycle waits for a hung rank's tensors for ever (no timeout of its own, and horovodrun sets its stall
    shutdown off): distbench's watchdog ends rank 0 after --timeout-s + 15 s (training/faults.Watchdog), horovodrun
    ends the job, nothing is left running. The same command then resumes from its step-10 checkpoint (the fault
    happened once: the run's events say so) and ends on Horovod's uninterrupted run, bit for bit."""
    timeout_s = 15
    cmd, env, out = _resume_run(tmp_path, "hung", backend="horovod", fault="hang:1@15", timeout_s=timeout_s)
    _killed(cmd, env, out, timeout_s)
    events = faults.Events(tmp_path / "ckpt-hung").read()
    hung = next(e["t"] for e in events if e["event"] == "fault")
    noticed = next(e for e in events if e["event"] == "noticed" and e["rank"] == 0)
    print(f"horovod: rank 0 noticed the hang after {noticed['t'] - hung:.1f} s ({noticed['error']})")
    assert noticed["error"] == "distbench watchdog"
    assert timeout_s + faults.WATCHDOG_GRACE_S - 1 <= noticed["t"] - hung < timeout_s + 30  # nothing noticed sooner
    run_cmd(cmd, timeout=240, env=env)
    rec = read_record(out)
    assert rec["resumed_from_step"] == 10
    _assert_same_run(rec, mnist_run("horovod", 2))


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_killed_fabric_run_resumes_to_ddps_uninterrupted_run(tmp_path, mnist_run):
    """Fabric's DDP strategy is DDP with the ddp backend's settings (backends/fabric_backend.py): killed under `fabric
    run` at step 15 and resumed from its step-10 checkpoint, it ends on ddp's uninterrupted run, bit for bit."""
    cmd, env, out = _resume_run(tmp_path, "fabric", backend="fabric", fault="kill:1@15")
    _killed(cmd, env, out)
    again = run_cmd(cmd, timeout=240, env=env)  # the same command: the fault happened once (the run's events)
    assert "resuming from" in again.stderr and "at step 10" in again.stderr
    rec = read_record(out)
    assert (rec["resumed_from_step"], rec["launcher"]) == (10, "fabric run")
    _assert_same_run(rec, mnist_run("ddp", 2))
    assert (rec["fault"]["met"], rec["fault"]["attempts"], rec["fault"]["steps_redone"]) == (True, 2, 5)
