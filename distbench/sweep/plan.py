"""The plan of a sweep: its configurations (every combination of the swept axes' values, and the references they
are measured against) and the order of each round."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from distbench.machine import available_cpus
from distbench.sweep.configuration import AXES, SWEPT, SweepConfig


@dataclass(frozen=True)
class Planned:
    config: SweepConfig
    baseline: bool = False  # added only as the reference of speed-up and efficiency


def axis_values(options: dict[str, str]) -> dict[str, list]:
    """Each swept axis's values from its `compare` option (comma-separated): one line for a bad value."""
    return {name: AXES[name].metadata["parse"](options[name], AXES[name].metadata["option"]) for name in SWEPT}


def plan_runs(
    task: str,
    values: dict[str, list],
    threads: int | None,
    cpus_per_node: Callable[[int], int] | None = None,
    references: bool = True,
) -> list[Planned]:
    """Every combination of the axes' values (an axis not given: its default alone), in the axes' declared order,
    each as its backend runs it (an axis that does not apply to it at its default: once, not once per value); a
    combination the reference backend cannot run (a second process, node, link or compression for `single`) is left
    out. A reference run is added for
    every (threads, accumulation) used that the sweep does not run itself. Threads default to a node's CPUs
    (`cpus_per_node(nodes)`, the executor's: by default this machine's usable CPUs shared among the nodes) divided
    among its processes. No reference runs where `references` is false: an emulated sweep's (--emulate), whose one
    process at the global batch would need a profile at another micro-batch."""
    cpus_per_node = cpus_per_node or (lambda nodes: available_cpus() // nodes)
    runs = []
    for combo in itertools.product(*(values.get(name, [AXES[name].default]) for name in SWEPT)):
        axes = dict(zip(SWEPT, combo, strict=True))
        axes["world_size"] *= axes["nodes"]  # --nprocs is per node
        per_node = axes["world_size"] // axes["nodes"]
        config = SweepConfig(task=task, threads=threads or max(1, cpus_per_node(axes["nodes"]) // per_node), **axes)
        config = config.as_run()
        if config.runs_here() and config not in {p.config for p in runs}:
            runs.append(Planned(config))
    if not references:
        return runs
    have = {p.config for p in runs}
    missing = {p.config.reference() for p in runs} - have
    baselines = sorted(missing, key=lambda r: (-r.threads, r.sort_key()))
    return [Planned(r, baseline=True) for r in baselines] + runs


def round_orders(n_configs: int, repeats: int, seed: int) -> list[list[int]]:
    """The order of the configurations in each round: as planned for a single round, else shuffled per round
    from the seed (the same seed gives the same orders)."""
    if repeats == 1:
        return [list(range(n_configs))]
    rng = random.Random(seed)
    orders = []
    for _ in range(repeats):
        order = list(range(n_configs))
        rng.shuffle(order)
        orders.append(order)
    return orders
