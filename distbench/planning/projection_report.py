"""What `run.py project` writes and prints: the prediction as JSON (one object per backend) with the profile beside it,
and on the terminal what it extrapolates from and to, its warnings, the table and where each input came from."""

from __future__ import annotations

import sys
from pathlib import Path

from distbench.planning.profile import Profile, profile_path
from distbench.planning.projection import Projection
from distbench.records import write_json


def write(rows: list[dict], profile: Profile, output: Path) -> None:
    """The prediction (one object per backend) and the profile it used, as valid JSON."""
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json(output, rows, indent=2, sort_keys=True)
    write_json(profile_path(output), profile.to_dict())


def with_interval(point: float, lo: float | None, hi: float | None) -> str:
    """`point (lo-hi)` with as many decimals (one at least) as it takes for each end to read apart from the point."""
    if lo is None or hi is None:
        return f"{point:.1f}"
    digits = next((d for d in range(1, 7) if f"{lo:.{d}f}" != f"{point:.{d}f}" != f"{hi:.{d}f}"), 6)
    return f"{point:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def table(rows: list[dict]) -> str:
    """The predictions as a markdown table: a row per backend, samples/s with its interval (or why it has none), the
    scaling efficiency to two significant digits."""
    head = "| backend | nodes x procs | link | step ms | samples/s (95 % interval) | scaling efficiency |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        sps = with_interval(r["samples_per_sec"], r["samples_per_sec_lo"], r["samples_per_sec_hi"])
        if r.get("no_interval"):
            sps += f" (no interval: {r['no_interval']})"
        name = r["backend"] + (f" ZeRO-{r['zero_stage']}" if "zero_stage" in r else "")
        lines.append(
            f"| {name} | {r['nodes']} x {r['nprocs']} | {r['link']} | {r['step_ms']:.1f} | {sps} | "
            f"{r['scaling_efficiency']:#.2g} |"
        )
    return "\n".join(lines)


def scope(projection: Projection, sweep_dirs: list[Path], from_profile: Path | None = None) -> list[str]:
    """What the projection extrapolates from (the sweeps' runs, or a module profile's steps), and to what: two lines
    to print before its table."""
    ref, plan, m, rate = projection.ref, projection.plan, projection.measured, projection.rate
    link_from = (
        f"the link's nominal rate {rate} (no commbench)"
        if m is None
        else f"a commbench of {m['nodes']} node(s) x {m['nprocs']} process(es) ({m['world_size']} ranks), link "
        f"{rate} ({m['link_mode']})"
    )
    runs = (
        f"the module profile {from_profile} ({len(ref.runs)} step(s) of {ref.task} at micro-batch {ref.batch_size}, "
        f"{ref.threads} thread(s), {ref.device}; its computation leaves the cores free, as --emulate replays it)"
        if from_profile
        else f"{len(ref.runs)} `single` x1 run(s) of {ref.task} in {' '.join(map(str, sweep_dirs))} at global "
        f"batch {ref.batch_size}, {ref.threads} thread(s) per process ({ref.device})"
    )
    return [
        f"From: {runs}; {link_from}.",
        f"To: {plan.nodes} node(s) x {plan.nprocs} process(es) ({plan.world} ranks), global batch "
        f"{plan.batch_size} (micro-batch {plan.micro_batch} x {plan.accumulate}), link {rate}, one per node.",
    ]


def say(
    projection: Projection,
    rows: list[dict],
    sweep_dirs: list[Path],
    commbench: Path | None,
    output: Path,
    from_profile: Path | None = None,
) -> None:
    """Print the prediction: its scope, each warning once (on stderr), the table, and where its computation and its
    link came from."""
    print("\n".join(scope(projection, sweep_dirs, from_profile)), flush=True)  # before the warnings (stderr)
    for warning in dict.fromkeys(w for r in rows for w in r["warnings"]):  # each once: ddp and accelerate share
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    print(table(rows))
    plan, micro = projection.plan, projection.micro_runs
    link_said = f"commbench {commbench}" if projection.links else "nominal rate, no latency"
    at_micro = (
        f"forward+backward as the {len(micro)} run(s) at micro-batch {plan.micro_batch} measured it"
        if micro
        else f"forward+backward scaled to micro-batch {plan.micro_batch} by the profile (no run at it)"
    )
    print(
        f"\nComputation: {at_micro}; plan processes with as many cores as the reference's {projection.ref.threads} "
        f"thread(s). Link: {link_said}. Model and assumptions: docs/projection.md. Written to {output}."
    )
