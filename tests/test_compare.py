"""`run.py compare` and `run.py report`: a small real sweep, its files, and a failed run in the middle."""

import csv
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from distbench.compare import plan_runs, round_orders
from distbench.report import COLUMNS
from tests.helpers import ROOT, child_env, run_cmd

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(600)]


def test_plan_adds_single_baselines_for_each_thread_count():
    runs = plan_runs(["ddp"], [1, 2], threads=None)
    assert [(r.backend, r.world_size) for r in runs if r.baseline] == [("single", 1)] * len({r.threads for r in runs})
    assert [(r.backend, r.world_size, r.threads, r.baseline) for r in plan_runs(["single", "ddp"], [1, 2], threads=1)] \
        == [("single", 1, 1, False), ("ddp", 1, 1, False), ("ddp", 2, 1, False)]  # fmt: skip


def test_plan_sweeps_accumulation_and_compression_with_a_reference_for_each_accumulation():
    runs = plan_runs(["single", "ddp"], [2], threads=1, accumulates=(1, 4), compressions=("none", "fp16"))
    assert [r.label for r in runs] == [
        "single x1 t1 acc1 none", "single x1 t1 acc4 none",  # references: single has no compression
        "ddp x2 t1 acc1 none", "ddp x2 t1 acc1 fp16", "ddp x2 t1 acc4 none", "ddp x2 t1 acc4 fp16",
    ]  # fmt: skip
    assert runs[0].baseline and runs[1].baseline and not runs[2].baseline
    assert runs[3].args() == ["--threads", "1", "--accumulate", "1", "--grad-compression", "fp16"]


def test_small_compare_writes_every_report_file(tmp_path):
    out = tmp_path / "cmp"
    cmd = [sys.executable, "run.py", "compare", "--task", "mnist", "--backends", "ddp", "--nprocs", "2",
           "--max-steps", "6", "--threads", "1", "--repeats", "2", "--order-seed", "7", "--out", str(out)]  # fmt: skip
    run_cmd(cmd, timeout=400, env=child_env(tmp_path))
    for name in ("results.jsonl", "summary.csv", "runs.csv", "report.md", "sweep.json", "mnist-throughput.png",
                 "mnist-efficiency.png", "mnist-loss.png", "mnist-breakdown.png"):  # fmt: skip
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
    run_cmd([sys.executable, "run.py", "report", str(out)], timeout=120, env=child_env(tmp_path))
    rebuilt = (out / "report.md").read_text()
    assert rebuilt.replace(rebuilt.splitlines()[2] + "\n\n", "") == report  # the same, plus how it was built

    # a second sweep into the same folder is refused: nothing already written is lost
    proc = run_cmd(cmd, timeout=120, env=child_env(tmp_path), expect_rc=2)
    assert "already holds a sweep" in proc.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 4


def test_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "cmp"
    # a global batch of 9 does not divide over 2 processes: that run fails, the sweep goes on
    cmd = [sys.executable, "run.py", "compare", "--backends", "ddp,single", "--nprocs", "2,1", "--max-steps", "3",
           "--batch-size", "9", "--threads", "1", "--out", str(out)]  # fmt: skip
    run_cmd(cmd, timeout=400, env=child_env(tmp_path))
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    status = {(r["backend"], r["world_size"]): r["status"] for r in recs}
    assert status == {("ddp", 2): "failed", ("ddp", 1): "ok", ("single", 1): "ok"}
    failed = next(r for r in recs if r["status"] == "failed")
    assert "divide evenly across 2 processes" in failed["error"]
    assert "failed" in (out / "report.md").read_text()


def test_ctrl_c_stops_the_run_and_keeps_records(tmp_path):
    out = tmp_path / "cmp"
    cmd = [sys.executable, "run.py", "compare", "--backends", "single,ddp", "--nprocs", "1,2", "--epochs", "50",
           "--threads", "1", "--out", str(out)]  # fmt: skip
    # a shell's background job (`make test &`) starts with SIGINT ignored, and Python then has no Ctrl-C handler;
    # give the sweep the default disposition, as in a terminal
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
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


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--repeats", "0"], "--repeats must be positive"),
        (["--nprocs", "1,x"], "--nprocs must be comma-separated integers"),
        (["--accumulate", "0"], "--accumulate values must be positive"),
        (["--grad-compression", "none,int8"], "--grad-compression: 'int8' is not one of none, fp16, bf16"),
        (["--backends", "ddp,nope"], "nope"),
        (["--threads", "0"], "--threads must be positive"),
    ],
    ids=["repeats", "nprocs", "accumulate", "compression", "backend", "threads"],
)
def test_bad_sweep_options_are_one_line_and_run_nothing(tmp_path, args, fragment):
    from tests.test_cli import assert_one_line_error

    out = tmp_path / "cmp"
    proc = run_cmd([sys.executable, "run.py", "compare", "--out", str(out), *args], timeout=60,
                   env=child_env(tmp_path), expect_rc=None)  # fmt: skip
    assert_one_line_error(proc, fragment)
    assert not (out / "results.jsonl").exists()
