"""The projection's computation, from a compare sweep's `single` x1 runs: the step's phases (data, forward+backward,
optimizer) and how much a step's time varies, at the sweep's global batch and at each batch it ran, per run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from distbench.errors import UserError

NORMAL_P90 = 1.2816  # the 90th percentile of a standard normal, in standard deviations


@dataclass(frozen=True)
class Phases:
    """One step's computation, ms: data loading, forward+backward, optimizer; and how much the step time varies
    from step to step (`jitter`, a standard deviation taken from the run's median and 90th percentile)."""

    data: float
    forward_backward: float
    optimizer: float
    jitter: float = 0.0


@dataclass(frozen=True)
class Reference:
    """The sweeps' `single` x1 runs of one task: the computation of a step, run by run, at the planned global batch
    where they ran it, else at their largest (`runs`), and at every batch they ran (`by_batch`: a run at a planned
    micro-batch is that micro-batch's computation, measured rather than scaled)."""

    task: str
    batch_size: int
    threads: int
    device: str  # the reference's device type: cpu or cuda
    config: dict  # the run's options (RunConfig.to_dict), to build the same task
    runs: list[Phases]
    samples_per_sec: list[float]
    by_batch: dict[int, list[Phases]] = field(default_factory=dict)
    emulated: bool = False  # the runs replayed a profile (--emulate): their computation left the cores free
    profiled: bool = False  # the runs are a module profile's steps (--from-profile): no data loading, no loop

    @classmethod
    def load(cls, sweep_dirs: list[Path], batch: int | None = None) -> Reference:
        """The reference of the compare folders; a folder of another kind, or whose records are not a compare's, is
        one line."""
        for d in sweep_dirs:
            if not (d / "results.jsonl").is_file():
                raise UserError(f"{d}: not a compare folder (no results.jsonl)")
        where = " ".join(map(str, sweep_dirs))
        try:
            return cls._of(sweep_dirs, batch, where)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            said = f"a record lacks {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            raise UserError(f"{where}: not what compare writes ({said})") from e

    @classmethod
    def _of(cls, sweep_dirs: list[Path], batch: int | None, where: str) -> Reference:
        from distbench.sweep.grouping import load

        recs = [r for r in load(sweep_dirs).records if _is_reference(r)]
        if not recs:
            raise UserError(
                f"{where}: no successful `single` x1 run (accumulate 1, no compression, unshaped) to take the "
                "computation from; run compare with --backends single,... --nprocs 1"
            )
        shapes = {(r["task"], r["environment"]["threads_per_process"]) for r in recs}
        if len(shapes) > 1:
            raise UserError(f"{where}: `single` x1 runs of several tasks or threads: {sorted(shapes)}")
        (task, threads) = shapes.pop()
        by_batch: dict[int, list[dict]] = {}
        for r in recs:
            by_batch.setdefault(r["global_batch_size"], []).append(r)
        batch = batch if batch in by_batch else max(by_batch)  # the planned global batch where it was run
        mine = by_batch[batch]
        device = str(mine[0]["environment"]["device"]).split(":")[0]
        phases = {b: [_phases(r) for r in rs] for b, rs in by_batch.items()}
        emulated = {r.get("emulated") is not None for r in recs}
        if len(emulated) > 1:
            raise UserError(
                f"{where}: some `single` x1 runs were emulated (--emulate) and some computed: give one kind"
            )
        return cls(
            task,
            batch,
            threads,
            device,
            mine[0]["config"],
            phases[batch],
            [r["samples_per_sec"] for r in mine],
            phases,
            emulated.pop(),
        )


def _phases(r: dict) -> Phases:
    steps = r.get("step_time_ms") or {}
    jitter = max(0.0, steps["p90"] - steps["p50"]) / NORMAL_P90 if {"p50", "p90"} <= steps.keys() else 0.0
    return Phases(*(r["step_breakdown_ms"][k] for k in ("data_ms", "forward_backward_ms", "optimizer_ms")), jitter)


def median_phases(runs: list[Phases]) -> Phases:
    """Each phase's median over the runs (and the jitter's)."""
    return Phases(*(statistics.median(getattr(p, f) for p in runs) for f in Phases.__dataclass_fields__))


def _is_reference(r: dict) -> bool:
    """A successful run of the sweep's reference configuration (its SweepConfig says: `single` x1, one node,
    unshaped, nothing compressed) without accumulation: the computation a planned step is built from."""
    from distbench.sweep.configuration import SweepConfig

    config = SweepConfig.from_record(r)
    return r["status"] == "ok" and config.is_reference and config.accumulate == 1
