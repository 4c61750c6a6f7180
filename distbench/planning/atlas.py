"""`run.py atlas`: `project` over a grid of node counts x link rates, for a plan a user pastes in (docs/projection.md).

Each cell is `project`'s prediction for every library (Projection.predict: samples/s, weak-scaling efficiency and
their 95 % intervals) at N nodes x P processes, each process at the same micro-batch (global batch = micro-batch x
world), on a link of one rate: commbench's fit where --commbench measured that rate, else the nominal rate (no
latency, no CPU cost: optimistic, and said so). Per cell, which library is fastest and by how much (a lead is called
only where the intervals do not overlap); per library and node count, the slowest nominal rate that reaches the
target efficiency (bisection); cells that emulated sweeps (--checked, `compare --emulate`) measured carry their
measured efficiency beside the prediction.

The computation comes from compare sweeps' `single` x1 runs (with the backward's shape measured here, as `project`
does), or from a module profile (`--from-profile`, `run.py profile` on the user's device): its steps are the
reference runs, its modules in the order their gradients were ready the backward's shape.
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from distbench.errors import UserError
from distbench.launching import link
from distbench.planning.commbench import backend_names
from distbench.planning.links import Link, load_links
from distbench.planning.profile import Profile, at_micro_batch, from_module_profile
from distbench.planning.projection import Projection
from distbench.planning.reference import Reference, median_phases
from distbench.planning.timeline import Plan

LOWEST_BITS, HIGHEST_BITS = 1e6, 1e13  # the rates the bisection searches (1 Mbit/s to 10 Tbit/s)


@dataclass(frozen=True)
class AtlasRequest:
    """What `atlas` was given, as typed."""

    sweep_dirs: list[Path]
    output: Path  # a folder
    nodes: str  # comma-separated node counts
    link_rates: str  # comma-separated rates
    nprocs: int = 1
    backends: str = "ddp,horovod,deepspeed"
    from_profile: Path | None = None
    commbench: Path | None = None
    micro_batch: int = 0  # 0: the reference's batch, or the profile's micro-batch
    checked: list[Path] = field(default_factory=list)
    target: float = 0.9
    command_line: str = ""  # as the user typed it, for the files


def run(request: AtlasRequest) -> dict:
    """The command: the inputs checked and read, every cell predicted, the files written, the summary printed."""
    names = backend_names(request.backends)
    nodes, rates = _grid(request)
    links = load_links(request.commbench, None) if request.commbench else None
    ref, profile = _inputs(request)
    if request.from_profile is not None and request.micro_batch:
        at_micro_batch(profile, request.from_profile, request.micro_batch, f"--micro-batch {request.micro_batch}")
    grid = Grid(ref, profile, request.nprocs, request.micro_batch or ref.batch_size)
    cells = []
    for n in nodes:
        for rate in rates:
            measured = links is not None and link.same_rate(links[0], rate)
            projection = grid.projection(n, rate, links[1] if measured else None)
            rows = [projection.predict(b) for b in names]
            cells.append({"nodes": n, "link_rate": rate, "commbench": measured, "rows": rows, **_lead(rows)})
    needs = {b: {str(n): _rate_for(grid.projection(n, None), b, request.target) for n in nodes} for b in names}
    atlas = {
        "kind": "distbench-atlas",
        "command": request.command_line,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "computation": _said(request, ref, grid.micro),
        "nprocs": request.nprocs,
        "micro_batch": grid.micro,
        "target_efficiency": request.target,
        "cells": cells,
        "rate_for_target": needs,
        "checked": _checked(request.checked, ref, grid.micro),
    }
    from distbench.planning import atlas_report

    atlas_report.write(atlas, request.output)
    return atlas


@dataclass(frozen=True)
class Grid:
    """The inputs every cell shares: the computation, the backward's shape, processes per node, the micro-batch."""

    ref: Reference
    profile: Profile
    nprocs: int
    micro: int

    def projection(self, nodes: int, rate: str | None, links: dict | None = None) -> Projection:
        """The projection of one cell: `nodes` x nprocs at the micro-batch, on `rate` (commbench's `links`, else the
        nominal rate)."""
        from distbench.backends.ddp import bucket_cap_mb_for  # torch's: only once the inputs are good

        shared = self.ref.device == "cpu" and not self.ref.emulated  # CPU computation shares the cores
        plan = Plan(nodes, self.nprocs, self.micro * nodes * self.nprocs, 1, "none", shared)
        cap = bucket_cap_mb_for(self.ref.device, self.profile.total_bytes)
        return Projection(self.ref, self.profile, plan, links, rate, cap)


