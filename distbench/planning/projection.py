"""A library's step time at a planned scale, from what one machine measured (docs/projection.md).

Three measurements go in, each where it is measured best:

- the computation, from a compare sweep's `single` x1 runs (reference.py: `Reference`);
- the shape of backward, from the task's own model on this machine (profile.py: `Profile`);
- the link, from commbench's fit of each library's own all-reduce, or the link's nominal rate (links.py: `Link`).

Each library's step is then a timeline (timeline.py). The interval comes from the spread of every measurement it
uses: the prediction is repeated on bootstrap resamples of the reference runs (their samples/s too, for the
efficiency), of commbench's repeats and of the profile's passes (`interval`). Each way a projection goes beyond what
was measured it says (`Projection.warnings`, `Projection.link_warnings`); projection_report.py writes and prints it.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, replace

from distbench.errors import UserError
from distbench.planning.bandwidth import size_text
from distbench.planning.commbench_report import label, series
from distbench.planning.engine import Engine
from distbench.planning.links import COMPRESSED_FRACTION, Link, fit_link, resampled
from distbench.planning.profile import Profile
from distbench.planning.reference import Phases, Reference, median_phases
from distbench.planning.timeline import (
    FSDP_SERIAL_SAID,
    GRADIENT_ALLREDUCE,
    MODELS,
    ZERO_FOUND,
    ZERO_GATHER_FOUND,
    ZERO_LOADED_FOUND,
    Computation,
    Plan,
    largest_message,
    step_s,
    timed_under_load,
)

RESAMPLES = 200  # bootstrap resamples behind each interval
# a commbench whose ranks outnumber its host's cores more than this many times over: its times are the host's as much
# as the link's (found at 8 and 16 emulated nodes on 2 cores, written after; 4 on 2 was within 4 %); a dilated one
# (--dilation K) may run K times as many, its host's costs divided by K
CROWDED = 2
CROWDED_SAID = (
    "the commbench ran {world} ranks on {cores} cores: its times may be the host's as much as the link's; at 8 and 16 "
    "emulated nodes on 2 cores its fits made predictions 15-41 % too slow, and a commbench at 4 nodes carried by the "
    "ring's arithmetic 11-23 % when held out (docs/projection.md): a commbench on nodes whose ranks have cores of "
    "their own is the better input (for an emulated cluster, one at its dilation, commbench --dilation K: within "
    "4.4 % at 8 and 16 nodes)"
)
DILATED_SAID = (
    "the commbench ran at dilation {k:g}: its host's costs are 1/{k:g} of this machine's and nothing was timed under "
    "load, as on an emulated cluster's nodes, not on CPU nodes that compute the step (a commbench at dilation 1 is "
    "their input)"
)
SHARDED = {"gather": "all-gather", "scatter": "reduce-scatter"}  # Link's field: commbench's collective


def gradients_series(backend: str, carrier: str) -> str:
    """The commbench series that carries `backend`'s gradients: its carrier's all-reduce, or FSDP2's reduce-scatter."""
    return f"{carrier} reduce-scatter" if MODELS.get(backend) == "fsdp" else carrier


def interval(point: float, resamples: list[float]) -> tuple[float | None, float | None, str | None]:
    """The 95 % interval of a prediction from its bootstrap resamples: their 2.5-97.5 % range, an end that falls on
    the point or inside it (resamples tied with the point: an input without spread, a fit held at 0) moved out to the
    nearest resample beyond the point, so that the point lies strictly inside. Where no resample lies beyond the
    point on a side, there is no interval: (None, None, why)."""
    ordered = sorted(resamples)
    below = [v for v in ordered if v < point]
    above = [v for v in ordered if v > point]
    if not below or not above:
        why = (
            "its inputs do not vary" if not below and not above else f"no resample {'below' if not below else 'above'}"
        )
        return None, None, why
    n = len(ordered)
    return min(ordered[int(0.025 * n)], below[-1]), max(ordered[int(0.975 * n) - 1], above[0]), None


