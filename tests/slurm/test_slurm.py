"""`compare --scheduler slurm` on the test cluster of two nodes (n1 on one core, n2 on the other): each library
started its Slurm way reproduces the single process, a killed task ends its step, the sbatch script runs its sweep,
and bad input is one line."""

import json
import subprocess
import sys

import pytest

from benchmarks.faults import taken_down
from distbench.training import fairness
from tests.conftest import EQUIVALENCE_STEPS, MNIST_STEPS
from tests.helpers import ROOT, assert_one_line_error, child_env, follows_after_resizing, py, run_cmd

SWEEP = f"--task mnist --dropout 0 --batch-size 64 --max-steps {MNIST_STEPS} --nodes 2 --nprocs 1"


def _salloc(*cmd) -> list[str]:
    return ["salloc", "--nodes", "2", "--quiet", *cmd]


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _follows(rec: dict, reference: dict) -> None:
    """The run reproduces single x1's loss history (conftest.EQUIVALENCE_STEPS) and evaluates every sample once."""
    losses, ref = rec["loss_history"], reference["loss_history"]
    assert len(losses) == len(ref) == MNIST_STEPS
    early = max(abs(a - b) for a, b in zip(losses[:EQUIVALENCE_STEPS], ref, strict=False))
    assert early < fairness.LOSS_TOLERANCE, (rec["backend"], rec["launcher"], early)
    assert rec["eval_count"] == reference["eval_count"] == 500


def _on_both_nodes(rec: dict) -> None:
    """The record names nodes n1 and n2, one rank on each (in either order: torchrun's rendezvous numbers the nodes'
    ranks in the order their agents joined), and the two ranks ran on different cores."""
    sched, topo = rec["scheduler"], rec["topology"]
    assert sched["name"] == "slurm" and sched["nodes"] == ["n1", "n2"] and sorted(sched["rank_nodes"]) == ["n1", "n2"]
    assert sched["node_addrs"] == ["127.0.0.1", "127.0.0.1"] and sched["job_id"]
    assert topo["nodes"] == 2 and not topo["simulated"]
    cores = topo["rank_cores"]
    assert len(cores) == 2 and cores[0] and cores[1] and not set(cores[0]) & set(cores[1]), cores


@pytest.fixture(scope="module")
def usual_sweep(slurm_conf, tmp_path_factory):
    """Each launcher's Slurm form at 2 nodes x 1 process, with a library it starts (fsdp starts as ddp does,
    accelerate-fsdp and accelerate-deepspeed as accelerate does; fabric as srun's tasks, which Fabric reads itself);
    one round (the verdicts of several: tests/multiproc/test_compare.py)."""
    tmp = tmp_path_factory.mktemp("slurm-usual")
    out = tmp / "sweep"
    backends = "single,ddp,accelerate,horovod,deepspeed,fabric"
    cmd = py(f"run.py compare --scheduler slurm --backends {backends} {SWEEP} --out", out)
    run_cmd(_salloc(*cmd), timeout=900, env=child_env(tmp, SLURM_CONF=str(slurm_conf)))
    return out


@pytest.mark.timeout(1000)
def test_each_library_on_two_nodes_reproduces_the_single_process(usual_sweep):
    recs = _records(usual_sweep)
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    reference = next(r for r in recs if r["backend"] == "single")
    launchers = {}
    for rec in (r for r in recs if r["backend"] != "single"):
        _follows(rec, reference)
        _on_both_nodes(rec)
        launchers[rec["backend"]] = rec["launcher"]
    assert launchers == {
        "ddp": "torchrun",
        "accelerate": "accelerate launch",
        "horovod": "horovodrun",
        "deepspeed": "deepspeed",
        "fabric": "srun",  # Fabric's own on Slurm: one srun task per process (launching/launch.FabricRun)
    }
    assert "srun --nodes 2 --ntasks 2 --ntasks-per-node 1" in next(r for r in recs if r["backend"] == "ddp")["command"]


@pytest.mark.timeout(1000)
def test_a_two_round_slurm_sweep_writes_the_usual_report_with_verdicts(usual_sweep):
    report = (usual_sweep / "report.md").read_text()
    assert "### Verdicts" in report and "| ddp x2 |" in report and "| horovod x2 |" in report
    assert "horovod x2 vs ddp x2" in report or "horovod x2 is" in report
    assert "- nodes: 1, 2, Slurm's (job steps of job" in report
    assert len(_records(usual_sweep)) == 6  # 6 configurations, one round


