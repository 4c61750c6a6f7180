"""Simulated nodes and the shaped link: each library's multi-node launcher form on one host, on disjoint cores,
over a loopback rate-limited inside a private network namespace (distbench/topology.py, distbench/link.py)."""

import json
import os
import sys

import pytest

from backends import REGISTRY
from distbench import link, topology
from distbench.compare import launch_config, plan_runs, run_one
from distbench.errors import UserError
from distbench.launch import ACCELERATE, HOROVODRUN, TORCHRUN, resolve
from tests.conftest import MNIST_ARGS, MNIST_STEPS
from tests.helpers import ROOT, child_env, run_cmd

# ---- unit: the split of the cores, the commands, the rates ------------------------------------------------------


def test_nodes_get_disjoint_equal_shares_of_the_cores():
    sim = topology.SimulatedNodes.split(2, [0, 1, 2, 3, 5])
    assert sim.node_cores == ((0, 1), (2, 3))  # the odd core left out: every node the same size
    assert topology.SimulatedNodes.parse(sim.env_value()) == sim
    with pytest.raises(UserError, match="needs a core of its own"):
        topology.SimulatedNodes.split(3, [0, 1])


@pytest.mark.parametrize("launcher,agents", [(TORCHRUN, 2), (ACCELERATE, 2), (HOROVODRUN, 1)])
def test_each_launcher_starts_simulated_nodes_in_its_multi_node_form(launcher, agents):
    started = topology.node_launch(launcher, ["run.py", "--backend", "x"], 2, 1)
    assert len(started.commands) == agents
    assert started.env[topology.NODE_CORES_ENV].count("/") == 1
    if agents == 2:  # one agent per node, each under taskset on its own node's cores
        cores = [cmd[2] for cmd in started.commands]
        assert [cmd[0] for cmd in started.commands] == ["taskset", "taskset"] and cores[0] != cores[1]
        flag = "--nnodes" if launcher is TORCHRUN else "--num_machines"
        assert all(cmd[cmd.index(flag) + 1] == "2" for cmd in started.commands)
    else:  # one horovodrun, two host names it runs without ssh
        assert "localhost:1,127.0.0.1:1" in started.commands[0]
    with pytest.raises(UserError):
        topology.hosts(HOROVODRUN, 3)


def test_confine_picks_this_node_and_refuses_a_mismatch(monkeypatch):
    from distbench.launch import LaunchEnv

    pinned = []
    monkeypatch.setattr(topology, "pin_threads", pinned.append)
    env = {topology.NODE_CORES_ENV: "0/1"}
    assert topology.confine(LaunchEnv("torchrun", 1, 0, 2, 1, node_rank=1, nodes=2), env) == (1,)
    assert pinned == [[1]]
    assert topology.confine(LaunchEnv("torchrun"), {}) is None
    with pytest.raises(UserError, match="describes 2 simulated node"):
        topology.confine(LaunchEnv("torchrun", 0, 0, 2, 2, node_rank=0, nodes=1), env)


def test_the_sweep_plans_nodes_and_link_rates_as_axes():
    runs = plan_runs(["single", "ddp"], [1], threads=1, nodes=(1, 2), link_rates=("none", "100mbit"))
    assert [(r.backend, r.world_size, r.nodes, r.link_rate) for r in runs] == [
        ("single", 1, 1, "none"),  # single: one node, unshaped only
        ("ddp", 1, 1, "none"), ("ddp", 1, 1, "100mbit"), ("ddp", 2, 2, "none"), ("ddp", 2, 2, "100mbit"),
    ]  # fmt: skip


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


