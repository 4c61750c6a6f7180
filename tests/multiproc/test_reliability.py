"""A rank killed, a launcher restarting, a run resumed from its checkpoint: under each backend."""

import subprocess
import time

import pytest

from distbench.launching.launch import ACCELERATE, BIN, local_argv, resolve
from distbench.process import free_port
from tests.helpers import child_env, launch, read_record, run_cmd

TIMEOUT_S = 60


COMMON = ["--no-progress", "--threads", "1", "--timeout-s", str(TIMEOUT_S)]


def _leftovers(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.strip()


def _killed(cmd: list[str], env: dict, out, timeout_s: int = TIMEOUT_S) -> float:
    """Run `cmd`, whose rank 1 the fault kills or hangs: the launcher ends the whole job within the collective
    timeout (+ 30 s), with a failure, no record and no process of the job left behind. How long it took."""
    t0 = time.time()
    proc = run_cmd(cmd, timeout=timeout_s + 30, env=env, expect_rc=None)
    took = time.time() - t0
    print(f"rank 1 faulted; {cmd[0]} exited {proc.returncode} after {took:.1f} s")
    assert proc.returncode != 0
    assert not out.exists()
    time.sleep(1)
    assert _leftovers(str(out)) == "", "processes of the failed job are still running"
    return took


@pytest.mark.multiproc
@pytest.mark.timeout(400)
# accelerate launch's teardown of a killed rank (torchrun's: test_kill_then_resume_matches_the_uninterrupted_run,
# horovodrun's: test_resume_under_other_backends; the sharding backends start as ddp and accelerate do, and fail the
# same way); a hung rank under torchrun, alive and silent: only the collective timeout tells rank 0
@pytest.mark.parametrize("backend,fault,timeout_s", [("accelerate", "kill:1@5", TIMEOUT_S), ("ddp", "hang:1@5", 15)])
def test_a_killed_or_hung_rank_stops_the_job_within_the_timeout(tmp_path, backend, fault, timeout_s):
    out = tmp_path / "never-written.json"
    args = ["--no-progress", "--threads", "1", "--timeout-s", str(timeout_s), "--epochs", "50", "--fault", fault]
    took = _killed(launch(backend, 2, [*args, "--output", str(out)]), child_env(tmp_path), out, timeout_s)
    if fault.startswith("hang"):
        assert took > timeout_s  # nothing noticed the hung rank before the timeout


# Launchers that restart the worker group once (--max-restarts 1): torchrun with the c10d rendezvous (the
# multi-machine form), and accelerate launch, which runs torchrun's agent with its default static rendezvous (the
# form plain `torchrun --max-restarts` has too: one test of it suffices). The restarted round must connect at once:
# the agent keeps one store for all rounds, and the keys of the failed round are still in it
# (distbench/torchelastic.py).
def _restarting(launcher, flag: list[str]) -> list[str]:
    """The launcher's local command for 2 processes with the restart flag after the launcher's own name."""
    argv = resolve(local_argv(launcher, [], 2))
    at = 2 if launcher is ACCELERATE else 1  # after `accelerate launch`, or after `torchrun`
    return [*argv[:at], *flag, *argv[at:]]


ELASTIC = {
    "torchrun-c10d": (
        "ddp",
        lambda: [
            str(BIN / "torchrun"),
            *"--max-restarts=1 --nproc_per_node 2 --rdzv-backend c10d --rdzv-endpoint".split(),
            f"127.0.0.1:{free_port()}",
        ],
    ),
    "accelerate-launch": ("accelerate", lambda: _restarting(ACCELERATE, ["--max_restarts", "1"])),
}


def _resume_run(tmp_path, name, backend="ddp", launcher=None, fault=None, elastic=None, steps=30):
    out = tmp_path / f"{name}.json"
    args = [
        *COMMON,
        "--max-steps",
        str(steps),
        "--checkpoint-dir",
        str(tmp_path / f"ckpt-{name}"),
        "--checkpoint-every",
        "10",
        "--output",
        str(out),
        "--force",
        *(["--fault", fault] if fault else []),
    ]
    cmd = launch(backend, 2, args, launcher)
    if elastic:
        backend, prefix = ELASTIC[elastic]
        cmd = [*prefix(), "run.py", "--backend", backend, *args]
    return cmd, child_env(tmp_path), out


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("straight")
    cmd, env, out = _resume_run(tmp, "straight")
    run_cmd(cmd, timeout=240, env=env)
    return read_record(out)


def _assert_same_run(rec, straight):
    assert rec["steps"] == straight["steps"] == 30
    assert rec["loss_history"] == straight["loss_history"]  # exactly: same threads, same order, same RNG
    assert rec["param_checksum"] == straight["param_checksum"]
    assert rec["eval_accuracy"] == straight["eval_accuracy"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_kill_then_resume_matches_the_uninterrupted_run(tmp_path, straight_run):
    """ddp under torchrun, rank 1 killed at step 15: the job ends (_killed); the same command again resumes."""
    cmd, env, out = _resume_run(tmp_path, "manual", fault="kill:1@15")
    _killed(cmd, env, out)
    second = run_cmd(cmd, timeout=240, env=env)  # the same command: the fault happened once (its checkpoint's events)
    assert "resuming from" in second.stderr and "at step 10" in second.stderr
    rec = read_record(out)
    assert rec["resumed_from_step"] == 10
    _assert_same_run(rec, straight_run)


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize("elastic", list(ELASTIC))
def test_launcher_restart_resumes_and_finishes(tmp_path, straight_run, elastic):
    cmd, env, out = _resume_run(tmp_path, "elastic", fault="kill:1@15", elastic=elastic)
    proc = run_cmd(cmd, timeout=240, env=env)
    assert "resuming from" in proc.stderr
    assert "connectFullMesh failed" not in proc.stderr  # the restarted group did not meet the old keys
    rec = read_record(out)
    assert rec["launcher_restarts"] == 1  # the first restart finished the job
    assert rec["resumed_from_step"] == 10
    _assert_same_run(rec, straight_run)
    cost = rec["fault"]  # from the events in the checkpoint folder (training/faults.py)
    print(f"{elastic}: {cost}")
    assert (cost["spec"], cost["met"], cost["attempts"], cost["steps_redone"]) == ("kill:1@15", True, 2, 5)
    assert 0 <= cost["restarted_s"] < cost["recovered_s"] < TIMEOUT_S
    assert cost["first_noticed_s"] is None or cost["first_noticed_s"] <= cost["recovered_s"]
    assert cost["goodput_samples_per_sec"] < rec["samples_per_sec"]  # the whole run's wall, the lost steps in it


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_straggler_slows_every_step_and_changes_nothing_else(mnist_run):
    """ddp x2 with rank 1 computing 3 times as long (`--fault slow:1:3`): every rank waits for it at each all-reduce,
    so the step takes about 3 times as long (measured: 2.99x, 2026-12-04), and the run is the same run."""
    plain, slow = mnist_run("ddp", 2), mnist_run("ddp", 2, "--fault", "slow:1:3")
    ratio = slow["step_time_ms"]["p50"] / plain["step_time_ms"]["p50"]
    print(f"ddp x2, rank 1 three times slower: step time {ratio:.2f}x")
    assert 2.0 < ratio < 4.0
    assert slow["loss_history"] == plain["loss_history"] and slow["param_checksum"] == plain["param_checksum"]
    assert slow["fault"] == {"spec": "slow:1:3", "kind": "slow", "rank": 1, "step": None, "factor": 3.0, "met": True}


@pytest.mark.multiproc
@pytest.mark.timeout(400)
# accelerate resumes under its restarting launcher above (test_launcher_restart_resumes_and_finishes[accelerate-launch])
@pytest.mark.parametrize("backend", ["horovod"])
def test_resume_under_other_backends(tmp_path, backend):
    straight_cmd, env, straight_out = _resume_run(tmp_path, "straight", backend=backend, steps=20)
    run_cmd(straight_cmd, timeout=240, env=env)
    cmd, env, out = _resume_run(tmp_path, "resumed", backend=backend, fault="kill:1@15", steps=20)
    _killed(cmd, env, out)  # horovodrun ends the job
    run_cmd(cmd, timeout=240, env=env)
    a, b = read_record(straight_out), read_record(out)
    assert b["resumed_from_step"] == 10
    assert a["loss_history"] == b["loss_history"] and a["param_checksum"] == b["param_checksum"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_killed_fabric_run_resumes_to_ddps_uninterrupted_run(tmp_path, straight_run):
    """Fabric's DDP strategy is DDP with the ddp backend's settings (backends/fabric_backend.py): killed under `fabric
    run` at step 15 and resumed from its step-10 checkpoint, it ends on ddp's uninterrupted run, bit for bit."""
    cmd, env, out = _resume_run(tmp_path, "fabric", backend="fabric", fault="kill:1@15")
    _killed(cmd, env, out)
    run_cmd(cmd, timeout=240, env=env)
    rec = read_record(out)
    assert (rec["resumed_from_step"], rec["launcher"]) == (10, "fabric run")
    _assert_same_run(rec, straight_run)
