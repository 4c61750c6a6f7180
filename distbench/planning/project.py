"""`run.py project` as one call: its options checked, the inputs read (the sweeps' reference, the commbench or the
nominal link, the profile: read, or measured here; or, with --from-profile, a module profile in place of the sweeps
and the profile), each library predicted, the prediction written and printed."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from distbench.errors import UserError
from distbench.launching import link
from distbench.planning import projection_report
from distbench.planning.commbench import backend_names
from distbench.planning.engine import Engine, load_engine
from distbench.planning.links import COMPRESSED_FRACTION, Link, load_links
from distbench.planning.profile import Profile, at_micro_batch, from_module_profile, measure_profile
from distbench.planning.projection import Projection, gradients_series
from distbench.planning.reference import Reference
from distbench.planning.timeline import (
    GRADIENT_ALLREDUCE,
    MODELS,
    ZERO_STAGES_MODELLED,
    Plan,
    check_fsdp_accumulate,
    timed_under_load,
)


@dataclass(frozen=True)
class ProjectRequest:
    """What `project` was given, as typed."""

    sweep_dirs: list[Path]  # empty with from_profile
    output: Path
    nodes: int
    nprocs: int
    link_rate: str  # "": as the commbench measured it
    commbench: Path | None
    backends: str  # comma-separated
    accumulate: int
    grad_compression: str
    batch_size: int  # 0: the sweep's
    profile: Path | None  # None: measure it
    zero_stage: int = 0  # the ZeRO stage of the DeepSpeed backends' rows
    node_sweep: Path | None = None  # a compare of the DeepSpeed backend on one node at ZeRO stages 0 and K
    node_commbench: Path | None = None  # commbench of deepspeed on that node: with node_sweep, ZeRO-K's engine
    from_profile: Path | None = None  # a module profile (`run.py profile`): the computation, as the emulator's


def run(request: ProjectRequest) -> None:
    """The command: bad input is one UserError before anything is measured or written; then each backend's
    prediction, written to the output (the profile beside it) and printed."""
    names = backend_names(request.backends)
    _check(request)
    _check_zero(request, names)
    if "fsdp" in (MODELS[b] for b in names):
        check_fsdp_accumulate(request.accumulate)
    rate, links = _links(request, names)
    ref, profiled = _computation(request)
    plan = _plan(request, ref)
    engines = _engines(request, names, plan)
    profile = _profile(request, ref, plan, profiled)
    from distbench.backends.ddp import bucket_cap_mb_for  # torch's: only once the inputs are good

    cap = bucket_cap_mb_for(ref.device, profile.total_bytes)
    projection = Projection(ref, profile, plan, links, rate, cap, engines)
    rows = [projection.predict(b) for b in names]
    projection_report.write(rows, profile, request.output)
    projection_report.say(projection, rows, request.sweep_dirs, request.commbench, request.output, request.from_profile)


def _check(r: ProjectRequest) -> None:
    if min(r.nodes, r.nprocs, r.accumulate) <= 0 or r.batch_size < 0:
        raise UserError("--nodes, --nprocs, --accumulate and --batch-size must be positive")
    if r.grad_compression not in COMPRESSED_FRACTION:
        raise UserError(f"--grad-compression {r.grad_compression!r}: one of {', '.join(COMPRESSED_FRACTION)}")
    if not r.link_rate and r.commbench is None:
        raise UserError("give --link-rate (the nodes' link), --commbench DIR (measured on it), or both")
    if bool(r.sweep_dirs) == (r.from_profile is not None):
        raise UserError("give the compare folders of `single` x1 runs, or --from-profile PROFILE, not both")
    if r.from_profile is not None and r.profile is not None:
        raise UserError("--profile and --from-profile: a module profile holds its backward's shape; give one")


def _check_zero(r: ProjectRequest, names: list[str]) -> None:
    """--zero-stage: a stage the model has (ZERO_STAGES_MODELLED), for the backends that take it, uncompressed."""
    zero = [b for b in names if MODELS[b] == "zero"]
    if r.zero_stage and not zero:
        raise UserError(f"--zero-stage {r.zero_stage}: only the DeepSpeed backends have ZeRO stages; add deepspeed")
    if r.zero_stage not in ZERO_STAGES_MODELLED:
        raise UserError(
            f"--zero-stage {r.zero_stage}: DeepSpeed's ZeRO stages are {', '.join(map(str, ZERO_STAGES_MODELLED))}"
        )
    if r.zero_stage == 3 and zero and r.node_sweep is None:
        raise UserError(
            "--zero-stage 3: project models ZeRO-3 only with its engine measured on one node (give --node-sweep and "
            "--node-commbench; docs/projection.md)"
        )
    if zero and r.grad_compression != "none":
        raise UserError(
            f"--grad-compression {r.grad_compression}: project models {', '.join(zero)} uncompressed only (its "
            "all-gather of the parameters is never compressed, its all-reduce would be)"
        )


def _engines(r: ProjectRequest, names: list[str], plan: Plan) -> dict[str, Engine] | None:
    """Each DeepSpeed backend's engine measured on one node (--node-sweep and --node-commbench, together), its
    collectives there timed as the plan's are (timed_under_load)."""
    if r.node_sweep is None and r.node_commbench is None:
        return None
    zero = [b for b in names if MODELS[b] == "zero"]
    if not zero or None in (r.node_sweep, r.node_commbench):
        raise UserError(
            "--node-sweep and --node-commbench measure DeepSpeed's engine: give both and a DeepSpeed backend"
        )
    return {b: load_engine(r.node_sweep, r.node_commbench, b, r.zero_stage, timed_under_load(b, plan)) for b in zero}


