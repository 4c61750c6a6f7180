"""A sweep checked whole before its first launch.

Each run checks its own options as it starts (distbench/config.py's `validate`: each option, the global batch over
the world size and the micro-batches; then the backend's `check_options`), one line and exit 2. In a sweep that line
would come only when the run is launched, after the runs before it, as a failed run in the report. `check_sweep` asks
the same questions of every planned configuration, with the options its run will get, and the executor its own
(nodes against the cores or the allocation, the links), before anything is launched or written: what cannot run is
one line naming the configuration and the reason.
"""

from __future__ import annotations

import sys

from distbench.backends import get_spec
from distbench.config import RunConfig, validate
from distbench.errors import UserError
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import Executor
from distbench.tasks import with_defaults
from distbench.tasks.emulated import check_profile


def run_config(config: SweepConfig, given: dict) -> RunConfig:
    """The options a run of `config` starts with: those the sweep passes every run (`given`, as RunConfig's fields:
    only those given; `task` the task as the user named it), the configuration's own, the task's defaults for the
    rest. The runner sets --output and --force itself."""
    values = {name: value for name, value in given.items() if value is not None}
    return with_defaults(RunConfig(**{**values, **config.run_values(), "backend": config.backend, "force": True}))


def configuration_error(config: SweepConfig, given: dict) -> str | None:
    """What a run of `config` would refuse as it starts (the run's own checks, asked here), or None."""
    cfg = run_config(config, given)
    try:
        validate(cfg, config.world_size)
        get_spec(config.backend).check_options(cfg)
        if cfg.emulate is not None:
            check_profile(cfg.emulate, cfg.batch_size // (config.world_size * cfg.accumulate), cfg.precision)
    except UserError as e:
        return str(e)
    return None


def check_sweep(configs: list[SweepConfig], given: dict, executor: Executor) -> None:
    """Every configuration's run options, then what the executor can run (nodes, links): the first that cannot run
    is one line naming it. Last, a warning for configurations whose processes x threads exceed a node's CPUs (they run,
    taking turns on the cores: their speed measures that). The executor's check comes after this module's own: a
    shaped link re-runs the command in a private network namespace from there."""
    for config in configs:
        if (error := configuration_error(config, given)) is not None:
            raise UserError(f"{config.name()}: {error}")
    executor.check(configs, emulated=given.get("emulate") is not None, dilation=given.get("dilation") or 1.0)
    if crowded := oversubscribed(configs, executor.cpus_per_node):
        said = ", ".join(f"{c.name()} ({c.nprocs * c.threads} on {cpus})" for c, cpus in crowded)
        print(
            f"warning: more processes x threads per node than a node's CPUs: {said}; they take turns on the cores, "
            "and their speed measures that",
            file=sys.stderr,
        )


def oversubscribed(configs: list[SweepConfig], cpus_per_node) -> list[tuple[SweepConfig, int]]:
    """The configurations whose processes per node x threads exceed a node's CPUs (`cpus_per_node(nodes)`), each with
    those CPUs."""
    crowded = []
    for c in configs:
        cpus = cpus_per_node(c.nodes)
        if c.nprocs * c.threads > cpus:
            crowded.append((c, cpus))
    return crowded
