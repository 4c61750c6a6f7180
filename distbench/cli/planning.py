"""`run.py commbench` (each library's all-reduce over message sizes) and `run.py project` (a sweep's step time at a
planned scale): the options, read into a request for distbench/planning/."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from distbench.backends import ALL_REDUCING
from distbench.cli.declared import argument, command, new_app, param, placement_params, run_options
from distbench.cli.sweep import command_line, exit_if_failed
from distbench.launching.placement import PLACEMENT, Placement


def _backends() -> inspect.Parameter:
    """--backends, the same in both commands."""
    return param(
        "backends",
        str,
        ",".join(ALL_REDUCING),
        help="Comma-separated backends: those that all-reduce gradients, deepspeed (its ZeRO stages) and fsdp (FSDP2's "
        "all-gathers and reduce-scatters).",
    )


def commbench_params() -> list[inspect.Parameter]:
    out = param("out", Path, help="Output folder: commbench.jsonl, summary.csv, fit.json, report, plot.")
    placed = placement_params(["nodes", "nprocs", "link_rate", "link_mode", "scheduler"], defaults={"nprocs": 2})
    own = [
        param("repeats", int, 20, help="Timed all-reduces per size and round."),
        param("rounds", int, 1, help="Launches of each backend, alternating the order."),
        param("sizes", str, "", help="Comma-separated message sizes in bytes (default 4 KiB to 64 MiB, x4)."),
        param(
            "grad_compression",
            str,
            "none",
            help="Comma-separated ways the gradients travel, each timed: none, or fp16/bf16 (each library's 16-bit "
            "compression, as compare's --grad-compression).",
        ),
        param("run_timeout_s", int, 900, help="Per-launch timeout."),
    ]
    return [out, _backends(), *placed, *own, *run_options(["dilation"])]


def commbench(values: dict) -> None:
    from distbench.planning.commbench import CommbenchRequest, run

    placement = Placement.given(values)
    outcome = run(CommbenchRequest(placement=placement, command_line=command_line(), **values))
    if outcome.interrupted:
        raise typer.Exit(130)
    exit_if_failed(outcome.failed, outcome.runs, f"their logs, {outcome.logs}")


def _sweep_dirs(help_: str) -> inspect.Parameter:
    """The compare folders, optional: --from-profile may stand in for them (project's and atlas's)."""
    return argument("sweep_dirs", list[Path] | None, help_, default=None)


def project_params() -> list[inspect.Parameter]:
    dirs = _sweep_dirs(
        "Compare folders with the task's `single` x1 runs: at the global batch, and at the planned micro-batch if you "
        "ran it (its computation is then measured, not scaled); or give --from-profile."
    )
    output = param("output", Path, help="Write the prediction here (.json, one object per backend).")
    placed = placement_params(
        ["nodes", "nprocs", "link_rate"],
        defaults={"nodes": 2, "link_rate": None},
        notes={"link_rate": "The planned nodes' link; not given: as --commbench measured it."},
    )
    own = [
        param(
            "commbench", Path | None, None, help="A commbench folder measured on that link (else: the nominal rate)."
        ),
        _backends(),
        param("accumulate", int, 1, help="Micro-batches per step."),
        param("grad_compression", str, "none", help="none, fp16 or bf16."),
        param("batch_size", int, 0, help="Planned global batch (default: the sweep's)."),
        param(
            "profile",
            Path | None,
            None,
            help="The backward profile a previous project wrote (OUTPUT.profile.json): no measuring.",
        ),
        param(
            "zero_stage",
            int,
            0,
            help="The DeepSpeed backends' ZeRO stage: 0-3 (3: with --node-sweep and --node-commbench).",
        ),
        param(
            "node_sweep",
            Path | None,
            None,
            help="A compare of the DeepSpeed backend on one node at ZeRO stages 0 and K (with --node-commbench): "
            "stage 0's step and ZeRO-K's engine measured there, not modelled (docs/projection.md).",
        ),
        param("node_commbench", Path | None, None, help="A commbench of deepspeed on that node (with --node-sweep)."),
        param(
            "from_profile",
            Path | None,
            None,
            help="A module profile (`run.py profile`) as the computation, in place of the sweeps: what --emulate "
            "replays (its micro-batch on every process).",
        ),
    ]
    return [dirs, output, *placed, *own]


def project(values: dict) -> None:
    from distbench.planning.project import ProjectRequest, run

    rate = PLACEMENT["link_rate"].one(values.pop("link_rate"))
    placement = Placement.given(values)
    dirs = values.pop("sweep_dirs") or []
    run(ProjectRequest(sweep_dirs=dirs, nodes=placement.nodes, nprocs=placement.nprocs, link_rate=rate or "", **values))


def atlas_params() -> list[inspect.Parameter]:
    dirs = _sweep_dirs("Compare folders with the task's `single` x1 runs (or give --from-profile).")
    own = [
        param("output", Path, help="Output folder: atlas.md, atlas.json, efficiency.png, fastest.png."),
        param("nodes", str, "2,4,8,16", help="Comma-separated node counts (the grid's rows)."),
        param("link_rates", str, "1gbit,10gbit,25gbit,100gbit,400gbit", help="Comma-separated link rates (columns)."),
        param("nprocs", int, 1, help="Processes (devices) per node."),
        param("backends", str, "ddp,horovod,deepspeed", help="Comma-separated backends that all-reduce gradients."),
        param("from_profile", Path | None, None, help="A module profile (`run.py profile`) as the computation."),
        param("commbench", Path | None, None, help="A commbench folder: its rate's cells use its fit, not nominal."),
        param("micro_batch", int, 0, help="Each process's micro-batch (default: the reference's, or the profile's)."),
        param("checked", str, "", help="Comma-separated emulated compare folders whose cells are marked measured."),
        param("target", float, 0.9, help="The efficiency whose slowest sufficient link rate is given."),
    ]
    return [dirs, *own]


def atlas(values: dict) -> None:
    from distbench.planning.atlas import AtlasRequest, run

    checked = [Path(p) for p in values.pop("checked").split(",") if p.strip()]
    dirs = values.pop("sweep_dirs") or []
    run(AtlasRequest(sweep_dirs=dirs, checked=checked, command_line=command_line(), **values))


def planning_app() -> typer.Typer:
    """The commbench and project commands, as one typer group."""
    app = new_app()
    app.callback()(lambda: None)  # a group, whatever number of commands it has: `run.py commbench ...`
    command(
        app,
        "commbench",
        commbench_params(),
        commbench,
        help="Time each library's own all-reduce over message sizes (algbw, busbw, a latency-bandwidth fit); "
        "docs/commbench.md.",
    )
    command(
        app,
        "project",
        project_params(),
        project,
        help="Predict each library's step time, samples/s and scaling efficiency at a planned scale from a compare "
        "sweep and a commbench; docs/projection.md.",
    )
    command(
        app,
        "atlas",
        atlas_params(),
        atlas,
        help="project over a grid of node counts x link rates: each library's efficiency, the fastest per cell, the "
        "link each needs; heatmaps; docs/projection.md.",
    )
    return app