def _links(r: ProjectRequest, names: list[str]) -> tuple[str | None, dict[str, list[dict]] | None]:
    """The planned link's rate and commbench's records per backend (None: the nominal rate), each backend's there."""
    rate = r.link_rate or None
    if rate is not None:
        link.parse_rate(rate)
    if r.commbench is None:
        Link.nominal(rate)  # a rate it can be taken at
        return rate, None
    rate, links = load_links(r.commbench, rate)
    missing = [b for b in names if not {gradients_series(b, c) for c in (b, GRADIENT_ALLREDUCE[b])} & links.keys()]
    if missing:
        raise UserError(f"--commbench {r.commbench} has no records of {', '.join(missing)}")
    return rate, links


def _computation(r: ProjectRequest) -> tuple[Reference, Profile | None]:
    """The reference of the sweeps; or a module profile's steps and the backward's shape its modules give."""
    if r.from_profile is None:
        return Reference.load(r.sweep_dirs, r.batch_size or None), None
    return from_module_profile(r.from_profile)


def _plan(r: ProjectRequest, ref: Reference) -> Plan:
    """The planned scale (by default the sweep's global batch, or a module profile's micro-batch on every process);
    a global batch that does not split into its processes' micro-batches is one line."""
    default = ref.batch_size * r.nodes * r.nprocs * r.accumulate if r.from_profile else ref.batch_size
    plan = Plan(
        r.nodes,
        r.nprocs,
        r.batch_size or default,
        r.accumulate,
        r.grad_compression,
        ref.device == "cpu" and not ref.emulated,  # an emulated computation waits: the cores stay free, as a GPU's
        r.zero_stage,
    )
    if plan.micro_batch < 1 or plan.batch_size % (plan.world * r.accumulate):
        raise UserError(
            f"a global batch of {plan.batch_size} does not split into {plan.world} processes x {r.accumulate} "
            "micro-batches"
        )
    return plan


def _profile(r: ProjectRequest, ref: Reference, plan: Plan, profiled: Profile | None) -> Profile:
    """The module profile's backward (--from-profile), measured at the plan's micro-batch (a profile does not scale to
    another); else the profile --profile names, measured at it; else measured here, now."""
    if profiled is not None:
        return at_micro_batch(profiled, r.from_profile, plan.micro_batch, f"--batch-size {r.batch_size}")
    if r.profile is None:
        print(
            f"measuring the backward of {ref.task} at micro-batch {plan.micro_batch} ...", file=sys.stderr, flush=True
        )
        return measure_profile(ref, plan.micro_batch)
    measured = Profile.read(r.profile)
    if measured.micro_batch != plan.micro_batch:
        raise UserError(
            f"--profile {r.profile} was measured at micro-batch {measured.micro_batch}, this plan's is "
            f"{plan.micro_batch}: leave --profile out to measure it"
        )
    return measured