# ---- CLI: one line, exit 2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (["compare", "--out", "{tmp}/s", "--link-rate", "100mb"], "--link-rate '100mb' is not a rate"),
        (["simulate", "--backend", "ddp", "--link-rate", "fast"], "--link-rate 'fast' is not a rate"),
        (["compare", "--out", "{tmp}/s", "--nodes", "64"], "--nodes 64: each simulated node needs a core"),
        (["simulate", "--backend", "single"], "--backend single runs one process"),
    ],
    ids=["compare-rate", "simulate-rate", "too-many-nodes", "simulate-single"],
)
def test_bad_topology_options_are_one_line(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_cmd([sys.executable, "run.py", *args], timeout=60, env=child_env(tmp_path), expect_rc=2)
    assert proc.stderr.strip().splitlines() == [f"error: {proc.stderr.split('error: ', 1)[1].strip()}"]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing started, nothing written


# ---- multi-process: 2 nodes x 1 process under each launcher ------------------------------------------------


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["ddp", "accelerate", "horovod"])
def test_two_simulated_nodes_reproduce_one_node_of_two(tmp_path, mnist_run, backend):
    out = tmp_path / "r.json"
    started = launch_config(backend, 2, 2, [*MNIST_ARGS, "--output", str(out)])
    rec = run_one([resolve(c) for c in started.commands], out, 240, tmp_path / "log", {**child_env(tmp_path),
                  **started.env})  # fmt: skip
    assert rec["status"] == "ok", rec.get("error")
    one_node = mnist_run(backend, 2)
    diff = max(abs(a - b) for a, b in zip(rec["loss_history"], one_node["loss_history"], strict=True))
    print(f"{backend} 2 nodes x 1 vs 1 node x 2: max per-step loss difference {diff:.3e}")
    assert len(rec["loss_history"]) == MNIST_STEPS and diff < 1e-4
    assert rec["eval_count"] == one_node["eval_count"] == 500
    topo = rec["topology"]
    assert (topo["nodes"], topo["local_world_size"], topo["simulated"], topo["rank_nodes"]) == (2, 1, True, [0, 1])
    assert rec["launcher"] == REGISTRY[backend].launchers[0].name
    # each rank really ran on its own node's cores (read in each process at the end), and the nodes are disjoint
    assert topo["rank_cores"] == topo["node_cores"] and not set(topo["rank_cores"][0]) & set(topo["rank_cores"][1])
    assert rec["environment"]["threads_per_process"] == len(topo["node_cores"][0])  # threads from the share
    assert rec["link_rate"] is None


# ---- the shaped link -----------------------------------------------------------------------------------------


@pytest.mark.multiproc
@pytest.mark.timeout(200)
def test_a_shaped_link_slows_an_all_reduce_to_its_rate(tmp_path):
    """A 4 MB all-reduce between 2 processes: at least 0.3 s over 100 Mbit/s (4 MB x 8 / 1e8 = 0.34 s even if
    only one rank's bytes crossed), far less unshaped; the host's own namespace is left as it was."""
    outer = link.netns()
    proc = run_cmd([sys.executable, "-m", "benchmarks.linkcheck", "check", "--rates", "none,100mbit", "--mb", "4",
                    "--repeats", "3"], timeout=180, env=child_env(tmp_path))  # fmt: skip
    rows = {r["rate"]: r for r in json.loads(proc.stdout.strip().splitlines()[0])}
    print({rate: r["seconds"] for rate, r in rows.items()})
    assert min(rows["100mbit"]["seconds"]) >= 0.3
    assert max(rows["none"]["seconds"]) < 0.15
    assert link.netns() == outer and not os.environ.get(link.RATE_ENV)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_simulate_runs_one_job_over_a_shaped_link_and_records_the_rate(tmp_path):
    out = tmp_path / "r.json"
    run_cmd([sys.executable, "run.py", "simulate", "--backend", "ddp", "--nodes", "2", "--link-rate", "100mbit", "--",
             "--max-steps", "12", "--no-progress", "--output", str(out)], timeout=240, env=child_env(tmp_path),
            cwd=ROOT)  # fmt: skip
    rec = json.loads(out.read_text())
    assert rec["link_rate"] == "100mbit" and rec["topology"]["nodes"] == 2
    # the ConvNet's 1.2 MB of gradients, both ranks' bytes through one 12.5 MB/s bucket: under 600 samples/s
    assert rec["samples_per_sec"] < 600 and rec["written_bytes_per_step"] > 1e6


def test_help_shows_the_multi_node_and_link_options(tmp_path):
    main_help = run_cmd([sys.executable, "run.py", "--help"], timeout=60, env=child_env(tmp_path)).stdout
    assert "run.py simulate --help" in main_help and "--link-rate" in main_help
    compare_help = run_cmd([sys.executable, "run.py", "compare", "--help"], timeout=60, env=child_env(tmp_path)).stdout
    simulate_help = run_cmd(
        [sys.executable, "run.py", "simulate", "--help"], timeout=60, env=child_env(tmp_path)
    ).stdout
    for option in ("--nodes", "--link-rate"):
        assert option in compare_help and option in simulate_help
