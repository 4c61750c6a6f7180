"""A sweep checked whole before its first launch (distbench/sweep/check.py): each configuration with the options its
run will get, then the executor; nothing launched."""

import pytest

from distbench.errors import UserError
from distbench.sweep.check import check_sweep, configuration_error, oversubscribed
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import link_error


class Executor:
    """An executor that only says what it was asked: its check, and nodes of `cpus` CPUs."""

    def __init__(self, cpus: int = 4):
        self.cpus, self.checked = cpus, None

    def check(self, configs, emulated=False, dilation=1.0):
        self.checked = configs

    def cpus_per_node(self, nodes):
        return self.cpus


def _config(backend="ddp", world_size=2, **axes):
    return SweepConfig(task="mnist", backend=backend, world_size=world_size, threads=1, **axes)


def test_each_configuration_gets_the_runs_own_checks_with_the_task_defaults():
    given = {"task": "mnist"}
    assert configuration_error(_config(world_size=2), given) is None
    # mnist's global batch of 64 (its default: given nothing) over 3 processes, and over 2 x 3 micro-batches
    assert "--batch-size 64 is the global batch and must divide evenly across 3" in configuration_error(
        _config(world_size=3), given
    )
    assert "must split into 3 equal micro-batches" in configuration_error(_config(accumulate=3), given)
    assert configuration_error(_config(world_size=3), {**given, "batch_size": 96}) is None
    # the backend's own check of its knobs
    assert "exchanges no gradients" in configuration_error(
        _config("single", 1, grad_compression="fp16"), {"task": "mnist"}
    )


def test_a_per_node_link_needs_two_nodes_to_carry_anything():
    assert link_error(_config(link_rate="1gbit", link_mode="per-node")) is not None
    assert link_error(_config(world_size=2, nodes=2, link_rate="1gbit", link_mode="per-node")) is None
    assert link_error(_config(link_rate="1gbit", link_mode="shared")) is None  # loopback between its processes
    assert link_error(_config(link_mode="per-node")) is None  # unshaped: nothing claimed


def test_the_first_configuration_that_cannot_run_is_named_and_the_executor_is_not_asked():
    executor = Executor()
    configs = [_config("single", 1), _config(world_size=2), _config(world_size=3)]
    with pytest.raises(UserError, match=r"^ddp x3 t1 acc1 none: --batch-size 64 is the global batch"):
        check_sweep(configs, {"task": "mnist"}, executor)
    assert executor.checked is None
    check_sweep(configs[:2], {"task": "mnist"}, executor)
    assert executor.checked == configs[:2]


def test_more_processes_x_threads_than_a_node_has_cpus_is_a_warning(capsys):
    configs = [_config("single", 1), _config(world_size=2), _config(world_size=4, nodes=2)]
    assert oversubscribed(configs, lambda nodes: 1) == [(configs[1], 1), (configs[2], 1)]
    assert oversubscribed(configs, lambda nodes: 2) == []
    check_sweep(configs[:2], {"task": "mnist"}, Executor(cpus=1))
    assert capsys.readouterr().err.startswith("warning: more processes x threads per node than a node's CPUs: ddp x2")
    check_sweep(configs[:2], {"task": "mnist"}, Executor(cpus=2))
    assert capsys.readouterr().err == ""


def test_a_link_down_needs_a_nodes_own_link_and_a_node_fault_a_node_the_run_has():
    per_node = {"world_size": 2, "nodes": 2, "link_mode": "per-node"}
    assert link_error(_config(**per_node, fault="link-down:1@5:3")) is None
    assert "give --link-mode per-node and --nodes 2 or more" in link_error(
        _config(world_size=2, nodes=2, fault="link-down:1@5:3")
    )
    assert "give --link-mode per-node" in link_error(_config(link_mode="per-node", fault="link-down:0@5:3"))
    assert link_error(_config(**per_node, fault="kill-node:2@5")) == (
        "--fault kill-node:2@5: node 2, but the job has nodes 0 to 1"
    )
