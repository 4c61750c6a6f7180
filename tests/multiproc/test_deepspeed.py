"""DeepSpeed's ZeRO stages, natively (started by its own launcher) and through Accelerate: every stage follows the
single process, and its own checkpoint resumes exactly. (Stage 0 under every check of the other backends:
test_equivalence, test_knobs, test_bert, test_contract, check-task.)"""

import json

import pytest

from distbench.training import fairness
from tests.conftest import EQUIVALENCE_STEPS
from tests.helpers import assert_one_line_error, child_env, launch, py, read_record, run_cmd, run_in, run_py


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_every_zero_stage_follows_the_single_process(tmp_path, mnist_run):
    """One sweep over --zero-stage 1,2,3 of DeepSpeed natively (its own launcher) and through Accelerate (accelerate
    launch): each reproduces single x1's first steps and evaluates every test sample once. (That the axis does not
    multiply other backends' runs: tests/unit/test_plan.py.)"""
    out = tmp_path / "sweep"
    cmd = py(
        f"run.py compare --backends deepspeed,accelerate-deepspeed --nprocs 2 --zero-stage 1,2,3 --max-steps "
        f"{EQUIVALENCE_STEPS} --dropout 0 --batch-size 64 --threads 1 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=560)
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    ran = sorted((r["backend"], r["config"]["zero_stage"]) for r in recs if r["backend"] != "single")
    assert ran == [(b, k) for b in ("accelerate-deepspeed", "deepspeed") for k in (1, 2, 3)]
    single = mnist_run("single", 1)["loss_history"][:EQUIVALENCE_STEPS]
    for r in (r for r in recs if r["backend"] != "single"):
        diff = max(abs(a - b) for a, b in zip(r["loss_history"], single, strict=True))
        print(f"{r['backend']} x2 ZeRO-{r['config']['zero_stage']} vs single x1: max per-step loss diff {diff:.2e}")
        assert diff < fairness.LOSS_TOLERANCE and r["eval_count"] == 500
        assert r["launcher"] == ("deepspeed" if r["backend"] == "deepspeed" else "accelerate launch")
        assert r["memory_per_rank"]["params_bytes"] is None  # not counted yet
    report = (out / "report.md").read_text()
    assert "ZeRO-3" in report and "ZeRO-1" in report


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_a_killed_zero2_run_resumes_from_deepspeeds_own_checkpoint_exactly(tmp_path):
    """Each rank writes its ZeRO-2 partition through DeepSpeed's save_checkpoint; a run killed at step 15 resumes
    from step 10 and ends where the uninterrupted run ends; at another world size the checkpoint is refused."""
    common = ["--no-progress", "--threads", "1", "--timeout-s", "60", "--zero-stage", "2", "--max-steps", "20"]

    def args(name):
        ckpt, out = tmp_path / f"ckpt-{name}", tmp_path / f"{name}.json"
        return [*common, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--output", str(out)], ckpt, out

    straight, _, straight_out = args("straight")
    run_cmd(launch("deepspeed", 2, straight), timeout=240, env=child_env(tmp_path))
    resumed, ckpt, out = args("resumed")
    fault = child_env(tmp_path, DISTBENCH_FAULT="kill:1:15")
    killed = run_cmd(launch("deepspeed", 2, resumed), timeout=240, env=fault, expect_rc=None)
    assert killed.returncode != 0 and not out.exists()
    assert sorted(p.name for p in (ckpt / "deepspeed").iterdir() if p.is_dir()) == ["step10"]
    again = run_cmd(launch("deepspeed", 2, resumed), timeout=240, env=child_env(tmp_path))
    assert "resuming from" in again.stderr and "at step 10" in again.stderr
    a, b = read_record(straight_out), read_record(out)
    assert b["resumed_from_step"] == 10
    assert a["loss_history"] == b["loss_history"] and a["param_checksum"] == b["param_checksum"]
    assert sorted(p.name for p in (ckpt / "deepspeed").iterdir() if p.is_dir()) == ["step20"]  # the older pruned
    one = run_py(["--backend", "deepspeed", *common, "--checkpoint-dir", str(ckpt)], tmp_path, expect_rc=None)
    assert_one_line_error(one, "deepspeed's own checkpoint of 2 processes", "this run has 1")
