"""The plan of a sweep (distbench/sweep/plan.py): configurations, references, rounds."""

import pytest

from distbench.backends import REGISTRY
from distbench.config import RunConfig
from distbench.errors import UserError
from distbench.sweep.plan import plan_runs, round_orders


def _plan(backends, nprocs, threads, **axes):
    return plan_runs("mnist", {"backend": backends, "world_size": nprocs, **axes}, threads)


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_plan_adds_single_baselines_for_each_thread_count():
    runs = _plan(["ddp"], [1, 2], threads=None)
    assert [(r.config.backend, r.config.world_size) for r in runs if r.baseline] == [("single", 1)] * len(
        {r.config.threads for r in runs}
    )
    assert [
        (r.config.backend, r.config.world_size, r.config.threads, r.baseline)
        for r in _plan(["single", "ddp"], [1, 2], threads=1)
    ] == [("single", 1, 1, False), ("ddp", 1, 1, False), ("ddp", 2, 1, False)]


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_plan_sweeps_accumulation_and_compression_with_a_reference_for_each_accumulation():
    runs = _plan(["single", "ddp"], [2], threads=1, accumulate=[1, 4], grad_compression=["none", "fp16"])
    assert [r.config.name() for r in runs] == [
        "single x1 t1 acc1 none",
        "single x1 t1 acc4 none",  # references: single has no compression
        "ddp x2 t1 acc1 none",
        "ddp x2 t1 acc1 fp16",
        "ddp x2 t1 acc4 none",
        "ddp x2 t1 acc4 fp16",
    ]
    assert runs[0].baseline and runs[1].baseline and not runs[2].baseline
    assert runs[3].config.run_args() == [
        *("--threads", "1", "--accumulate", "1", "--grad-compression", "fp16", "--fault", "none")
    ]


def test_the_sweep_plans_nodes_and_link_rates_as_axes():
    values = {"backend": ["single", "ddp"], "world_size": [1], "nodes": [1, 2], "link_rate": ["none", "100mbit"]}
    runs = [p.config for p in plan_runs("mnist", values, threads=1)]
    assert [(r.backend, r.world_size, r.nodes, r.link_rate) for r in runs] == [
        ("single", 1, 1, "none"),  # single: one node, unshaped only
        ("ddp", 1, 1, "none"),
        ("ddp", 1, 1, "100mbit"),
        ("ddp", 2, 2, "none"),
        ("ddp", 2, 2, "100mbit"),
    ]


def test_zero_stages_multiply_the_deepspeed_runs_alone():
    """An axis with `only` (--zero-stage: deepspeed's) runs the other backends once, at its default, not once per
    value and not never (when the values leave its default out)."""
    runs = _plan(["single", "ddp", "deepspeed"], [2], threads=1, zero_stage=[1, 3])
    assert [(r.config.backend, r.config.zero_stage, r.baseline) for r in runs] == [
        ("single", 0, True),
        ("ddp", 0, False),
        ("deepspeed", 1, False),
        ("deepspeed", 3, False),
    ]
    assert [r.config.name() for r in runs][2:] == ["deepspeed x2 t1 acc1 none zero1", "deepspeed x2 t1 acc1 none zero3"]


def test_a_library_without_compression_runs_once_uncompressed_in_a_compression_sweep():
    """--grad-compression applies to the libraries that compress by a mechanism of their own (the registry's
    `compresses`): Fabric's DDP strategy has none, so it runs once, as is, and a run of it asked to compress is one
    line before any setup."""
    runs = _plan(["ddp", "fabric"], [2], threads=1, grad_compression=["fp16", "bf16"])
    assert [(r.config.backend, r.config.grad_compression, r.baseline) for r in runs] == [
        ("single", "none", True),
        ("ddp", "fp16", False),
        ("ddp", "bf16", False),
        ("fabric", "none", False),
    ]
    with pytest.raises(UserError, match="^--grad-compression fp16: the fabric backend's library has no gradient"):
        REGISTRY["fabric"].check_options(RunConfig(grad_compression="fp16"))


def test_round_orders_are_shuffled_per_round_from_the_seed():
    orders = round_orders(6, 5, seed=3)
    assert all(sorted(o) == list(range(6)) for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not the same order every round
    assert orders == round_orders(6, 5, seed=3) and orders != round_orders(6, 5, seed=4)
    assert round_orders(4, 1, seed=3) == [[0, 1, 2, 3]]  # one round: as planned
