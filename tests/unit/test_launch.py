"""Launchers (distbench/launching/launch.py), the launch environment they give (distbench/process.py) and each
backend's launch commands as its registry entry names them (distbench/launching/commands.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distbench import machine
from distbench.backends import REGISTRY
from distbench.errors import UserError
from distbench.launching.commands import check_launch, launch_help, launchers_of, typed_command, usual_launcher
from distbench.launching.launch import (
    ACCELERATE,
    BY_HAND,
    FABRIC,
    HOROVODRUN,
    LAUNCHERS,
    PYTHON,
    TORCHRUN,
    resolve,
)
from distbench.process import LaunchEnv

TORCH_VARS = dict(RANK="1", LOCAL_RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="1")


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, LaunchEnv("python")),
        (
            {
                **TORCH_VARS,
                "TORCHELASTIC_RUN_ID": "x",
                "TORCHELASTIC_RESTART_COUNT": "2",
                "GROUP_RANK": "1",
                "GROUP_WORLD_SIZE": "2",
            },
            LaunchEnv("torchrun", 1, 1, 4, 2, restart_count=2, node_rank=1, nodes=2),
        ),
        (
            {
                **TORCH_VARS,
                "TORCHELASTIC_RUN_ID": "x",
                "ACCELERATE_MIXED_PRECISION": "no",
                "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "2",
            },
            LaunchEnv("accelerate launch", 1, 1, 4, 2, node_rank=0, nodes=2),
        ),
        (
            dict(
                HOROVOD_RANK="3",
                HOROVOD_SIZE="4",
                HOROVOD_LOCAL_RANK="1",
                HOROVOD_LOCAL_SIZE="2",
                HOROVOD_CROSS_RANK="1",
                HOROVOD_CROSS_SIZE="2",
            ),
            LaunchEnv("horovodrun", 3, 1, 4, 2, node_rank=1, nodes=2),
        ),
        # by hand: nodes of LOCAL_WORLD_SIZE processes filled in rank order
        (TORCH_VARS, LaunchEnv("env (RANK/WORLD_SIZE)", 1, 1, 4, 2, node_rank=0, nodes=2)),
        ({**TORCH_VARS, "RANK": "3"}, LaunchEnv("env (RANK/WORLD_SIZE)", 3, 1, 4, 2, node_rank=1, nodes=2)),
        # fabric run: torchrun's agent, after Fabric's CLI set its own variables
        (
            {**TORCH_VARS, "TORCHELASTIC_RUN_ID": "x", "LT_CLI_USED": "1", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2"},
            LaunchEnv("fabric run", 1, 1, 4, 2, node_rank=0, nodes=2),
        ),
    ],
    ids=["python", "torchrun", "accelerate", "horovodrun", "by-hand", "by-hand-node-1", "fabric-run"],
)
def test_each_launcher_recognises_its_environment(env, expected):
    assert LaunchEnv.read(env) == expected
    assert LaunchEnv.read(env).is_main == (expected.rank == 0)


def test_help_shows_the_commands_that_are_run():
    """The help's commands are the run commands without the loopback rendezvous."""
    help_text = launch_help()
    for name in ("ddp", "accelerate", "horovod"):
        run = typed_command(name, 2, [])
        shown = [a for a in usual_launcher(name).commands(REGISTRY[name].program([]), 2)[0]]
        assert " ".join(shown).replace(" 2 ", " N ") in help_text
        assert set(shown) <= set(run)  # the run adds its rendezvous, nothing else changes
    assert "python run.py --backend single" in help_text


def test_the_registry_names_launchers_that_launching_knows():
    """Each entry's launcher names are launchers of launching's, the usual one first (the registry holds names only,
    so a misspelt one would otherwise surface only when that backend is launched)."""
    for name, spec in REGISTRY.items():
        assert all(isinstance(launcher, str) and launcher in LAUNCHERS for launcher in spec.launchers), name
        assert [launcher.name for launcher in launchers_of(name)] == list(spec.launchers)
    assert usual_launcher("ddp") is TORCHRUN and usual_launcher("horovod") is HOROVODRUN