@pytest.mark.timeout(600)
def test_a_killed_task_ends_its_step_the_failure_is_recorded_and_the_next_run_succeeds(slurm_env, tmp_path):
    """ddp on 2 nodes, its rank 1 (on n2) killed after step 5; then ddp on the same 2 nodes without the fault (a
    single round runs the configurations in the order the axes' values were given)."""
    out, timeout_s = tmp_path / "sweep", 60
    env = slurm_env
    cmd = py(
        "run.py compare --scheduler slurm --backends ddp --nodes 2 --nprocs 1 --fault kill:1@5,none --max-steps 200 "
        "--run-timeout-s",
        timeout_s,
        "--extra",
        f"--timeout-s {timeout_s}",
        "--out",
        out,
    )
    run_cmd(_salloc(*cmd), timeout=timeout_s * 4, env=env, expect_rc=1)  # a run failed: the sweep says so
    single, killed, after = _records(out)  # in the plan's order: the reference, then ddp with the fault, without
    assert (killed["backend"], killed["nodes"], killed["status"]) == ("ddp", 2, "failed"), killed
    assert killed["fault_spec"] == "kill:1@5" and killed["elapsed_s"] < timeout_s + 30
    assert (after["nodes"], after["status"], after["config"]["fault"], single["status"]) == (2, "ok", "none", "ok")
    steps = subprocess.run(["squeue", "--steps", "--noheader"], capture_output=True, text=True, env=env)
    assert steps.stdout.strip() == ""  # nothing of the failed step is left on either node
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert left.stdout.strip() == ""


@pytest.mark.timeout(600)
def test_horovod_elastic_continues_on_the_first_node_when_the_second_is_lost(slurm_env, tmp_path):
    """`compare --restarts 1` with horovod on Slurm: Horovod Elastic, one horovodrun on n1 whose discovery script n1's
    shell wrote (the allocation's hosts); every process of node 1 killed after step 15: horovodrun blacklists its
    host, and rank 0 rolls back to its commit at step 10 and continues alone, within float tolerance of the
    fault-free run (the global batch kept and split over fewer ranks; dropout off). Nothing is left on either node."""
    out = tmp_path / "sweep"
    cmd = py(
        "run.py compare --scheduler slurm --backends horovod --nodes 2 --nprocs 1 --restarts 1 --max-steps 30 "
        "--checkpoint-every 10 --dropout 0 --timeout-s 60 --fault none,kill-node:1@15 --out",
        out,
    )
    run_cmd(_salloc(*cmd), timeout=500, env=slurm_env)
    runs = {r["config"]["fault"]: r for r in _records(out) if r["backend"] == "horovod"}
    rec, free = runs["kill-node:1@15"], runs["none"]
    cost = rec["fault"]
    print(f"horovod on Slurm, node 1 lost: {cost}")
    assert (rec["status"], rec["resumed_from_step"], rec["steps"], rec["nodes"]) == ("ok", 10, 30, 2), rec.get("error")
    assert (cost["met"], cost["attempts"], cost["steps_redone"]) == (True, 2, 5)
    assert (cost["world_size_after"], cost["nodes_after"], rec["topology"]["nodes"]) == (1, 1, 1)
    assert "--host-discovery-script" in rec["command"] and rec["scheduler"]["name"] == "slurm"
    follows_after_resizing(rec, free, 10)
    report = (out / "report.md").read_text()  # the Faults section says the job continued smaller
    assert "| horovod x2 fault kill-node:1@15 | `kill-node:1@15` | 1 of 1 (x1 after) |" in report
    steps = subprocess.run(["squeue", "--steps", "--noheader"], capture_output=True, text=True, env=slurm_env)
    assert steps.stdout.strip() == ""


@pytest.mark.timeout(1000)
def test_torchrun_continues_a_job_when_slurm_takes_a_node_down(slurm_env, tmp_path):
    """A node that Slurm itself takes down mid-run, in an allocation made with `--no-kill` (without it Slurm would end
    the whole job): Slurm kills n2's tasks and takes n2 out of the job; ddp under torchrun's elastic form (`compare
    --restarts 1`) continues on n1 from its last checkpoint. No --fault asked for it: the record says the run was
    launched on 2 nodes and continued after a failure nobody planned (`fault.kind` unplanned, x1 after), and the
    sweep's progress line says so. n2 is back in service after. (A lost node by --fault kill-node under Slurm, every
    library: benchmarks/faults.py slurm, docs/faults.md; the same launch form continuing without it: this test.)"""
    out = tmp_path / "sweep"
    said = taken_down(out, slurm_env)  # DOWN_COMMAND, as benchmarks/faults.py runs it for docs/faults.md
    rec = next(r for r in _records(out) if r["backend"] == "ddp")
    assert rec["status"] == "ok", rec.get("error")
    cost = rec["fault"]
    print(f"ddp on Slurm, n2 taken down by Slurm: {cost}; resumed from step {rec['resumed_from_step']}")
    assert (rec["world_size"], rec["nodes"], rec["steps"], rec["topology"]["nodes"]) == (2, 2, 300, 1)
    assert (cost["kind"], cost["attempts"], cost["world_size_after"], cost["nodes_after"]) == ("unplanned", 2, 1, 1)
    assert 0 < rec["resumed_from_step"] < 300 and rec["resumed_from_step"] % 10 == 0
    assert "continued after a failure (x1 after)" in said


