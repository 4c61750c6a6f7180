"""`run.py compare`: a small real sweep, its files, a failed run in the middle, Ctrl-C."""

import csv
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from distbench.sweep.csvfiles import COLUMNS
from distbench.sweep.plan import round_orders
from tests.helpers import ROOT, child_env, py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_small_compare_writes_every_report_file(tmp_path):
    out = tmp_path / "cmp"
    cmd = py(
        "run.py compare --task mnist --backends ddp --nprocs 2 --max-steps 6 --threads 1 "
        "--repeats 2 --order-seed 7 --out",
        str(out),
    )
    run_in(tmp_path, cmd, timeout=400)
    for name in (
        "results.jsonl",
        "summary.csv",
        "runs.csv",
        "report.md",
        "sweep.json",
        "mnist-throughput.png",
        "mnist-efficiency.png",
        "mnist-loss.png",
        "mnist-breakdown.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    sweep = json.loads((out / "sweep.json").read_text())
    planned = ["single x1 t1 acc1 none", "ddp x2 t1 acc1 none"]  # single: added as the reference
    assert (sweep["repeats"], sweep["order_seed"]) == (2, 7)
    assert sweep["orders"] == [[planned[i] for i in order] for order in round_orders(2, 2, 7)]
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # every configuration once per round, in the order sweep.json recorded for that round
    for rnd, order in enumerate(sweep["orders"], 1):
        ran = sorted((r for r in recs if r["round"] == rnd), key=lambda r: r["order"])
        assert [f"{r['backend']} x{r['world_size']} t1 acc1 none" for r in ran] == order
    with open(out / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == COLUMNS
    assert [(r["backend"], r["world_size"], r["runs_ok"]) for r in table] == [("single", "1", "2"), ("ddp", "2", "2")]
    assert float(table[0]["speedup"]) == pytest.approx(1.0)
    assert all(float(r["samples_per_sec"]) > 0 and float(r["eval_count"]) == 500 for r in table)
    with open(out / "runs.csv") as f:
        assert sorted(int(r["round"]) for r in csv.DictReader(f)) == [1, 1, 2, 2]
    report = (out / "report.md").read_text()
    assert "| ddp x2 |" in report and "torchrun --nproc_per_node 2" in report
    assert "### Verdicts" in report
    assert re.search(r"ddp x2 vs single x1: \d\.\d\dx from 2 round\(s\), too few for an interval", report)
    assert "fewer than 5 rounds" in report  # 2 rounds: no interval, and the report says so

    # rebuild from the records alone
    (out / "report.md").unlink()
    run_in(tmp_path, [sys.executable, "run.py", "report", str(out)], timeout=120)
    rebuilt = (out / "report.md").read_text()
    assert rebuilt.replace(rebuilt.splitlines()[2] + "\n\n", "") == report  # the same, plus how it was built

    # a second sweep into the same folder is refused: nothing already written is lost
    proc = run_in(tmp_path, cmd, timeout=120, expect_rc=2)
    assert "already holds a sweep" in proc.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 4


# MNIST, except that its data cannot be loaded in more than one process: a failure only a launched run meets (what the
# sweep can check before launching, it refuses: tests/cli/test_bad_input.py)
APART = """
import os

from distbench.tasks.mnist import MnistTask


class Apart(MnistTask):
    def datasets(self):
        if os.environ.get("WORLD_SIZE", "1") != "1":
            raise RuntimeError("planted: this task's data stays in one process, and a long cause is kept whole")
        return super().datasets()
"""


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_failed_run_is_recorded_the_sweep_goes_on_and_exits_1(tmp_path):
    out, task = tmp_path / "cmp", tmp_path / "apart.py"
    task.write_text(APART)
    cmd = py(
        f"run.py compare --task {task}:Apart --backends ddp --nprocs 2 --max-steps 3 --threads 1 --out",
        str(out),
    )
    proc = run_in(tmp_path, cmd, timeout=400, expect_rc=1)  # its report written, then the exit status says it
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    status = {(r["backend"], r["world_size"]): r["status"] for r in recs}
    assert status == {("ddp", 2): "failed", ("single", 1): "ok"}  # single: the reference the sweep adds
    failed = next(r for r in recs if r["status"] == "failed")
    cause = "RuntimeError: planted: this task's data stays in one process, and a long cause is kept whole"
    assert cause in failed["error"].splitlines()[-1]  # the cause last, whole
    assert f"1 of 2 runs failed: the causes are in {out / 'report.md'}" in proc.stderr
    assert cause in (out / "report.md").read_text()


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_ctrl_c_stops_the_run_and_keeps_records(tmp_path):
    out = tmp_path / "cmp"
    cmd = py("run.py compare --backends single,ddp --nprocs 1,2 --epochs 50 --threads 1 --out", str(out))
    # a shell's background job (`make test &`) starts with SIGINT ignored, and Python then has no Ctrl-C handler;
    # give the sweep the default disposition, as in a terminal
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=child_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list((out / "runs").glob("*.log")):
        time.sleep(0.5)
    time.sleep(8)  # the first run is training now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert (out / "sweep.json").is_file() and (out / "report.md").is_file()
    # nothing of the stopped run is left running
    ps = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert ps.stdout.strip() == ""