def test_a_backend_refuses_a_launcher_it_cannot_join_in_one_line_naming_its_usual_command():
    check_launch("ddp", LaunchEnv("torchrun", world_size=2))
    check_launch("single", LaunchEnv("python"))
    with pytest.raises(
        UserError,
        match=r"^--backend horovod was started by torchrun with 2 process\(es\), which it "
        r"cannot join; start it with: horovodrun -np N python run.py --backend horovod$",
    ):
        check_launch("horovod", LaunchEnv("torchrun", world_size=2))
    with pytest.raises(UserError, match=r"start it with: python run.py --backend single$"):
        check_launch("single", LaunchEnv("srun", world_size=2))  # one of its launchers, but not alone


def test_several_nodes():
    program = ["run.py", "--backend", "ddp"]
    hosts = ["127.0.0.1", "localhost"]
    torchrun = TORCHRUN.commands(program, 2, hosts, 29400)
    assert len(torchrun) == 2 and torchrun[0] == torchrun[1]  # one agent per node, the same command
    assert "--rdzv-endpoint" in torchrun[0] and "127.0.0.1:29400" in torchrun[0]
    accelerate = ACCELERATE.commands(program, 2, hosts, 29500)
    assert [c[c.index("--machine_rank") + 1] for c in accelerate] == ["0", "1"]
    assert all(c[c.index("--num_processes") + 1] == "4" for c in accelerate)
    (horovod,) = HOROVODRUN.commands(program, 2, hosts)
    assert horovod[:5] == ["horovodrun", "-np", "4", "-H", "127.0.0.1:2,localhost:2"]
    by_hand = BY_HAND.commands(program, 2, hosts, 29500)
    assert [c[1] for c in by_hand] == ["RANK=0", "RANK=1", "RANK=2", "RANK=3"]
    with pytest.raises(ValueError):
        PYTHON.commands(program, 2)


def test_fabric_run_ends_its_options_before_the_programs():
    """Fabric's CLI takes options after the script as its own (run.py's --precision would be Fabric's): `--` ends
    them; on several nodes each node's command has its --node-rank, meeting at the first's address."""
    program = ["run.py", "--backend", "fabric", "--precision", "bf16"]
    (one,) = FABRIC.commands(program, 2, ["127.0.0.1"], 29400)
    assert one[:9] == [
        "fabric",
        "run",
        "--devices",
        "2",
        "--main-address",
        "127.0.0.1",
        "--main-port",
        "29400",
        "run.py",
    ]
    assert one[one.index("run.py") :] == ["run.py", "--", *program[1:]]
    nodes = FABRIC.commands(program, 2, ["10.0.0.1", "10.0.0.2"], 29400)
    assert [c[c.index("--node-rank") + 1] for c in nodes] == ["0", "1"]
    assert all(c[c.index("--num-nodes") + 1] == "2" and c[c.index("--main-address") + 1] == "10.0.0.1" for c in nodes)
    (module,) = FABRIC.commands(["-m", "distbench.planning.worker", "--sizes", "4"], 2)
    assert module[module.index("run.py") :] == ["run.py", "--", "-m", "distbench.planning.worker", "--sizes", "4"]


def test_resolve_uses_this_environment():
    argv = resolve(["horovodrun", "-np", "2", "python", "run.py", "--tag", "python"])
    assert argv[0].endswith("/horovodrun") and argv[3] == sys.executable and argv[-1] == "python"


def test_default_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 4, 5}, raising=False)
    assert machine.default_threads(1) == 4 and machine.default_threads(2) == 2 and machine.default_threads(8) == 1


