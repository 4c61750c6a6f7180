"""Simulated nodes (distbench/launching/topology.py) and the shaped link (distbench/launching/link.py), without
launching."""

import tempfile

import pytest

from distbench.errors import UserError
from distbench.launching import link, topology
from distbench.launching.launch import ACCELERATE, DEEPSPEED, HOROVODRUN, TORCHRUN


@pytest.fixture(autouse=True)
def own_temporary_folder(tmp_path, monkeypatch):
    """The simulated DeepSpeed nodes' hostfile is written in the temporary folder: the test's own here."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_nodes_get_disjoint_equal_shares_of_the_cores():
    sim = topology.SimulatedNodes.split(2, [0, 1, 2, 3, 5])
    assert sim.node_cores == ((0, 1), (2, 3))  # the odd core left out: every node the same size
    assert topology.SimulatedNodes.parse(sim.env_value()) == sim
    with pytest.raises(UserError, match="needs a core of its own"):
        topology.SimulatedNodes.split(3, [0, 1])


@pytest.mark.parametrize("launcher,agents", [(TORCHRUN, 2), (ACCELERATE, 2), (HOROVODRUN, 1), (DEEPSPEED, 2)])
def test_each_launcher_starts_simulated_nodes_in_its_multi_node_form(launcher, agents):
    started = topology.node_launch(launcher, ["run.py", "--backend", "x"], 2, 1)
    assert len(started.commands) == agents
    assert started.env[topology.NODE_CORES_ENV].count("/") == 1
    if agents == 2:  # one agent per node, each under taskset on its own node's cores
        cores = [cmd[2] for cmd in started.commands]
        assert [cmd[0] for cmd in started.commands] == ["taskset", "taskset"] and cores[0] != cores[1]
        flag = {TORCHRUN: "--nnodes", ACCELERATE: "--num_machines", DEEPSPEED: "--node_rank"}[launcher]
        assert [cmd[cmd.index(flag) + 1] for cmd in started.commands] == (
            ["0", "1"] if flag == "--node_rank" else ["2"] * 2
        )
    else:  # one horovodrun, two host names it runs without ssh
        assert "localhost:1,127.0.0.1:1" in started.commands[0]
    # beyond two, horovodrun's hosts are loopback addresses that only distbench's private namespace has (executor)
    assert topology.hosts(HOROVODRUN, 4) == ["localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert topology.horovod_aliases(2) == [] and topology.horovod_aliases(4) == ["127.0.0.2", "127.0.0.3"]
    with pytest.raises(UserError):
        topology.hosts(HOROVODRUN, topology.HOROVOD_MAX_NODES + 1)


def test_deepspeeds_simulated_nodes_read_one_hostfile_of_their_slots():
    """Every node's `deepspeed --no_ssh` reads the same hostfile, which lists each node's processes in rank order."""
    started = topology.node_launch(DEEPSPEED, ["run.py", "--backend", "deepspeed"], 2, 3)
    (hostfile,) = {cmd[cmd.index("--hostfile") + 1] for cmd in started.commands}
    assert open(hostfile).read() == "node0 slots=3\nnode1 slots=3\n"
    assert all("--no_ssh" in cmd and cmd[cmd.index("--num_gpus") + 1] == "3" for cmd in started.commands)


def test_confine_picks_this_node_and_refuses_a_mismatch(monkeypatch):
    from distbench.process import LaunchEnv

    pinned = []
    monkeypatch.setattr(topology, "pin_threads", pinned.append)
    env = {topology.NODE_CORES_ENV: "0/1"}
    assert topology.confine(LaunchEnv("torchrun", 1, 0, 2, 1, node_rank=1, nodes=2), env) == (1,)
    assert pinned == [[1]]
    assert topology.confine(LaunchEnv("torchrun"), {}) is None
    with pytest.raises(UserError, match="describes 2 simulated node"):
        topology.confine(LaunchEnv("torchrun", 0, 0, 2, 2, node_rank=0, nodes=1), env)


@pytest.mark.parametrize("text,bits", [("100mbit", 1e8), ("1gbit", 1e9), ("2.5gbit", 2.5e9), ("none", None)])
def test_link_rates_are_read_as_tc_writes_them(text, bits):
    assert link.parse_rate(text) == bits


@pytest.mark.parametrize("text", ["100mb", "fast", "100", "0mbit", "10kbit", "-1gbit"])
def test_a_bad_link_rate_is_refused(text):
    with pytest.raises(UserError, match="--link-rate"):
        link.parse_rate(text)


def test_tc_is_never_run_outside_the_private_namespace(monkeypatch):
    monkeypatch.delenv(link.OUTER_NETNS_ENV, raising=False)
    with pytest.raises(RuntimeError, match="refusing"):
        link.shape("100mbit")
    monkeypatch.setenv(link.OUTER_NETNS_ENV, link.netns())  # "started here": this namespace is the host's
    with pytest.raises(RuntimeError, match="refusing"):
        link.shape("100mbit")
