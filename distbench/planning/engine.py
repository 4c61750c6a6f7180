"""DeepSpeed's ZeRO engine at stages 1-3, measured rather than modelled (`project --node-sweep --node-commbench`).

What a ZeRO-K step costs beyond a stage-0 step is measured where it can be: one-node runs of the library
(`--node-sweep`, a compare) at stage K and at stage 0 with the same processes, paired within each round (the machine's
drift between rounds cancels out of a difference within one). Less what their step's own collectives took there
(`--node-commbench`: the norm all-reduced, the parameters all-gathered, at ZeRO-3 the gradients reduce-scattered in
place of the all-reduce; timeline.zero_exchanges_s), what remains is the
engine's own work, which no link changes: the norm computed on the host, the optimizer step on the partition (which
does not halve with it), the copies between the fp32 partition and the parameters, the backward's partition
bookkeeping. The timeline then puts the planned link's exchanges back (timeline.zero_step, zero_exchanges_s). Stage 0's
own step on the node, less what the model gives for it there, is added at every stage (`stage0_residual_s`). On CPU
nodes the node's collectives are fitted to commbench's time under load, as the planned link's are
(timeline.TIMED_UNDER_LOAD). Why:
docs/projection.md, "What DeepSpeed's own timers say of the missing 3 ms", and the validations after it.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from distbench.errors import UserError
from distbench.planning.commbench_report import series
from distbench.planning.links import Link, fit_link, load_links, resampled
from distbench.planning.profile import Profile
from distbench.planning.timeline import Computation, Plan, zero_exchanges_s, zero_step

GATHER = "deepspeed all-gather"  # commbench's series of DeepSpeed's parameter all-gather (`all_gather_into_tensor`)
SCATTER = "deepspeed reduce-scatter"  # and of its gradients' reduce-scatter at ZeRO-3 (`reduce_scatter_tensor`)


@dataclass(frozen=True)
class Engine:
    """One library's engine at one node: each round's step at stage K less its step at stage 0, s (`extra_s`, per
    stage), each round's step at stage 0 (`stage0_s`), at `world` processes, and the node's commbench records of
    DeepSpeed's collectives."""

    backend: str
    world: int
    extra_s: dict[int, list[float]]
    node_recs: dict[str, list[dict]]
    where: str  # the node's commbench folder, as the prediction says it
    stage0_s: list[float] = field(default_factory=list)
    micro_batch: int = 0  # the one-node runs' micro-batch per process
    under_load: bool = False  # the node's collectives fitted to commbench's time under load (timeline.timed_under_load)

    def stage0_residual_s(self, comp: Computation, profile: Profile, plan: Plan, rng: random.Random | None) -> float:
        """What stage 0's step took on the node beyond what zero_step gives for it there (the same computation and
        processes, the node's all-reduce), s: the median over rounds (with `rng`: a bootstrap resample of the rounds
        and of the node's commbench) less the model's; added to every stage's step on the planned link."""
        steps, recs = self.stage0_s, self.node_recs
        if rng is not None:
            steps = [rng.choice(steps) for _ in steps]
            recs = {k: resampled(v, rng) for k, v in recs.items()}
        there = replace(plan, nodes=1, nprocs=self.world, zero_stage=0)
        return statistics.median(steps) - zero_step(comp, profile, self.node(recs), there)

    def term_s(self, stage: int, profile: Profile, rng: random.Random | None = None) -> float:
        """The engine's own work per step at `stage` beyond stage 0's, s: the median paired difference less what
        stage K exchanges beyond stage 0 on the node (timeline.zero_exchanges_s; with `rng`: on a bootstrap resample
        of both), held at 0 where the collectives come to more (`said` says so); 0 at stage 0."""
        if stage == 0:
            return 0.0
        measured, taken_off = self._parts(stage, profile, rng)
        return max(0.0, measured - taken_off)

    def _parts(self, stage: int, profile: Profile, rng: random.Random | None) -> tuple[float, float]:
        extra, recs = self.extra_s[stage], self.node_recs
        if rng is not None:
            extra = [rng.choice(extra) for _ in extra]
            recs = {k: resampled(v, rng) for k, v in recs.items()}
        return statistics.median(extra), zero_exchanges_s(self.node(recs), profile, stage, self.world)

    def node(self, recs: dict[str, list[dict]] | None = None) -> Link:
        """The node's DeepSpeed all-reduce, its all-gather and reduce-scatter beside it (commbench's fits)."""
        recs = recs or self.node_recs
        plain = [r for r in recs["deepspeed"] if series(r)[1] == "none"]  # the norm: one float, never compressed

        def fitted(got: list[dict], name: str) -> Link:
            return fit_link(got, f"{self.where}'s {name}", under_load=self.under_load)

        scatter = fitted(recs[SCATTER], SCATTER) if recs.get(SCATTER) else None
        return replace(fitted(plain, "deepspeed"), gather=fitted(recs[GATHER], GATHER), scatter=scatter)

    @property
    def timed(self) -> str:
        """How the node's collectives were taken, as the warnings say it."""
        return ", timed under load" if self.under_load else ""

    def said(self, stage: int, profile: Profile) -> str:
        """What the prediction rests on, in a line."""
        measured, taken_off = self._parts(stage, profile, None)
        held = (
            f", more than the {1e3 * measured:.2f} ms measured: not physical, taken as 0"
            if taken_off > measured
            else f": {1e3 * (measured - taken_off):.2f} ms a step of the engine's own work"
        )
        return (
            f"ZeRO-{stage}'s engine beyond stage 0 measured on one node at {self.world} processes "
            f"({len(self.extra_s[stage])} round(s) of {self.backend} at stages 0 and {stage}), what it exchanges "
            f"there beyond stage 0 ({self.where}{self.timed}, {1e3 * taken_off:.2f} ms) taken off{held}"
        )