def _grid(r: AtlasRequest) -> tuple[list[int], list[str]]:
    try:
        nodes = [int(n) for n in r.nodes.split(",") if n.strip()]
    except ValueError:
        raise UserError(f"--nodes {r.nodes!r}: comma-separated node counts, e.g. 2,4,8,16") from None
    said = f"--link-rates {r.link_rates!r}: comma-separated rates such as 10gbit,100gbit (not none)"
    try:
        rates = [link.canonical_rate(x.strip()) for x in r.link_rates.split(",") if x.strip()]
    except UserError:
        raise UserError(said) from None
    if not nodes or min(nodes) < 1 or r.nprocs < 1:
        raise UserError("--nodes and --nprocs must be positive")
    if not rates or any(link.parse_rate(x) is None for x in rates):
        raise UserError(said)
    if not 0 < r.target < 1:
        raise UserError(f"--target {r.target}: an efficiency between 0 and 1")
    if bool(r.sweep_dirs) == (r.from_profile is not None):
        raise UserError("give the compare folders of `single` x1 runs, or --from-profile PROFILE, not both")
    return sorted(set(nodes)), rates


def _inputs(r: AtlasRequest) -> tuple[Reference, Profile]:
    if r.from_profile is not None:
        return from_module_profile(r.from_profile)
    from distbench.planning.profile import measure_profile

    ref = Reference.load(r.sweep_dirs)
    micro = r.micro_batch or ref.batch_size
    print(f"measuring the backward of {ref.task} at micro-batch {micro} ...", file=sys.stderr, flush=True)
    return ref, measure_profile(ref, micro)


def _lead(rows: list[dict]) -> dict:
    """The fastest library of a cell, its lead over the next (samples/s over samples/s) with the range its
    intervals allow, and whether the lead stands out of them (its lower end above the next's upper)."""
    ranked = sorted(rows, key=lambda r: -r["samples_per_sec"])
    if len(ranked) < 2:
        return {
            "fastest": ranked[0]["backend"],
            "runner_up": None,
            "lead": None,
            "lead_lo": None,
            "lead_hi": None,
            "clear": None,
        }
    a, b = ranked[0], ranked[1]
    lo = (
        a["samples_per_sec_lo"] / b["samples_per_sec_hi"]
        if a["samples_per_sec_lo"] and b["samples_per_sec_hi"]
        else None
    )
    hi = (
        a["samples_per_sec_hi"] / b["samples_per_sec_lo"]
        if a["samples_per_sec_hi"] and b["samples_per_sec_lo"]
        else None
    )
    return {
        "fastest": a["backend"],
        "runner_up": b["backend"],
        "lead": a["samples_per_sec"] / b["samples_per_sec"],
        "lead_lo": lo,
        "lead_hi": hi,
        "clear": lo is not None and lo > 1.0,
    }


def _efficiency(projection: Projection, backend: str, bits: float) -> float:
    rate = link.format_rate(bits)
    step = projection.one(
        backend,
        median_phases(projection.ref.runs),
        Link.nominal(rate),
        median_phases(projection.micro_runs or projection.ref.runs),
    )
    single = statistics.median(projection.ref.samples_per_sec)
    return projection.plan.batch_size / step / (projection.plan.world * single)


def _rate_for(projection: Projection, backend: str, target: float) -> str | None:
    """The slowest nominal rate at which `backend` reaches `target` efficiency (None: not even at 10 Tbit/s)."""
    if _efficiency(projection, backend, LOWEST_BITS) >= target:
        return link.format_rate(LOWEST_BITS)
    if _efficiency(projection, backend, HIGHEST_BITS) < target:
        return None
    lo, hi = math.log(LOWEST_BITS), math.log(HIGHEST_BITS)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _efficiency(projection, backend, math.exp(mid)) >= target else (mid, hi)
    return link.format_rate(float(f"{math.exp(hi):.3g}"))


def _said(r: AtlasRequest, ref: Reference, micro: int) -> str:
    where = (
        f"the module profile {r.from_profile}"
        if r.from_profile
        else f"`single` x1 runs in {' '.join(map(str, r.sweep_dirs))}"
    )
    return f"{ref.task} at micro-batch {micro}, {ref.device}, from {where} ({len(ref.runs)} steps or runs)"


def _checked(folders: list[Path], ref: Reference, micro: int) -> list[dict]:
    """The cells emulated sweeps measured: per library, node count and link, the median samples/s of its runs at
    this micro-batch and that over the reference's (weak-scaling efficiency, as predicted)."""
    if not folders:
        return []
    from distbench.sweep.grouping import load

    for d in folders:
        if not (d / "results.jsonl").is_file():
            raise UserError(f"--checked {d}: not a compare folder (no results.jsonl)")
    got: dict[tuple, list[float]] = {}
    for r in load(folders).records:
        if r["status"] == "ok" and r.get("emulated") and r["micro_batch_size"] == micro:
            got.setdefault((r["backend"], r["nodes"], r["world_size"], r["link_rate"]), []).append(r["samples_per_sec"])
    single = statistics.median(ref.samples_per_sec)
    return [
        {
            "backend": b,
            "nodes": n,
            "link_rate": rate,
            "samples_per_sec": statistics.median(v),
            "runs": len(v),
            "efficiency": statistics.median(v) / (world * single),
        }
        for (b, n, world, rate), v in sorted(got.items())
    ]