# what a prediction from a module profile leaves out (docs/projection.md, "What the profile as input says", measured
# 2026-12-06 against emulated `single` x1 runs)
PROFILED_SAID = (
    "the computation is a module profile's forward, backward and optimizer: no data loading and no training loop, "
    "which took 1-11 % of an emulated step beside them here (docs/projection.md); where a loader is not hidden behind "
    "the step, the step is that much longer"
)


@dataclass(frozen=True)
class Projection:
    """Everything a prediction is made from: the reference's computation, the profile of backward, the plan, and the
    link (commbench's records per backend, or None: the nominal rate), with DDP's bucket cap for the plan's device
    and gradients (backends/ddp.py's own choice)."""

    ref: Reference
    profile: Profile
    plan: Plan
    links: dict[str, list[dict]] | None  # commbench's records per backend; None: the nominal link
    rate: str | None
    cap_mb: float
    engines: dict[str, Engine] | None = None  # DeepSpeed's engine measured on one node, per backend (engine.py)

    def measured_as(self, backend: str) -> str:
        """The commbench backend whose all-reduce carries this library's gradients (its own if that is missing)."""
        carrier = GRADIENT_ALLREDUCE[backend]
        return carrier if self.links is not None and gradients_series(backend, carrier) in self.links else backend

    def carried(self, backend: str) -> tuple[list[dict], float, str]:
        """The carrier's commbench records for the plan's compression, the bytes its fit is taken at per gradient
        byte, and what they are: the compression as the library sends it where commbench timed it, else the
        uncompressed all-reduce at the compressed size."""
        carrier, compression = self.measured_as(backend), self.plan.compression
        named = gradients_series(backend, carrier)
        recs = self.links[named]
        timed = [r for r in recs if series(r)[1] == compression]
        if timed:
            return timed, 1.0, f"commbench fit of {label(named, compression)}"
        plain = [r for r in recs if series(r)[1] == "none"]
        if not plain:
            raise UserError(f"the commbench timed {named} neither with {compression} nor uncompressed")
        return plain, COMPRESSED_FRACTION[compression], f"commbench fit of {named} at {compression}'s size"

    def link_for(self, backend: str, recs: list[dict] | None = None, sharded: dict | None = None) -> Link:
        """The link this library's gradients travel on: the fit of its carrier's records (or of `recs`, a resample
        of them), with its parameters' all-gather and its gradients' reduce-scatter where commbench timed them (or
        `sharded`, a resample), or the nominal rate."""
        if self.links is None:
            return Link.nominal(self.rate, self.plan.compression)
        carried, fraction, said = self.carried(backend)
        loaded, shared = timed_under_load(backend, self.plan), self.plan.cores_shared
        link_ = fit_link(recs if recs is not None else carried, said, fraction, loaded, shared)
        fits = {
            field: fit_link(got, f"commbench fit of {self.measured_as(backend)} {SHARDED[field]}", 1.0, loaded, shared)
            for field, got in (sharded or self.sharded(backend)).items()
        }
        return replace(link_, **fits)

    def sharded(self, backend: str) -> dict[str, list[dict]]:
        """commbench's records of the library's sharding collectives (ZeRO's parameter all-gather, `gather`, and
        gradient reduce-scatter, `scatter`), those it timed."""
        if MODELS.get(backend) not in ("zero", "fsdp") or self.links is None:
            return {}
        got = {f: self.links.get(f"{self.measured_as(backend)} {c}") for f, c in SHARDED.items()}
        return {f: recs for f, recs in got.items() if recs}

    @property
    def micro_runs(self) -> list[Phases] | None:
        """The sweep's runs at the plan's micro-batch, if it ran it (None: scale the reference's by the profile)."""
        return self.ref.by_batch.get(self.plan.micro_batch)

    @property
    def measured(self) -> dict | None:
        """The scale and link the commbench measured at (None: no commbench, the nominal link)."""
        if self.links is None:
            return None
        recs = [r for rs in self.links.values() for r in rs]
        nodes = max(r.get("nodes") or 1 for r in recs)
        world = max(r["world_size"] for r in recs)
        mode = recs[0].get("link_mode") or "shared"
        dilation = max(r.get("dilation", 1.0) for r in recs)
        return {"world_size": world, "nodes": nodes, "nprocs": world // nodes, "link_mode": mode, "dilation": dilation}

    @property
    def commbench_cores(self) -> int:
        """The cores of the host the commbench ran on, as its records say (0: not recorded, or no commbench)."""
        loads = [r["machine_load"] for rs in (self.links or {}).values() for r in rs if r.get("machine_load")]
        return min((load.get("cores") or 0 for load in loads), default=0)

    def computation_said(self) -> str:
        """Where the prediction's computation comes from, as its output says."""
        plan = self.plan
        if self.ref.profiled:
            return f"a module profile's forward, backward and optimizer at micro-batch {plan.micro_batch}"
        if self.micro_runs:
            return f"measured at micro-batch {plan.micro_batch}"
        return f"batch {self.ref.batch_size} scaled to micro-batch {plan.micro_batch} by the profile"

    def warnings(self, backend: str, terms: dict | None = None) -> list[str]:
        """Each way the plan for `backend` goes beyond what was measured (the fits' own: `link_warnings`); `terms`:
        its `engine_terms`, where the caller has them."""
        plan, m, out = self.plan, self.measured, []
        if self.ref.profiled:
            out.append(PROFILED_SAID)
        if MODELS.get(backend) == "fsdp":
            out.append(FSDP_SERIAL_SAID)
        engine = self.engine(backend)
        if engine is not None:
            out += self._engine_warnings(backend, engine, terms or self.engine_terms(backend))
        elif MODELS.get(backend) == "zero" and plan.zero_stage:
            out.append(ZERO_GATHER_FOUND if "gather" in self.sharded(backend) else ZERO_FOUND)
        if m is None:
            out.append(
                f"the link {self.rate} was not measured: it is taken at its nominal rate, with no latency and no CPU "
                "cost (give --commbench DIR, measured on it)"
            )
        else:
            if plan.world > m["world_size"]:
                out.append(
                    f"{plan.world} ranks, beyond the {m['world_size']} the commbench measured: the all-reduce at "
                    f"{plan.world} ranks is its fit at {m['world_size']} carried by a ring's arithmetic, not measured"
                )
            if plan.nodes > m["nodes"]:
                alone = (
                    " (one node: its ranks talked over its loopback, no link between nodes)" if m["nodes"] == 1 else ""
                )
                out.append(f"{plan.nodes} nodes, beyond the {m['nodes']} the commbench measured{alone}")
            out += self.beyond_sizes(backend)
            cores = self.commbench_cores
            if cores and m["world_size"] > CROWDED * cores * m["dilation"]:
                out.append(CROWDED_SAID.format(world=m["world_size"], cores=cores))
            if plan.cores_shared and m["dilation"] != 1.0:
                out.append(DILATED_SAID.format(k=m["dilation"]))
        if not self.micro_runs and plan.micro_batch != self.ref.batch_size:
            out.append(
                f"forward+backward at micro-batch {plan.micro_batch} is batch {self.ref.batch_size}'s scaled by the "
                f"profile, not measured (`single` x1 runs at batch {plan.micro_batch}, given as a second folder, "
                "measure it; docs/projection.md)"
            )
        return out

    def beyond_sizes(self, backend: str) -> list[str]:
        """The largest message the step sends (`timeline.largest_message`), in the fit's bytes, where it is larger
        than any size the commbench timed: the fitted line is carried past the measurements (none: within them)."""
        recs, fraction, _ = self.carried(backend)
        nbytes, what = largest_message(backend, self.profile, self.cap_mb)
        top = max(r["size_bytes"] for r in recs)
        if fraction * nbytes <= top:
            return []
        size = f"{fraction * nbytes / 2**20:.1f} MiB"
        return [
            f"{what} ({size}) is larger than any message the commbench timed ({size_text(top)}): its time is the fit "
            f"carried beyond what was measured (commbench --sizes up to {size} measures it)"
        ]

    def engine_terms(self, backend: str) -> dict:
        """The engine's measured terms as the output holds them, ms, at the point prediction's computation: its own
        work beyond stage 0 and what stage 0's step took on the node beyond the model (none without an engine)."""
        engine = self.engine(backend)
        if engine is None:
            return {}
        micro = self.micro_runs and median_phases(self.micro_runs)
        comp = Computation.of(median_phases(self.ref.runs), self.profile, self.ref.batch_size, self.plan, micro)
        residual = engine.stage0_residual_s(comp, self.profile, self.plan, None)
        return {"engine_ms": 1e3 * engine.term_s(self.plan.zero_stage, self.profile), "stage0_node_ms": 1e3 * residual}

    def _engine_warnings(self, backend: str, engine: Engine, terms: dict) -> list[str]:
        """What a ZeRO prediction with the engine measured on one node rests on (its `engine_terms`), and what its
        validation found."""
        stage, world = self.plan.zero_stage, self.plan.world
        out = [
            f"{engine.backend}'s stage-0 step measured on one node at {engine.world} processes "
            f"({len(engine.stage0_s)} run(s)): {terms['stage0_node_ms']:+.2f} ms a step beyond the model's there"
            f"{engine.timed}, added at every link",
            *([engine.said(stage, self.profile)] if stage else []),
            ZERO_LOADED_FOUND,
        ]
        if engine.micro_batch != self.plan.micro_batch:
            out.append(
                f"the one-node runs' micro-batch is {engine.micro_batch}, the plan's {self.plan.micro_batch}: stage "
                "0's step measured there is compared with the model's at the plan's"
            )
        if engine.world != world:
            out.append(
                f"ZeRO-{stage}'s engine measured at {engine.world} processes, planned at {world}: its work on the "
                f"partition is taken as measured, not rescaled to a 1/{world} partition"
            )
        if stage == 3 and "scatter" not in self.sharded(backend):
            out.append(
                "ZeRO-3's reduce-scatter on the planned link was not timed by commbench (nominal, or a commbench from "
                "before it was): taken as half a ring all-reduce"
            )
        return out

    def link_warnings(self, link_: Link) -> list[str]:
        """A fit that is not physical, as the prediction takes it (held at alpha, beta >= 0)."""
        whys = {"": link_.time_why, " (the computation it takes)": self.plan.cores_shared and link_.cpu_why}
        return [
            f"{link_.source}{what}: not physical ({why}); the prediction takes its alpha and beta held at 0 or above"
            for what, why in whys.items()
            if why and (not what or why != link_.time_why)  # the same reason for both: said once
        ]

    def engine(self, backend: str) -> Engine | None:
        """The library's engine as measured on one node, where it was (engine.py)."""
        return (self.engines or {}).get(backend) if MODELS.get(backend) == "zero" else None

    def one(
        self, backend: str, phases: Phases, link_: Link, micro: Phases | None = None, profile=None, rng=None
    ) -> float:
        """One step of `backend`, s, from these phases (and these at the micro-batch, where it was run), link and
        profile (the projection's own by default), and the engine measured on one node (with `rng`: resampled)."""
        profile = profile or self.profile
        comp = Computation.of(phases, profile, self.ref.batch_size, self.plan, micro)
        engine = self.engine(backend)
        if engine is None:
            return step_s(backend, comp, profile, link_, self.plan, self.cap_mb)
        engine_s = engine.term_s(self.plan.zero_stage, self.profile, rng)
        step = step_s(backend, comp, profile, link_, self.plan, self.cap_mb, engine_s)
        return step + engine.stage0_residual_s(comp, profile, self.plan, rng)

    def predict(self, backend: str, seed: int = 0) -> dict:
        """One library's prediction, as the output holds it (one object per backend): its step time, samples/s and
        scaling efficiency with their 95 % intervals (bootstrap resamples drawn from `seed`), where the link and the
        computation come from, and the warnings that apply to it."""
        micro, plan = self.micro_runs, self.plan
        link_ = self.link_for(backend)
        step = self.one(backend, median_phases(self.ref.runs), link_, micro and median_phases(micro))
        single = statistics.median(self.ref.samples_per_sec)
        sps = plan.batch_size / step
        eff = sps / (plan.world * single)
        boot_sps, boot_eff = self._bootstrap(backend, random.Random(seed))
        sps_lo, sps_hi, sps_why = interval(sps, boot_sps)
        eff_lo, eff_hi, _ = interval(eff, boot_eff)
        terms = self.engine_terms(backend)
        return {
            "backend": backend,
            **({"zero_stage": plan.zero_stage} if MODELS[backend] == "zero" else {}),
            "nodes": plan.nodes,
            "nprocs": plan.nprocs,
            "world_size": plan.world,
            "global_batch_size": plan.batch_size,
            "micro_batch_size": plan.micro_batch,
            "accumulate": plan.accumulate,
            "grad_compression": plan.compression,
            "link_rate": self.rate,
            "link": link_.source,
            **({"all_gather": link_.gather.source} if link_.gather else {}),
            **({"reduce_scatter": link_.scatter.source} if link_.scatter and plan.zero_stage == 3 else {}),
            **terms,
            "computation": self.computation_said(),
            "step_ms": step * 1e3,
            "samples_per_sec": sps,
            "samples_per_sec_lo": sps_lo,
            "samples_per_sec_hi": sps_hi,
            "no_interval": sps_why,  # why samples/s has none (None: it has one)
            # strong scaling: the same global batch on one process (the reference) and on world_size processes
            "scaling_efficiency": eff,
            "scaling_efficiency_lo": eff_lo,
            "scaling_efficiency_hi": eff_hi,
            "reference_samples_per_sec": single,
            "commbench": self.measured,
            "warnings": [
                *self.warnings(backend, terms),
                *self.link_warnings(link_),
                *(self.link_warnings(link_.gather) if link_.gather else []),
                *(self.link_warnings(link_.scatter) if link_.scatter and plan.zero_stage == 3 else []),
            ],
        }

    def _bootstrap(self, backend: str, rng: random.Random) -> tuple[list[float], list[float]]:
        """The prediction's samples/s and efficiency on RESAMPLES bootstrap resamples of every input."""
        micro, runs, plan = self.micro_runs, self.ref.runs, self.plan
        boot_sps, boot_eff = [], []
        for _ in range(RESAMPLES):
            picks = self._picks(rng, runs)
            b_step = self.one(
                backend,
                median_phases([runs[i] for i in picks]),
                self._resampled_link(backend, rng),
                micro and median_phases([micro[i] for i in self._picks(rng, micro)]),
                self.profile.resampled(rng),
                rng,
            )
            boot_sps.append(plan.batch_size / b_step)
            # the efficiency's reference resampled with the same runs
            boot_eff.append(boot_sps[-1] / (plan.world * statistics.median(self.ref.samples_per_sec[i] for i in picks)))
        return boot_sps, boot_eff

    @staticmethod
    def _picks(rng: random.Random, runs: list) -> list[int]:
        """A bootstrap resample of the runs, as their indices."""
        return [rng.choice(range(len(runs))) for _ in runs]

    def _resampled_link(self, backend: str, rng: random.Random) -> Link:
        if self.links is None:
            return Link.nominal(self.rate, self.plan.compression)
        sharded = {f: resampled(recs, rng) for f, recs in self.sharded(backend).items()}
        return self.link_for(backend, resampled(self.carried(backend)[0], rng), sharded)


def with_plan(projection: Projection, **changes) -> Projection:
    """The same projection for a plan with `changes`."""
    return replace(projection, plan=replace(projection.plan, **changes))