def load_engine(node_sweep: Path, node_commbench: Path, backend: str, stage: int, under_load: bool = False) -> Engine:
    """`backend`'s engine from its one-node runs and the node's commbench (`under_load`: its collectives fitted to
    their time under load, as the planned link's are); either missing what it needs is one line."""
    _, recs = load_links(node_commbench, None, "--node-commbench")
    where = f"--node-commbench {node_commbench}"
    plain = [r for r in recs.get("deepspeed", []) if series(r)[1] == "none"]
    needed = (("deepspeed", plain), (GATHER, recs.get(GATHER)), *([(SCATTER, recs.get(SCATTER))] if stage == 3 else []))
    missing = [s for s, got in needed if not got]
    if missing:
        raise UserError(f"{where} timed no {' or '.join(missing)} (run.py commbench --backends deepspeed --nodes 1)")
    flat = [r for rs in recs.values() for r in rs]
    if any((r.get("nodes") or 1) != 1 for r in flat) or len({r["world_size"] for r in flat}) != 1:
        raise UserError(f"{where}: not one node at one world size (run.py commbench --nodes 1 --nprocs N)")
    world = flat[0]["world_size"]
    if not (node_sweep / "results.jsonl").is_file():
        raise UserError(f"--node-sweep {node_sweep}: not a compare folder (no results.jsonl)")
    steps, micro = _steps(node_sweep, backend, world)
    extra = [t - steps[(0, n)] for (k, n), t in steps.items() if k == stage and (0, n) in steps]
    if not extra:
        raise UserError(
            f"--node-sweep {node_sweep}: no one-node {backend} runs at {world} processes at ZeRO stage"
            f"{f's 0 and {stage} in one round' if stage else ' 0'}, which {where} is for (compare --backends {backend} "
            f"--zero-stage 0{f',{stage}' if stage else ''} --nodes 1 --nprocs {world})"
        )
    stage0 = [t for (k, _), t in steps.items() if k == 0]
    return Engine(backend, world, {stage: extra} if stage else {}, recs, str(node_commbench), stage0, micro, under_load)


def _steps(node_sweep: Path, backend: str, world: int) -> tuple[dict[tuple[int, int], float], int]:
    """Each one-node run's step of `backend` at `world`, s, by (ZeRO stage, round); and their micro-batch per process
    (their global batch over their processes and micro-batches; 0: none ran)."""
    from distbench.sweep.grouping import load

    steps: dict[tuple, float] = {}
    micro = 0
    for r in load([node_sweep]).records:
        one_node = (r.get("nodes") or 1) == 1 and r.get("world_size") == world
        if r["status"] == "ok" and r["backend"] == backend and one_node and r.get("samples_per_sec"):
            steps[((r.get("config") or {}).get("zero_stage", 0), r["round"])] = (
                r["global_batch_size"] / r["samples_per_sec"]
            )
            micro = r["global_batch_size"] // (world * (r.get("accumulate") or 1))
    return steps, micro
