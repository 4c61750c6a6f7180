"""Slurm's launch lines and srun's tasks (distbench/launching/slurm.py, launch.SRUN), without a cluster."""

import pytest

from distbench.errors import UserError
from distbench.launching import slurm
from distbench.launching.launch import ACCELERATE, HOROVODRUN, SRUN, TORCHRUN, LaunchEnv

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
    hvd = slurm.launch_step(HOROVODRUN, ALLOC, PROGRAM, 2, 4, 29400, "s")
    assert hvd[:3] == ["srun", "--nodes", "1"] and hvd[hvd.index("--nodelist") + 1] == "n1"
    assert hvd[hvd.index("horovodrun") :][:5] == ["horovodrun", "-np", "8", "-H", "10.0.0.1:4,10.0.0.2:4"]


def test_horovod_hosts_on_one_machine_and_an_allocation_too_small():
    one_host = slurm.Allocation("1", ("n1", "n2"), ("127.0.0.1", "127.0.0.1"))
    assert one_host.horovod_hosts(2) == ["localhost", "127.0.0.1"]  # the names horovodrun runs without ssh
    shared = slurm.Allocation("1", ("n1", "n2"), ("10.0.0.9", "10.0.0.9"))
    with pytest.raises(UserError, match="share the address 10.0.0.9"):
        shared.horovod_hosts(2)
    with pytest.raises(UserError, match="--nodes 4: the allocation \\(job 42\\) has 3 node\\(s\\): n1, n2, n3"):
        ALLOC.check(4)
    with pytest.raises(UserError, match="runs inside a Slurm allocation"):
        slurm.Allocation.current({})
