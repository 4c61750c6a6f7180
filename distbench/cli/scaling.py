"""`run.py commbench` (each library's all-reduce over message sizes) and `run.py project` (a sweep's step time at a
planned scale): distbench/scaling/."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from distbench.backends import ALL_REDUCING
from distbench.cli.declared import new_app
from distbench.cli.sweep import exit_if_failed
from distbench.errors import UserError
from distbench.launching import link


def commbench(
    out: Annotated[Path, typer.Option(help="Output folder: commbench.jsonl, summary.csv, fit.json, report, plot.")],
    backends: Annotated[str, typer.Option(help="Comma-separated backends that all-reduce gradients.")] = ",".join(
        ALL_REDUCING
    ),
    nodes: Annotated[int, typer.Option(help="Nodes (simulated here, each on its own cores; real under Slurm).")] = 1,
    nprocs: Annotated[int, typer.Option(help="Processes per node.")] = 2,
    link_rate: Annotated[str, typer.Option(help="The link's rate (none, or e.g. 1gbit, 100mbit).")] = link.UNSHAPED,
    link_mode: Annotated[
        str, typer.Option(help="shared (one bucket on loopback) or per-node (a NIC each); docs/commbench.md.")
    ] = "shared",
    repeats: Annotated[int, typer.Option(help="Timed all-reduces per size and round.")] = 20,
    rounds: Annotated[int, typer.Option(help="Launches of each backend, alternating the order.")] = 1,
    sizes: Annotated[
        str, typer.Option(help="Comma-separated message sizes in bytes (default 4 KiB to 64 MiB, x4).")
    ] = "",
    grad_compression: Annotated[
        str,
        typer.Option(
            help="Comma-separated ways the gradients travel, each timed: none, or fp16/bf16 (each library's 16-bit "
            "compression, as compare's --grad-compression)."
        ),
    ] = "none",
    scheduler: Annotated[str, typer.Option(help="local or slurm (inside an allocation).")] = "local",
    run_timeout_s: Annotated[int, typer.Option(help="Per-launch timeout.")] = 900,
) -> None:
    from distbench.scaling import commbench as cb
    from distbench.sweep.configuration import AXES, positive_ints

    names = _backends(backends)
    if min(nodes, nprocs, repeats, rounds) <= 0 or nodes * nprocs < 2:
        raise UserError("--nodes, --nprocs, --repeats and --rounds must be positive, with at least 2 processes")
    link.parse_rate(link_rate)
    message_sizes = positive_ints(sizes, "--sizes") if sizes else list(cb.DEFAULT_SIZES)
    compressions = tuple(AXES["grad_compression"].metadata["parse"](grad_compression, "--grad-compression"))
    if (out / cb.RECORDS).exists():
        raise UserError(f"{out} already holds a commbench ({cb.RECORDS}); choose another --out")
    link.check_mode(link_mode)
    from distbench.sweep.executor import executor_for

    executor = executor_for(scheduler)  # cb.run creates the folder once the executor has checked the plan
    bench = cb.Bench(
        names, message_sizes, nodes, nprocs, link_rate, link_mode, repeats, rounds, run_timeout_s, compressions
    )
    try:
        recs = cb.run(executor, bench, out)
    except KeyboardInterrupt:
        print(f"interrupted: the current launch was stopped; records so far are in {out / cb.RECORDS}", file=sys.stderr)
        raise typer.Exit(130) from None
    if recs:
        print(cb.write(recs, out, "python run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])))
    launched = len({(r["backend"], r["grad_compression"], r["round"]) for r in recs})
    planned = len(bench.configs()) * rounds
    exit_if_failed(planned - launched, planned, f"their logs, {out / 'runs'}")


def project(
    sweep_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Compare folders with the task's `single` x1 runs: at the global batch, and at the planned "
            "micro-batch if you ran it (its computation is then measured, not scaled).",
            metavar="SWEEP_DIR...",
        ),
    ],
    output: Annotated[Path, typer.Option(help="Write the prediction here (.json, one object per backend).")],
    nodes: Annotated[int, typer.Option(help="Planned nodes.")] = 2,
    nprocs: Annotated[int, typer.Option(help="Planned processes per node.")] = 1,
    link_rate: Annotated[
        str, typer.Option(help="The nodes' link (e.g. 100mbit; none: as --commbench measured it).")
    ] = "",
    commbench: Annotated[
        Path | None, typer.Option(help="A commbench folder measured on that link (else: the nominal rate).")
    ] = None,
    backends: Annotated[str, typer.Option(help="Comma-separated backends that all-reduce gradients.")] = ",".join(
        ALL_REDUCING
    ),
    accumulate: Annotated[int, typer.Option(help="Micro-batches per step.")] = 1,
    grad_compression: Annotated[str, typer.Option(help="none, fp16 or bf16.")] = "none",
    batch_size: Annotated[int, typer.Option(help="Planned global batch (default: the sweep's).")] = 0,
    profile: Annotated[
        Path | None,
        typer.Option(help="The backward profile a previous project wrote (OUTPUT.profile.json): no measuring."),
    ] = None,
) -> None:
    from distbench.scaling import projection as pj

    names = _backends(backends)
    if min(nodes, nprocs, accumulate) <= 0 or batch_size < 0:
        raise UserError("--nodes, --nprocs, --accumulate and --batch-size must be positive")
    if grad_compression not in pj.COMPRESSED_FRACTION:
        raise UserError(f"--grad-compression {grad_compression!r}: one of {', '.join(pj.COMPRESSED_FRACTION)}")
    if not link_rate and commbench is None:
        raise UserError("give --link-rate (the nodes' link), --commbench DIR (measured on it), or both")
    rate = link_rate or None
    if rate is not None:
        link.parse_rate(rate)
    links = None
    if commbench is not None:
        rate, links = pj.load_links(commbench, rate)
    else:
        pj.Link.nominal(rate)  # a rate it can be taken at
    missing = [b for b in names if links is not None and b not in links and pj.GRADIENT_ALLREDUCE[b] not in links]
    if missing:
        raise UserError(f"--commbench {commbench} has no records of {', '.join(missing)}")
    ref = pj.Reference.load(sweep_dirs, batch_size or None)
    plan = pj.Plan(nodes, nprocs, batch_size or ref.batch_size, accumulate, grad_compression, ref.device == "cpu")
    if plan.micro_batch < 1 or plan.batch_size % (plan.world * accumulate):
        raise UserError(
            f"a global batch of {plan.batch_size} does not split into {plan.world} processes x {accumulate} "
            "micro-batches"
        )
    if profile is not None:
        measured = pj.Profile.read(profile)
        if measured.micro_batch != plan.micro_batch:
            raise UserError(
                f"--profile {profile} was measured at micro-batch {measured.micro_batch}, this plan's is "
                f"{plan.micro_batch}: leave --profile out to measure it"
            )
    else:
        print(
            f"measuring the backward of {ref.task} at micro-batch {plan.micro_batch} ...", file=sys.stderr, flush=True
        )
        measured = pj.measure_profile(ref, plan.micro_batch)
    from distbench.backends.ddp import bucket_cap_mb_for

    cap = bucket_cap_mb_for(ref.device, measured.total_bytes)
    projection = pj.Projection(ref, measured, plan, links, rate, cap)
    rows = [projection.predict(b) for b in names]
    pj.write(rows, measured, output)
    print("\n".join(projection.scope(sweep_dirs)), flush=True)  # before the warnings (stderr), as they follow
    for warning in dict.fromkeys(w for r in rows for w in r["warnings"]):  # each once: ddp and accelerate share
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    print(pj.table(rows))
    link_said = f"commbench {commbench}" if links else "nominal rate, no latency"
    micro = projection.micro_runs
    at_micro = (
        f"forward+backward as the {len(micro)} run(s) at micro-batch {plan.micro_batch} measured it"
        if micro
        else f"forward+backward scaled to micro-batch {plan.micro_batch} by the profile (no run at it)"
    )
    print(
        f"\nComputation: {at_micro}; plan processes with as many cores as the reference's {ref.threads} thread(s). "
        f"Link: {link_said}. Model and assumptions: docs/projection.md. Written to {output}."
    )


def _backends(backends: str) -> list[str]:
    names = [b.strip() for b in backends.split(",") if b.strip()]
    bad = [b for b in names if b not in ALL_REDUCING]
    if bad or not names:
        raise UserError(
            f"--backends: the backends that all-reduce their gradients ({', '.join(ALL_REDUCING)}), got {backends!r}"
        )
    return names


def scaling_app() -> typer.Typer:
    app = new_app()
    app.callback()(lambda: None)  # a group, whatever number of commands it has: `run.py commbench ...`
    app.command(
        help="Time each library's own all-reduce over message sizes (algbw, busbw, a latency-bandwidth fit); "
        "docs/commbench.md."
    )(commbench)
    app.command(
        help="Predict each library's step time, samples/s and scaling efficiency at a planned scale from a compare "
        "sweep and a commbench; docs/projection.md."
    )(project)
    return app
