"""A rank killed, a launcher restarting, a run resumed from its checkpoint: under each backend."""

import subprocess
import time

import pytest

from distbench.records import read_records
from distbench.training import faults
from tests.helpers import child_env, launch, py, read_record, run_cmd, run_in

TIMEOUT_S = 60


COMMON = ["--no-progress", "--threads", "1", "--timeout-s", str(TIMEOUT_S)]


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
# resuming in test_a_killed_fabric_run_resumes_to_ddps_uninterrupted_run, horovodrun's in
# test_resume_under_other_backends, torchrun's and accelerate launch's restarts in
# test_launcher_restart_resumes_and_finishes. A rank hung, alive and silent: under torchrun, rank 0's collective
# times out (--timeout-s); Horovod's cycle waits for its tensors for ever, and distbench's watchdog ends rank 0 after
# --timeout-s + 15 s (training/faults.Watchdog): either way horovodrun or torchrun then ends the job
@pytest.mark.parametrize("backend,noticed_by", [("ddp", 0), ("horovod", faults.WATCHDOG_GRACE_S)])
def test_a_hung_rank_stops_the_job_within_the_timeout(tmp_path, backend, noticed_by):
    out, timeout_s, events = tmp_path / "never-written.json", 15, faults.Events(tmp_path / "ckpt")
    args = ["--no-progress", "--threads", "1", "--timeout-s", str(timeout_s), "--epochs", "50", "--fault", "hang:1@5"]
    args += ["--checkpoint-dir", str(events.path.parent)]  # where the run keeps its events
    _killed(launch(backend, 2, [*args, "--output", str(out)]), child_env(tmp_path), out, timeout_s)
    hung = next(e["t"] for e in events.read() if e["event"] == "fault")
    noticed = next(e for e in events.read() if e["event"] == "noticed" and e["rank"] == 0)
    print(f"{backend}: rank 0 noticed the hang after {noticed['t'] - hung:.1f} s ({noticed['error']})")
    assert timeout_s + noticed_by - 1 <= noticed["t"] - hung < timeout_s + 30  # nothing noticed it sooner


def _resume_run(tmp_path, name, backend="ddp", launcher=None, fault=None, steps=30):
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
    return launch(backend, 2, args, launcher), child_env(tmp_path), out


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


@pytest.fixture(scope="module")
def continued_sweep(tmp_path_factory):
    """`compare --restarts 1 --fault none,kill:1@15` on 2 simulated nodes of one process, ddp, accelerate, horovod."""
    tmp = tmp_path_factory.mktemp("continued")
    out = tmp / "sweep"
    cmd = py(
        f"run.py compare --backends ddp,accelerate,horovod --nprocs 1 --nodes 2 --threads 1 --max-steps 30 "
        f"--timeout-s {TIMEOUT_S} --dropout 0 --checkpoint-every 10 --restarts 1 --fault none,kill:1@15 --out",
        out,
    )
    run_in(tmp, cmd, timeout=500)
    records = read_records(out / "results.jsonl")
    return out, {(r["backend"], r["config"]["fault"]): r for r in records if r["backend"] != "single"}


