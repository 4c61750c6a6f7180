"""Simulated nodes under each launcher's multi-node form, and a shaped link, for real."""

import json

import pytest

from distbench.backends import REGISTRY
from distbench.launching import link
from distbench.launching.launch import resolve
from distbench.sweep.executor import launch_config, run_one
from distbench.training import fairness
from tests.conftest import MNIST_ARGS, MNIST_STEPS
from tests.helpers import child_env, py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(300)
# every library on simulated nodes: test_links.test_compare_trains_every_library_on_per_node_links (the same checks,
# each node behind its own link); here ddp without a link
@pytest.mark.parametrize("backend", ["ddp"])
def test_two_simulated_nodes_reproduce_one_node_of_two(tmp_path, mnist_run, backend):
    out = tmp_path / "r.json"
    started = launch_config(backend, 2, 2, [*MNIST_ARGS, "--output", str(out)])
    rec = run_one(
        [resolve(c) for c in started.commands], out, 240, tmp_path / "log", {**child_env(tmp_path), **started.env}
    )
    assert rec["status"] == "ok", rec.get("error")
    one_node = mnist_run(backend, 2)
    diff = max(abs(a - b) for a, b in zip(rec["loss_history"], one_node["loss_history"], strict=True))
    print(f"{backend} 2 nodes x 1 vs 1 node x 2: max per-step loss difference {diff:.3e}")
    assert len(rec["loss_history"]) == MNIST_STEPS and diff < fairness.LOSS_TOLERANCE
    assert rec["eval_count"] == one_node["eval_count"] == 500
    topo = rec["topology"]
    assert (topo["nodes"], topo["local_world_size"], topo["simulated"], topo["rank_nodes"]) == (2, 1, True, [0, 1])
    assert rec["launcher"] == REGISTRY[backend].launchers[0]
    # each rank really ran on its own node's cores (read in each process at the end), and the nodes are disjoint
    assert topo["rank_cores"] == topo["node_cores"] and not set(topo["rank_cores"][0]) & set(topo["rank_cores"][1])
    assert rec["environment"]["threads_per_process"] == len(topo["node_cores"][0])  # threads from the share
    assert (rec["link_rate"], rec["link_mode"]) == ("none", "shared")  # as the child found its namespace


@pytest.mark.multiproc
@pytest.mark.alone  # an unshaped all-reduce's speed, which another run beside it would change
@pytest.mark.timeout(200)
def test_a_shaped_link_slows_an_all_reduce_to_its_rate(tmp_path):
    """A 4 MB all-reduce between 2 processes: at least 0.3 s over 100 Mbit/s (4 MB x 8 / 1e8 = 0.34 s even if
    only one rank's bytes crossed), far less unshaped; the host's own namespace is left as it was."""
    outer = link.netns()
    proc = run_in(tmp_path, py("-m benchmarks.linkcheck check --rates none,100mbit --mb 4 --repeats 3"), timeout=180)
    rows = {r["rate"]: r for r in json.loads(proc.stdout.strip().splitlines()[0])}
    print({rate: r["seconds"] for rate, r in rows.items()})
    assert min(rows["100mbit"]["seconds"]) >= 0.3
    assert max(rows["none"]["seconds"]) < 0.15
    assert link.netns() == outer


@pytest.mark.multiproc
@pytest.mark.alone  # a rate, which another run beside it would change
@pytest.mark.timeout(300)
def test_simulate_runs_one_job_over_a_shaped_link_and_records_the_rate(tmp_path):
    out = tmp_path / "r.json"
    cmd = py(
        "run.py simulate --backend ddp --nodes 2 --link-rate 100mbit -- --max-steps 12 --no-progress --output", out
    )
    proc = run_in(tmp_path, cmd, timeout=240)
    rec = json.loads(out.read_text())
    assert rec["link_rate"] == "100mbit" and rec["topology"]["nodes"] == 2
    # the link, rate and mode, in the running line and the last line
    assert "running (link 100mbit, shared): " in proc.stderr
    assert proc.stderr.rstrip().endswith("simulated ddp as 2 node(s) x 1 process(es), link 100mbit, shared: done")
    # the ConvNet's 1.2 MB of gradients, both ranks' bytes through one 12.5 MB/s bucket: under 600 samples/s
    assert rec["samples_per_sec"] < 600 and rec["written_bytes_per_step"] > 1e6
