"""The training loop in-process (world size 1): what the progress bar shows against what the record keeps, and the
warning a busy machine gets as training starts."""

import contextlib
import io
import json
import re

import pytest
import torch

from distbench.backends.base import Backend, ReduceOp
from distbench.config import busy_machine


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
    """run.py --max-steps 3 --log-every 2 in-process, its all-reduce that of two ranks, on a machine whose load
    leaves no core free: (stderr, record)."""
    from distbench.cli import main

    out = tmp_path_factory.mktemp("loop") / "r.json"
    err = io.StringIO()
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        mp.setattr(Backend, "all_reduce", _as_with_a_second_rank)
        mp.setattr("os.getloadavg", lambda: (1000.0, 1000.0, 1000.0))
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


@pytest.mark.parametrize("load,threads,warns", [(0.0, 2, False), (0.5, 1, False), (1.5, 1, True), (0.5, 2, True)])
def test_free_cores_are_the_usable_ones_less_the_load(monkeypatch, load, threads, warns):
    """Two usable cores of two: free = 2 - load, against the run's threads."""
    monkeypatch.setattr("os.getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert (busy_machine(threads) is not None) == warns


def test_a_load_on_cores_outside_the_mask_takes_none_of_them(monkeypatch):
    """Confined to 2 cores of 64 (taskset, a cpuset) with a load of 10 elsewhere: 2 cores free."""
    monkeypatch.setattr("os.getloadavg", lambda: (10.0, 0.0, 0.0))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert busy_machine(2) is None and busy_machine(3) is not None


def test_only_the_main_process_says_it():
    """The loop says it through the Reporter, whose lines are the main process's only."""
    from distbench.training.reporter import Reporter

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        Reporter(is_main=False).info("warning: x")
        Reporter(is_main=True).info("warning: y")
    assert err.getvalue() == "warning: y\n"