@pytest.mark.timeout(600)
def test_the_generated_sbatch_script_runs_ddp_started_by_srun_itself(slurm_env, tmp_path):
    """The script sbatch runs: its sweep (ddp, each process an srun task of its own, the reference one srun task)
    reproduces the single process on both nodes and ends in its report."""
    out, script = tmp_path / "sweep", tmp_path / "job.sbatch"
    sweep = f"--backends single,ddp --slurm-launch srun --dropout 0 --batch-size 64 --max-steps {MNIST_STEPS}"
    cmd = py("run.py slurm-script --nodes 2 --nprocs 1 --time 10 --out", out, "--script", script, "--", *sweep.split())
    run_cmd(cmd, timeout=60, env=slurm_env)
    assert "#SBATCH --nodes=2" in script.read_text() and "--scheduler slurm" in script.read_text()
    run_cmd(["sbatch", "--wait", str(script)], timeout=500, env=slurm_env)
    assert "| ddp x2 |" in (out / "report.md").read_text()
    recs = _records(out)
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    ddp, single = (next(r for r in recs if r["backend"] == b) for b in ("ddp", "single"))
    assert ddp["launcher"] == single["launcher"] == "srun"  # the reference too: one srun task
    assert ddp["command"].startswith("MASTER_ADDR=127.0.0.1 MASTER_PORT=")
    _follows(ddp, single)
    _on_both_nodes(ddp)


def test_slurm_outside_an_allocation_is_one_line(tmp_path):
    env = {k: v for k, v in child_env(tmp_path).items() if not k.startswith("SLURM_")}
    proc = run_cmd(
        py("run.py compare --scheduler slurm --backends ddp --nodes 2 --nprocs 1 --out", tmp_path / "s"),
        timeout=60,
        env=env,
        expect_rc=2,
    )
    assert_one_line_error(proc, "--scheduler slurm runs inside a Slurm allocation")
    assert not (tmp_path / "s").exists()


@pytest.mark.timeout(300)
def test_more_nodes_than_the_allocation_is_one_line(slurm_env, tmp_path):
    # a global batch that 3 processes split: the allocation is the only thing that cannot run
    args = "run.py compare --scheduler slurm --backends ddp --nodes 3 --nprocs 1 --batch-size 48 --out"
    cmd = py(args, tmp_path / "s")
    proc = run_cmd(_salloc(*cmd), timeout=120, env=slurm_env, expect_rc=2)
    assert "error: --nodes 3: the allocation (job " in proc.stderr and "has 2 node(s): n1, n2" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "s").exists()


@pytest.mark.timeout(300)
def test_a_partition_slurm_refuses_is_one_line(slurm_env, tmp_path):
    # an --out every node of a cluster would see (never written: sbatch refuses the job); tmp_path is node-local
    cmd = py("run.py slurm-script --partition nope --submit --out /shared/results/s --script", tmp_path / "j.sh")
    proc = run_cmd(cmd, timeout=120, env=slurm_env, expect_rc=2)
    assert_one_line_error(proc, "sbatch refused the job", "invalid partition")


def test_the_script_is_written_as_documented(tmp_path):
    proc = run_cmd(
        py(
            "run.py slurm-script --nodes 2 --gpus-per-node 2 --cpus-per-task 3 --partition gpu --time 01:00:00 --out",
            tmp_path / "s",
            "--",
            "--repeats",
            "5",
        ),
        timeout=60,
    )
    text = proc.stdout
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --cpus-per-task=3",
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=01:00:00",
    ):
        assert line in text, line
    assert f"run.py compare --scheduler slurm --nodes 2 --nprocs 2 --out {tmp_path / 's'} --repeats 5" in text
    assert 'cd "$SLURM_SUBMIT_DIR"' in text and str(ROOT) not in text and sys.executable not in text
    bad = run_cmd(py("run.py slurm-script --time soon --out", tmp_path / "s"), timeout=60, expect_rc=2)
    assert_one_line_error(bad, "--time 'soon'")
