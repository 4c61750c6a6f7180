"""Slurm's launch lines and srun's tasks (distbench/launching/slurm.py, launch.SRUN), without a cluster."""

import pytest

from distbench.errors import UserError
from distbench.launching import slurm
from distbench.launching.launch import ACCELERATE, DEEPSPEED, HOROVODRUN, SRUN, TORCHRUN
from distbench.process import LaunchEnv

ALLOC = slurm.Allocation("42", ("n1", "n2", "n3"), ("10.0.0.1", "10.0.0.2", "10.0.0.3"))
PROGRAM = ["run.py", "--backend", "x"]


def test_srun_tasks_are_read_from_slurms_variables_and_launchers_inside_a_step_win():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_ID": "7",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_JOB_ID": "42",
    }
    assert LaunchEnv.read(env) == LaunchEnv("srun", 3, 1, 4, 2, 0, 1, 2)
    # torchrun (or accelerate launch, horovodrun) started inside a step: the launcher's own variables decide
    inside = {**env, "TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    assert LaunchEnv.read(inside).launcher == "torchrun"
    # its c10d rendezvous may have numbered n2's agent first (GROUP_RANK 0): the node is the machine, Slurm's
    joined_first = {**inside, "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    assert (LaunchEnv.read(joined_first).node_rank, LaunchEnv.read(joined_first).nodes) == (1, 2)
    outside = {k: v for k, v in joined_first.items() if not k.startswith("SLURM_")}
    assert LaunchEnv.read(outside).node_rank == 0
    assert LaunchEnv.read({"SLURM_JOB_ID": "42", "SLURM_PROCID": "0"}).launcher == "python"  # a batch script


def test_each_library_has_its_slurm_launch_line():
    torch = slurm.launch_step(TORCHRUN, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert torch[:7] == ["srun", "--nodes", "2", "--ntasks", "2", "--ntasks-per-node", "1"]
    assert "--kill-on-bad-exit=1" in torch and "--job-name=s" in torch
    assert torch[torch.index("torchrun") :][:9] == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "4",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "10.0.0.1:29400",
    ]
    own = slurm.launch_step(SRUN, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert own[:7] == ["srun", "--nodes", "2", "--ntasks", "8", "--ntasks-per-node", "4"] and own[-4:-3] == ["python"]
    acc = slurm.launch_step(ACCELERATE, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert acc[-3:-1] == ["bash", "-c"] and acc[-1].startswith("exec accelerate launch --multi_gpu --num_processes 8")
    # the machine rank is left for each node's shell to fill in, not expanded where the step is written
    assert '--machine_rank "$SLURM_NODEID"' in acc[-1] and "--main_process_ip 10.0.0.1" in acc[-1]
    ds = slurm.launch_step(DEEPSPEED, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert ds[:7] == torch[:7] and ds[-3:-1] == ["bash", "-c"]
    # each node writes the allocation's hostfile for itself and passes its own rank, both left for its shell
    assert "printf '%s slots=4\\n' n1 n2 > \"${TMPDIR:-/tmp}/distbench-hostfile-$SLURM_JOB_ID." in ds[-1]
    assert '.$SLURM_NODEID" --no_ssh --master_addr 10.0.0.1 --master_port 29400 --node_rank "$SLURM_NODEID"' in ds[-1]
    hvd = slurm.launch_step(HOROVODRUN, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert hvd[:3] == ["srun", "--nodes", "1"] and hvd[hvd.index("--nodelist") + 1] == "n1"
    assert hvd[hvd.index("horovodrun") :][:5] == ["horovodrun", "-np", "8", "-H", "10.0.0.1:4,10.0.0.2:4"]


def test_the_launchers_that_continue_a_job_have_their_slurm_form():
    """compare --restarts on Slurm: torchrun's elastic form on every node (--nnodes 1:N, --max-restarts, the first
    node's agent hosting the store, which each node's shell works out) and accelerate launch's --max_restarts, in a
    step that a task's end does not end (a lost node's); Horovod Elastic on the first node, its discovery script
    written there; srun's own tasks: one line."""
    from distbench.launching.commands import restarting_launcher
    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.slurm import SlurmExecutor

    torch = slurm.launch_step(restarting_launcher("ddp", 2), ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert torch[:7] == ["srun", "--nodes", "2", "--ntasks", "2", "--ntasks-per-node", "1"]
    assert "--kill-on-bad-exit=0" in torch and "--no-kill" in torch and "--kill-on-bad-exit=1" not in torch
    assert torch[-3:-1] == ["bash", "-c"] and torch[-1] == (
        "exec torchrun --nnodes 1:2 --nproc_per_node 4 --max-restarts=2 --rdzv-backend c10d --rdzv-endpoint "
        '10.0.0.1:29400 --rdzv-conf "is_host=$((SLURM_NODEID == 0))" run.py --backend x'
    )
    acc = slurm.launch_step(restarting_launcher("accelerate", 1), ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert "--kill-on-bad-exit=0" in acc and acc[-1].startswith("exec accelerate launch --max_restarts 1 --multi_gpu")
    executor = SlurmExecutor(alloc=ALLOC, restarts=1)
    assert executor.launcher("deepspeed").name == executor.launcher("fabric").name == "torchrun"
    assert executor.launcher("single") is not None  # the reference runs as it always does
    hvd = slurm.launch_step(executor.launcher("horovod"), ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert hvd[:3] == ["srun", "--nodes", "1"] and hvd[hvd.index("--nodelist") + 1] == "n1"
    script = '"${TMPDIR:-/tmp}/distbench-discover-$SLURM_JOB_ID.$SLURM_STEP_ID.sh"'
    assert hvd[-3:-1] == ["bash", "-c"] and hvd[-1] == (
        f"trap 'rm -f {script}' EXIT; printf '%s' '#!/bin/sh\necho 10.0.0.1:4\necho 10.0.0.2:4\n' > {script} "
        f"&& chmod +x {script} && horovodrun -np 8 --min-np 4 --max-np 8 --reset-limit 1 --host-discovery-script "
        f"{script} python run.py --backend x"
    )
    executor.check([SweepConfig(task="mnist", backend="horovod", world_size=2, threads=1, nodes=2)])
    with pytest.raises(UserError, match=r"^--restarts 1 with --slurm-launch srun: srun's own tasks restart nothing"):
        SlurmExecutor("srun", alloc=ALLOC, restarts=1).check(
            [SweepConfig(task="mnist", backend="ddp", world_size=2, threads=1, nodes=2)]
        )
    with pytest.raises(UserError, match=r"^--fault kill-node:1@15:60 starts a simulated node again; under --sched"):
        executor.check(
            [SweepConfig(task="mnist", backend="ddp", world_size=2, threads=1, nodes=2, fault="kill-node:1@15:60")]
        )


def test_horovod_hosts_on_one_machine_and_an_allocation_too_small():
    one_host = slurm.Allocation("1", ("n1", "n2"), ("127.0.0.1", "127.0.0.1"))
    assert one_host.horovod_hosts(2) == ["localhost", "127.0.0.1"]  # the names horovodrun runs without ssh
    three = slurm.Allocation("1", ("n1", "n2", "n3"), ("127.0.0.1",) * 3)
    with pytest.raises(UserError, match="--nodes 3: these nodes share this machine's address"):
        three.horovod_hosts(3)  # 127.0.0.2 is a name only a local run's own network namespace has
    shared = slurm.Allocation("1", ("n1", "n2"), ("10.0.0.9", "10.0.0.9"))
    with pytest.raises(UserError, match="share the address 10.0.0.9"):
        shared.horovod_hosts(2)
    with pytest.raises(UserError, match="--nodes 4: the allocation \\(job 42\\) has 3 node\\(s\\): n1, n2, n3"):
        ALLOC.check(4)
    with pytest.raises(UserError, match="runs inside a Slurm allocation"):
        slurm.Allocation.current({})


def test_a_slurm_run_is_a_named_step_cancelled_when_it_ends_and_its_record_has_the_schedulers_facts(
    tmp_path, monkeypatch
):
    """SlurmExecutor.run without a cluster: its step's srun replaced by a python that writes the record."""
    import sys

    from distbench.sweep.configuration import SweepConfig
    from distbench.sweep.slurm import SlurmExecutor

    executor, cancelled = SlurmExecutor(alloc=ALLOC), []
    monkeypatch.setattr(slurm, "cancel", lambda job, name: cancelled.append((job, name)))
    out = tmp_path / "r.json"
    write = f"import json; json.dump({{'topology': {{'rank_nodes': [1, 0]}}}}, open({str(out)!r}, 'w'))"
    names = []

    def command(config, args, name, program=None):
        names.append(name)
        return [sys.executable, *(program or ["-c", write])], {"A": "x y"}

    monkeypatch.setattr(executor, "command", command)
    config = SweepConfig(task="mnist", backend="ddp", world_size=2, threads=1, nodes=2)
    rec = executor.run(config, [], out, tmp_path / "r.log", 60)
    assert rec["status"] == "ok" and rec["command"].startswith(f"A='x y' {sys.executable} -c ")
    assert rec["scheduler"] == {
        "name": "slurm",
        "job_id": "42",
        "nodes": ["n1", "n2"],
        "node_addrs": ["10.0.0.1", "10.0.0.2"],
        "rank_nodes": ["n2", "n1"],
    }
    assert cancelled == [("42", names[0])]  # the step, by its own name, once its srun ended
    hung = executor.run(
        config, [], tmp_path / "none.json", tmp_path / "h.log", 1, ["-c", "import time; time.sleep(60)"]
    )
    assert hung["status"] == "failed" and cancelled[1:] == [("42", names[1])] * 2  # on the timeout, then after it


# ---- run.py slurm-script (distbench/sweep/slurm.py) ----------------------------------------------------------------
def _slurm_script(capsys, *args) -> tuple[str, str, int]:
    """run.py slurm-script ARGS in-process: (stdout, stderr, exit code)."""
    from distbench.cli import main

    code = main(["slurm-script", *map(str, args)])
    got = capsys.readouterr()
    return got.out, got.err, code


def test_the_script_runs_from_the_submit_directory_and_names_no_path_of_the_machine_that_wrote_it(capsys, monkeypatch):
    import sys

    from distbench.sweep import slurm as sweep_slurm
    from tests.helpers import ROOT

    monkeypatch.chdir(ROOT)  # where a user writes it
    # ... on a filesystem every node sees; this checkout may itself lie under /tmp (CI's clone may): the warning for
    # node-local storage has tests of its own
    monkeypatch.setattr(sweep_slurm, "NODE_LOCAL", ())
    text, err, code = _slurm_script(capsys, "--out", "results/mnist", "--", "--repeats", "5")
    assert code == 0 and err == ""
    for local in (str(ROOT), sys.executable, str(ROOT / ".venv")):
        assert local not in text, local
    lines = text.splitlines()
    assert 'cd "$SLURM_SUBMIT_DIR"' in lines and 'export PATH="$PWD"/.venv/bin:$PATH' in lines
    assert "#SBATCH --output=results/mnist-slurm-%j.log" in lines
    assert lines[-1] == "python run.py compare --scheduler slurm --nodes 2 --nprocs 1 --out results/mnist --repeats 5"


@pytest.mark.parametrize("workdir", ["/shared/distbench", "distbench"])
def test_the_script_runs_in_the_workdir_with_the_venv_given(capsys, tmp_path, workdir):
    """#SBATCH --chdir starts the job in --workdir (a relative one: from where sbatch is called), and nothing moves
    it again (a cd into a relative workdir from inside it would fail)."""
    text, _, code = _slurm_script(capsys, "--workdir", workdir, "--venv", "/shared/env", "--out", "r/x")
    lines = text.splitlines()
    assert code == 0 and f"#SBATCH --chdir={workdir}" in lines and not any(x.startswith("cd ") for x in lines)
    assert "export PATH=/shared/env/bin:$PATH" in lines
    assert "[ -x /shared/env/bin/python ]" in text  # a missing environment is one line in the job's log


def test_the_script_stops_with_one_line_where_the_environment_is_missing(capsys, tmp_path):
    """The script, run by bash as a job would run it: from a directory without .venv it says so and exits 2."""
    import subprocess

    text, _, _ = _slurm_script(capsys, "--out", "r")
    job = tmp_path / "job.sh"
    job.write_text(text)
    proc = subprocess.run(
        ["bash", str(job)],
        cwd=tmp_path,
        env={"SLURM_SUBMIT_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: no Python environment at {tmp_path}/.venv (--venv)"


@pytest.mark.parametrize("value", ["10", "90", "10:30", "01:00:00", "48:00:00", "2-12", "2-12:30", "2-12:30:15"])
def test_slurms_time_forms_are_accepted(value):
    from distbench.sweep.slurm import check_time

    check_time(value)


@pytest.mark.parametrize(
    "value,fragment",
    [
        ("25:99:99", "(minutes or seconds below 60, got 99)"),
        ("10:60", "(minutes or seconds below 60, got 60)"),
        ("1-24", "(hours below 24, got 24)"),
        ("1-10:60", "(minutes below 60, got 60)"),
        ("1-10:00:75", "(seconds below 60, got 75)"),
        ("soon", "Slurm's forms are MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS"),
        ("1:2:3:4", "Slurm's forms are"),
    ],
)
def test_a_time_limit_out_of_slurms_forms_is_one_line(capsys, value, fragment):
    _, err, code = _slurm_script(capsys, "--time", value, "--out", "r")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --time {value!r}: ") and fragment in err


def test_nprocs_beside_gpus_per_node_is_one_line(capsys):
    _, err, code = _slurm_script(capsys, "--nprocs", "2", "--gpus-per-node", "4", "--out", "r")
    assert code == 2 and err == (
        "error: --nprocs 2 with --gpus-per-node 4: with GPUs each node runs one process per GPU; leave out --nprocs\n"
    )
    text, _, code = _slurm_script(capsys, "--nprocs", "4", "--gpus-per-node", "4", "--out", "r")  # the same: fine
    assert code == 0 and "#SBATCH --ntasks-per-node=4" in text


@pytest.mark.parametrize(
    "args,local",
    [
        (["--out", "/tmp/results"], True),
        (["--out", "/dev/shm/r"], True),
        (["--out", "/var/tmp/r"], True),
        (["--workdir", "/tmp/distbench", "--out", "results"], True),  # relative to node-local storage
        (["--workdir", "/shared", "--out", "../tmp/results"], True),
        (["--out", "/tmp/../shared/results"], False),
        (["--out", "/tmpfs/results"], False),
        (["--out", "/shared/results"], False),
        (["--workdir", "/shared/distbench", "--out", "results"], False),
    ],
)
def test_a_node_local_out_gets_a_one_line_warning(capsys, args, local):
    text, err, code = _slurm_script(capsys, *args)
    assert code == 0 and text.startswith("#!/bin/bash")  # the script is written all the same
    if local:
        assert err.count("\n") == 1 and err.startswith("warning: --out ") and "node-local" in err
    else:
        assert err == ""


def test_a_relative_out_is_read_from_where_the_script_is_written(capsys, monkeypatch):
    monkeypatch.chdir("/tmp")
    _, err, _ = _slurm_script(capsys, "--out", "results")
    assert err.startswith("warning: --out results is on node-local storage")