def test_each_library_continues_after_a_failure_under_its_own_launcher(tmp_path, monkeypatch):
    """compare --restarts: torchrun's and accelerate launch's agents restart the group; horovodrun runs Horovod
    Elastic, over the hosts its discovery script lists (a hosts file of the job's own, which a lost node leaves),
    from one node's processes to every node's; on one node it cannot continue (its one host is blacklisted): one
    line."""
    from distbench.launching import topology
    from distbench.launching.commands import restarting_launcher
    from distbench.sweep.executor import check_continues

    assert "--max-restarts=2" in restarting_launcher("ddp", 2).commands(["run.py"], 2, ["127.0.0.1"], 29400)[0]
    assert "--max_restarts" in restarting_launcher("accelerate", 2).commands(["run.py"], 2, ["127.0.0.1"], 29400)[0]
    monkeypatch.setattr(topology.tempfile, "gettempdir", lambda: str(tmp_path))
    hosts = list(topology.HOROVOD_LOCAL_HOSTS)
    horovod = topology.discovering(restarting_launcher("horovod", 2), hosts, 2)
    (argv,) = horovod.commands(["run.py"], 2, hosts)
    said = dict(zip(argv[1:-2:2], argv[2:-2:2], strict=True))
    assert said == {
        "-np": "4",
        "--min-np": "2",
        "--max-np": "4",
        "--reset-limit": "2",
        "--host-discovery-script": horovod.discovery,
    }
    script = subprocess.run([horovod.discovery], capture_output=True, text=True, check=True).stdout
    assert script.split() == ["localhost:2", "127.0.0.1:2"]
    # each job its own hosts file, which a lost node leaves (its kill-node fault: training/faults.py) and which goes
    # with the job; its processes are told where it is
    assert topology.discovering(restarting_launcher("horovod", 2), hosts, 2).discovery != horovod.discovery
    env = topology.discovery_env(horovod)
    assert env == {topology.HOROVOD_HOSTS_ENV: str(Path(horovod.discovery).with_name("hosts"))}
    topology.drop_host({**env, "HOROVOD_HOSTNAME": "127.0.0.1"})
    assert subprocess.run([horovod.discovery], capture_output=True, text=True, check=True).stdout == "localhost:2\n"
    topology.drop_host({**env, "HOROVOD_HOSTNAME": "elsewhere"})  # not one of its hosts: nothing changes
    topology.drop_host({"HOROVOD_HOSTNAME": "localhost"})  # not a Horovod Elastic job of distbench's: nothing to do
    assert Path(env[topology.HOROVOD_HOSTS_ENV]).read_text() == "localhost:2\n"
    topology.discarded(env)
    assert not Path(horovod.discovery).parent.exists()
    assert topology.discovery_env(restarting_launcher("ddp", 2)) == {}
    check_continues(horovod, 2)
    with pytest.raises(UserError, match=r"^--restarts with horovod on one node: .* give --nodes 2 or more$"):
        check_continues(horovod, 1)


def test_simulated_nodes_keep_torchruns_store_on_node_0_and_restarting_ones_may_lose_a_node():
    """On loopback every agent would match the rendezvous endpoint, and whichever bound the port first would serve the
    c10d store; node 0 is told to, as a cluster's endpoint node does, so that losing another node leaves it. With
    restarts, the agents meet at --nnodes 1:N: the job continues without a node that does not come back."""
    from distbench.launching.launch import Torchrun

    program, loopback = ["run.py"], ["127.0.0.1", "127.0.0.1"]
    plain = TORCHRUN.commands(program, 1, loopback, 29400)
    assert [c[c.index("--rdzv-conf") + 1] for c in plain] == ["is_host=1", "is_host=0"]
    assert all(c[c.index("--nnodes") + 1] == "2" and "--local-addr" not in c for c in plain)
    restarting = Torchrun(1).commands(program, 1, loopback, 29400)
    assert all(c[c.index("--nnodes") + 1] == "1:2" and "--max-restarts=1" in c for c in restarting)
    assert "--rdzv-conf" not in TORCHRUN.commands(program, 1, ["host1", "host2"], 29400)[0]  # the help's form
