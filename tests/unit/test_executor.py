"""A failed run's record ends with its cause, whole (distbench/sweep/executor.py's run_one): the line the progress
line and the report show."""

import sys
import time

import pytest

from distbench.sweep.executor import run_one


def _run(tmp_path, code: str, timeout_s: float = 60) -> dict:
    return run_one([[sys.executable, "-c", code]], tmp_path / "r.json", timeout_s, tmp_path / "r.log")


def test_the_cause_of_a_failure_is_its_last_line(tmp_path):
    cause = "error: a cause longer than any table cell" + ", and it keeps every word" * 5
    rec = _run(tmp_path, f"import sys; print({cause!r}); print('launcher noise after it'); sys.exit(2)")
    assert (rec["status"], rec["returncode"]) == ("failed", 2)
    assert rec["error"].splitlines()[-1] == cause


def test_a_timeout_says_so_last(tmp_path):
    rec = _run(tmp_path, "import time; print('error: not the cause', flush=True); time.sleep(60)", timeout_s=1)
    assert rec["error"].splitlines()[-1] == "timed out after 1 s"


def test_a_run_that_ends_well_without_its_record_says_so(tmp_path):
    rec = _run(tmp_path, "print('done')")
    assert rec["error"].splitlines()[-1] == f"exited 0 without writing its record {tmp_path / 'r.json'}"


def test_a_launcher_that_is_not_installed_fails_its_run_in_one_line(tmp_path):
    """A package unpacked without its command's script (the GPU machine's deepspeed): the run fails and says which
    command, and the sweep goes on; the first node's agent, already started, is stopped."""
    first = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.time()
    rec = run_one([first, [str(tmp_path / "deepspeed"), "--num_gpus", "1"]], tmp_path / "r.json", 60, tmp_path / "l")
    assert rec == {
        "status": "failed",
        "error": f"cannot start {tmp_path / 'deepspeed'}: No such file or directory",
        "elapsed_s": 0.0,
    }
    assert time.time() - started < 30


def test_a_local_run_starts_its_backends_launcher_and_shows_its_command(tmp_path):
    """LocalExecutor.run (Executor.run and LocalExecutor.start): plain python for `single`, the record with its
    command as a user types it."""
    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.executor import LocalExecutor

    out = tmp_path / "r.json"
    write = f"import json; json.dump({{'samples_per_sec': 1.0}}, open({str(out)!r}, 'w'))"
    config = SweepConfig(task="mnist", backend="single", world_size=1, threads=1)
    rec = LocalExecutor().run(config, [], out, tmp_path / "r.log", 60, ["-c", write])
    assert (rec["status"], rec["samples_per_sec"]) == ("ok", 1.0)
    assert rec["command"].startswith("python -c ") and "samples_per_sec" in rec["command"]


def _ran(config, **found) -> dict:
    """The record a run of `config` writes, with what its processes found where `found` says otherwise."""
    return {"status": "ok", "task": config.task, **config.to_record(), "config": {}, **found}


def test_a_run_that_did_not_run_as_planned_is_a_failure_that_says_how():
    """The record is the run's own (its processes recorded the link, nodes and world they found); the sweep checks it
    against the plan and never overwrites it: a planted mismatch (a link that was not shaped) fails the run."""
    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.runner import checked

    planned = SweepConfig(task="mnist", backend="ddp", world_size=2, threads=1, nodes=2, link_rate="100mbit")
    assert checked(planned, _ran(planned))["status"] == "ok"
    assert checked(planned, _ran(planned, link_rate="100.0mbit"))["status"] == "ok"  # the same rate, read back
    unshaped = checked(planned, _ran(planned, link_rate="none", nodes=1))
    assert unshaped["status"] == "failed" and unshaped["link_rate"] == "100mbit"  # reported as the planned one
    assert unshaped["error"] == (
        "the run did not run as planned: nodes: planned 2, the run's 1; link_rate: planned 100mbit, the run's none"
    )
    failed = checked(planned, {"status": "failed", "error": "error: it broke"})  # no record of its own: the plan's
    assert (failed["backend"], failed["link_rate"], failed["error"]) == ("ddp", "100mbit", "error: it broke")


def test_a_node_lost_on_purpose_is_not_the_failure_of_a_job_that_continues():
    """wait_all: a launcher killed with its node (SIGKILL: --fault kill-node) fails a job whose launchers cannot
    continue without it, and not one whose can (compare --restarts): there the others are waited for, not stopped."""
    import subprocess

    from distbench.sweep.executor import wait_all

    def job():
        return [subprocess.Popen(["sh", "-c", "kill -9 $$"]), subprocess.Popen(["sh", "-c", "sleep 0.5; exit 0"])]

    assert wait_all(job(), 30, continues=True) == 0
    assert wait_all(job(), 30) == -9
    failed = [subprocess.Popen(["sh", "-c", "exit 3"]), subprocess.Popen(["sh", "-c", "sleep 0.5"])]
    assert wait_all(failed, 30, continues=True) == 3