def _same_within_tolerance(rec, free):
    """The run that continued with fewer ranks ends where the fault-free run does, within float tolerance."""
    assert max(abs(a - b) for a, b in zip(rec["loss_history"], free["loss_history"], strict=True)) < 1e-4
    assert abs(rec["param_checksum"] / free["param_checksum"] - 1) < 1e-5


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_a_sweep_continues_each_library_past_a_killed_rank_and_reports_what_it_cost(continued_sweep):
    """`compare --restarts 1 --fault none,kill:1@15` on 2 simulated nodes: ddp under torchrun's agents (--max-restarts,
    a c10d rendezvous: node 1's agent restarts its worker, node 0's joins the new round), accelerate under accelerate
    launch (--max_restarts), horovod under horovodrun's elastic form (Horovod Elastic: rank 0 survives, rolls back to
    its commit at step 10 and continues alone: the host of the killed rank is blacklisted). Each run checkpoints into a
    folder of its own. Each continued run ends on its fault-free run of the same sweep: bit for bit where the group
    restarted from its checkpoint; within float tolerance after Horovod's shrink (the global batch kept, split over
    fewer ranks; dropout off). The records say what the kill cost; so does the report's Faults section."""
    out, runs = continued_sweep
    assert sorted(runs) == [(b, f) for b in ("accelerate", "ddp", "horovod") for f in ("kill:1@15", "none")]
    for backend in ("ddp", "accelerate", "horovod"):
        rec, free = runs[backend, "kill:1@15"], runs[backend, "none"]
        assert (rec["status"], rec["resumed_from_step"], rec["steps"]) == ("ok", 10, 30), rec.get("error")
        cost = rec["fault"]  # from the events in the run's checkpoint folder (training/faults.py)
        print(f"{backend}: {cost}")
        assert (cost["spec"], cost["met"], cost["attempts"], cost["steps_redone"]) == ("kill:1@15", True, 2, 5)
        assert 0 <= cost["restarted_s"] < cost["recovered_s"] < TIMEOUT_S
        assert cost["first_noticed_s"] is None or cost["first_noticed_s"] <= cost["recovered_s"]
        assert cost["goodput_samples_per_sec"] < rec["samples_per_sec"]  # the whole run's wall, the lost steps in it
        assert cost["world_size_after"] == (1 if backend == "horovod" else 2)
        if backend == "horovod":
            _same_within_tolerance(rec, free)
        else:
            assert (rec["loss_history"], rec["param_checksum"]) == (free["loss_history"], free["param_checksum"])
    assert "--max-restarts=1" in runs["ddp", "kill:1@15"]["command"]
    assert "--host-discovery-script" in runs["horovod", "kill:1@15"]["command"]
    assert not list((out / "runs").glob("*.ckpt"))  # the folders the restarts needed, removed
    report = (out / "report.md").read_text()
    assert "## Faults" in report and "| horovod x2 fault kill:1@15 | `kill:1@15` | 1 of 1 (x1 after) |" in report


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_torchrun_continues_without_a_lost_node(tmp_path, continued_sweep):
    """`--fault kill-node:1@15` kills node 1's torchrun agent and its worker (a lost machine). Restarting, torchrun's
    agents meet at `--nnodes 1:2`: node 0's agent, whose worker's collective failed, waits out the lost node's
    rendezvous keep-alive and last call, then restarts its worker alone, from the step-10 checkpoint, at world size 1
    (the global batch kept, split over fewer ranks). The run ends on the fault-free run of the same sweep within float
    tolerance; its record keeps the world it was launched with and says the one it ended with."""
    out = tmp_path / "sweep"
    cmd = py(
        f"run.py compare --backends ddp --nprocs 1 --nodes 2 --threads 1 --max-steps 30 --timeout-s {TIMEOUT_S} "
        "--dropout 0 --checkpoint-every 10 --restarts 1 --fault kill-node:1@15 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=500)
    (rec,) = [r for r in read_records(out / "results.jsonl") if r["backend"] == "ddp"]
    assert (rec["status"], rec["world_size"], rec["nodes"], rec["resumed_from_step"]) == ("ok", 2, 2, 10), rec.get(
        "error"
    )
    cost = rec["fault"]
    print(f"ddp, node 1 lost: {cost}")
    assert (cost["met"], cost["attempts"], cost["steps_redone"]) == (True, 2, 5)
    assert (cost["world_size_after"], cost["nodes_after"]) == (1, 1)
    assert cost["first_noticed_s"] < cost["restarted_s"] < cost["recovered_s"] < TIMEOUT_S + 60
    _same_within_tolerance(rec, continued_sweep[1]["ddp", "none"])
    assert (
        "--nnodes 1:2" in rec["command"]
        and "| `kill-node:1@15` | 1 of 1 (x1 after) |" in (out / "report.md").read_text()
    )


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
    again = run_cmd(cmd, timeout=240, env=env)  # the same command: the fault happened once (the run's events)
    assert "resuming from" in again.stderr and "at step 10" in again.stderr
    rec = read_record(out)
    assert (rec["resumed_from_step"], rec["launcher"]) == (10, "fabric run")
    _assert_same_run(rec, straight_run)
    assert (rec["fault"]["met"], rec["fault"]["attempts"], rec["fault"]["steps_redone"]) == (True, 2, 5)
