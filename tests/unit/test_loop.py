"""The training loop in-process (world size 1): what the progress bar shows against what the record keeps, and the
warning a busy machine gets as training starts."""

import contextlib
import io
import json
import re

import pytest
import torch

from distbench.backends.base import Backend, ReduceOp
from distbench.launching import affinity


def _as_with_a_second_rank(self, t, op=ReduceOp.SUM):
    """Backend.all_reduce as if a second rank held `t + 1` (its own batch, its own loss): what single x1 cannot
    show otherwise, a global mean that is not this rank's own value."""
    other = t + 1
    op = ReduceOp(op)
    if op is ReduceOp.SUM:
        return t + other
    if op is ReduceOp.AVG:
        return (t + other) / 2
    return torch.maximum(t, other) if op is ReduceOp.MAX else torch.minimum(t, other)


@pytest.fixture(scope="module")
def loaded_run(tmp_path_factory):
    """run.py --max-steps 3 --log-every 2 in-process, its all-reduce that of two ranks, on a machine where other
    processes compute on every core: (stderr, record)."""
    from distbench.cli import main

    out = tmp_path_factory.mktemp("loop") / "r.json"
    err = io.StringIO()
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        mp.setattr(Backend, "all_reduce", _as_with_a_second_rank)
        mp.setattr(affinity, "runnable_elsewhere", lambda cores: len(cores))  # a neighbour computes on every core
        code = main(["--max-steps", "3", "--log-every", "2", "--threads", "1", "--progress", "--output", str(out)])
    torch.set_num_threads(threads)
    assert code == 0, err.getvalue()
    return err.getvalue(), json.loads(out.read_text())


def test_the_progress_bar_shows_the_loss_the_record_keeps(loaded_run):
    """The global mean (the record's loss_history), not this rank's own loss: the last value shown, at the last
    step, is the record's final loss."""
    stderr, record = loaded_run
    shown = re.findall(r"loss=([0-9.]+)", stderr)
    assert shown and shown[-1] == f"{record['final_loss']:.4f}"
    assert record["final_loss"] == record["loss_history"][-1]


def test_a_busy_machine_is_one_warning_line_and_the_run_goes_on(loaded_run):
    stderr, record = loaded_run
    warned = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "the machine is busy" in warned[0] and "1 thread(s)" in warned[0]
    assert record["steps"] == 3


def _stat(pid: int, tid: int, state: str, cpu: int, name: str = "python") -> str:
    """A line of /proc/PID/task/TID/stat: the name in parentheses (it may hold spaces and parentheses), then the
    fields from the state (field 3) on; field 39 is the CPU."""
    after = [state, *["0"] * 35, str(cpu), *["0"] * 13]
    return f"{tid} ({name}) " + " ".join(after) + "\n"


def _fake_proc(root, tasks, running):
    root.mkdir(exist_ok=True)
    (root / "loadavg").write_text(f"1.00 0.50 0.25 {running}/300 4242\n")
    for pid, tid, state, cpu, name in tasks:
        (root / str(pid) / "task" / str(tid)).mkdir(parents=True)
        (root / str(pid) / "task" / str(tid) / "stat").write_text(_stat(pid, tid, state, cpu, name))
    return root


def test_what_runs_elsewhere_is_read_from_proc(tmp_path):
    """Runnable threads of other processes on the cores asked about count; this process's own, a sleeping thread and
    one on another core do not; a name with spaces and parentheses does not shift the fields."""
    import os

    me = os.getpid()
    tasks = [
        (me, me, "R", 0, "python"),  # this process: never counted
        (me + 1, me + 1, "R", 0, "burn (1) x"),  # a neighbour computing on core 0
        (me + 1, me + 2, "R", 1, "burn (1) x"),  # its second thread, on core 1
        (me + 3, me + 3, "S", 0, "sleepy"),  # sleeping on core 0
    ]
    root = _fake_proc(tmp_path, tasks, running=4)
    assert affinity.runnable_elsewhere({0}, root) == 1
    assert affinity.runnable_elsewhere({0, 1}, root) == 2
    assert affinity.runnable_elsewhere({2}, root) == 0
    # the machine-wide count says this thread alone is runnable: nothing is read
    assert affinity.runnable_elsewhere({0, 1}, _fake_proc(tmp_path / "quiet", tasks, running=1)) == 0


def test_a_thread_that_wakes_for_a_moment_does_not_count(monkeypatch):
    """The fewest runnable in a few looks: a daemon seen once is not a neighbour; one seen every time is."""
    looks = iter([2, 0, 3])
    monkeypatch.setattr(affinity, "runnable_elsewhere", lambda cores: next(looks))
    assert affinity.competing_threads([0, 1], gap_s=0) == 0
    monkeypatch.setattr(affinity, "runnable_elsewhere", lambda cores: 1)
    assert affinity.competing_threads([0, 1], gap_s=0) == 1
    assert affinity.shortfall([0, 1], 1) == 0 and affinity.shortfall([0, 1], 2) == 1
    assert affinity.shortfall([0], 1) == 1


def test_a_process_computing_on_a_core_is_seen_there():
    """A real neighbour: a process spinning on core 0 is a competing thread there, now (not a minute later)."""
    import os
    import subprocess
    import sys

    spin = "import os; os.sched_setaffinity(0, {0}); print('spinning', flush=True)\nwhile True: pass"
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spinning"
        assert affinity.competing_threads([0]) >= 1
        assert affinity.shortfall([0], 1) == 1
    finally:
        child.kill()
        child.wait()
    assert os.getpid() != child.pid


def test_only_the_main_process_says_it():
    """The loop says it through the Reporter, whose lines are the main process's only."""
    from distbench.training.reporter import Reporter

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        Reporter(is_main=False).info("warning: x")
        Reporter(is_main=True).info("warning: y")
    assert err.getvalue() == "warning: y\n"