def test_a_lost_node_comes_back_as_its_agent_started_again(tmp_path, monkeypatch):
    """kill-node:NODE@STEP:BACK: wait_all starts the node's agent again BACK s after it was killed (SIGKILL), with
    NODE_RETURNED_ENV; one that outlives the job's first agents is stopped after PEER_GRACE_S, its exit code not the
    job's. The return needs a launcher that continues: else one line, before any run."""
    import subprocess

    from distbench.launching.commands import restarting_launcher
    from distbench.sweep import executor
    from distbench.sweep.node_return import node_return, return_error

    back = tmp_path / "back"
    agent = f'if [ "$DISTBENCH_NODE_RETURNED" = 1 ]; then touch {back}; sleep "$1"; else kill -9 $$; fi'
    node = node_return("kill-node:1@5:0.3", [["true"], ["sh", "-c", agent, "sh", "0.2"]], {})
    procs = [subprocess.Popen(["sh", "-c", "sleep 1.5"])]
    procs.append(subprocess.Popen(node.command))
    started = time.monotonic()
    assert executor.wait_all(procs, 30, continues=True, back=executor.Returning(node, _start)) == 0
    assert back.exists() and len(procs) == 3 and procs[2].returncode == 0 and node.gone_at - started < 0.5
    # a node back after the job's other agents ended is stopped after PEER_GRACE_S, and the job has not failed
    monkeypatch.setattr(executor, "PEER_GRACE_S", 0.5)
    node = node_return("kill-node:1@5:0.1", [["true"], ["sh", "-c", agent, "sh", "60"]], {})
    procs = [subprocess.Popen(["sh", "-c", "sleep 0.5"]), subprocess.Popen(node.command)]
    assert executor.wait_all(procs, 30, continues=True, back=executor.Returning(node, _start)) == 0
    assert procs[2].returncode == -15
    assert node_return("kill-node:1@5", [["true"], ["true"]], {}) is None
    assert "give --restarts N" in return_error("kill-node:1@5:30", None)
    assert return_error("kill-node:1@5:30", restarting_launcher("ddp", 1)) is None
    # Horovod Elastic counts the host's return as a reset, as it did the lost node
    assert "give --restarts 2 or more" in return_error("kill-node:1@5:30", restarting_launcher("horovod", 1))
    assert return_error("kill-node:1@5:30", restarting_launcher("horovod", 2)) is None
    assert return_error("kill:1@5", None) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_horovod_elastic_lists_a_lost_host_again_after_its_seconds(tmp_path, host):
    """Horovod Elastic's lost node comes back through the job's hosts file, which its discovery script prints: once
    the node's line has gone (its fault drops it), the executor puts every node's line back BACK seconds later,
    whichever host the node's rank ran on (horovodrun's driver orders the hosts as a set: rank 1 on the first host
    listed half the time; the executor once waited for the second line only, and never listed the first again); a
    sweep's job whose node comes back has its horovodrun given a blacklist cool-down (without one a failed host never
    comes back), a job without a return none."""
    import subprocess
    import time
    from dataclasses import replace

    from distbench.launching import topology
    from distbench.sweep import executor
    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.executor import LocalExecutor
    from distbench.sweep.node_return import HostReturn, node_return

    script = topology.horovod_discovery(["localhost", "127.0.0.1"], 1)
    env = {topology.HOROVOD_HOSTS_ENV: str(script.with_name("hosts"))}
    try:
        node = node_return("kill-node:1@5:0.3", [["horovodrun"]], env)
        assert isinstance(node, HostReturn) and node.listed == ["localhost:1", "127.0.0.1:1"]
        procs = [subprocess.Popen(["sh", "-c", "sleep 1.5"])]
        time.sleep(0.2)
        topology.drop_host({**env, "HOROVOD_HOSTNAME": host})  # as node 1's fault does, its rank on `host`
        started = time.monotonic()
        assert executor.wait_all(procs, 30, continues=True, back=executor.Returning(node, _start)) == 0
        assert node.listed_again and node.gone_at - started < 1 and len(procs) == 1  # horovodrun starts the worker
        assert subprocess.run([str(script)], capture_output=True, text=True).stdout == "localhost:1\n127.0.0.1:1\n"
    finally:
        topology.discarded(env)
    # a sweep's horovod job whose node comes back: its horovodrun given a cool-down, its return the hosts file's
    config = SweepConfig(task="mnist", backend="horovod", world_size=2, threads=1, nodes=2, fault="kill-node:1@5:30")
    with LocalExecutor(restarts=2).start(config, ["--max-steps", "30"]) as started:
        (cmd,) = started.commands
        assert cmd[cmd.index("--blacklist-cooldown-range") + 1 :][:2] == ["1", "60"]
        assert isinstance(started.back, HostReturn) and started.back.hosts.is_file()
    with LocalExecutor(restarts=2).start(replace(config, fault="kill-node:1@5"), ["--max-steps", "30"]) as started:
        assert "--blacklist-cooldown-range" not in started.commands[0] and started.back is None


def _start(cmd, added):
    import os
    import subprocess

    return subprocess.Popen(cmd, env={**os.environ, **added}, start_new_session=True)
