"""The records of compare sweeps grouped by configuration over their rounds, and the paired ratios between them.

A *configuration* is what a sweep varies (distbench/sweep/configuration.py: task, backend, world size, threads per
process and the other axes); each is run once per round. Speed-up and every comparison are paired within a round
(distbench/sweep/stats.py). The report's figures and verdicts (verdicts.py), its summary in words (summary.py) and
its plots read them from here.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from distbench.records import read_jsonl
from distbench.sweep import stats
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.stats import Summary

REQUIRED = ("task", "backend", "world_size", "status")  # what a line of results.jsonl must hold to be reported


@dataclass
class Loaded:
    """The records and sweep descriptions of compare folders, and the lines of results.jsonl that held no record."""

    records: list[dict]
    sweeps: list[dict]
    skipped: list[str]  # "FOLDER/results.jsonl line N: why"


def load(dirs: list[Path]) -> Loaded:
    """Every complete record of the folders' results.jsonl; a line cut short (a sweep killed while it wrote, a full
    disk) or not a compare record is skipped and named."""
    loaded = Loaded([], [], [])
    for d in dirs:
        path = d / "results.jsonl"
        if path.is_file():  # else: interrupted before any run
            lines = read_jsonl(path)
            loaded.skipped += [f"{path} {why}" for why in lines.skipped]
            for number, rec in enumerate(lines.records, 1):
                missing = [k for k in REQUIRED if k not in rec]
                if missing:
                    loaded.skipped.append(f"{path} record {number}: not a compare record (no {', '.join(missing)})")
                    continue
                rec.setdefault("round", 1)  # sweeps from before --repeats ran one round
                loaded.records.append(rec)
        if (d / "sweep.json").is_file():
            loaded.sweeps.append(json.loads((d / "sweep.json").read_text()))
    return loaded


@dataclass
class Config:
    """One configuration (distbench/sweep/configuration.py) over the rounds of a sweep: every run of it, ok or failed,
    and its label in the report. Its axes read through: `c.backend`, `c.world_size`, ..."""

    config: SweepConfig
    runs: list[dict] = field(default_factory=list)
    label: str = ""

    def __getattr__(self, name: str):
        if name == "config":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.config, name)

    @property
    def ok(self) -> list[dict]:
        """The runs that completed."""
        return [r for r in self.runs if r["status"] == "ok"]

    def by_round(self, metric: str = "samples_per_sec") -> dict[int, float]:
        """The completed runs' `metric` by round (the pairing of the paired ratios); rounds without one left out."""
        return {r["round"]: r[metric] for r in self.ok if r.get(metric)}

    def summary(self, metric: str = "samples_per_sec") -> Summary | None:
        """The median of `metric` over the completed runs, with its interval (stats.summarize)."""
        return stats.summarize([field_value(r, metric) for r in self.ok])

    def median(self, metric: str):
        """The median alone (no interval: no bootstrap for the table's secondary columns)."""
        values = [v for v in (field_value(r, metric) for r in self.ok) if v is not None]
        return statistics.median(values) if values else None


def field_value(rec: dict, metric: str):
    """A record's value; "a.b" reaches into a nested field (step_time_ms.p50)."""
    value = rec
    for part in metric.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def configurations(records: list[dict]) -> list[Config]:
    """The configurations (by task, then in SweepConfig's order), each with its runs, and labels that are as short as
    they can be without two configurations of a task sharing one: backend and world size, then each axis that
    varies among the configurations of that backend and world size."""
    configs: dict[SweepConfig, Config] = {}
    for rec in records:
        config = SweepConfig.from_record(rec)
        configs.setdefault(config, Config(config)).runs.append(rec)
    tasks = list(dict.fromkeys(c.task for c in configs.values()))
    out = sorted(configs.values(), key=lambda c: (tasks.index(c.task), c.config.sort_key()))
    for c in out:
        twins = [o for o in out if (o.task, o.backend, o.world_size) == (c.task, c.backend, c.world_size)]
        texts = c.config.texts()
        shown = [text for axis, text in texts.items() if len({o.config.texts()[axis] for o in twins}) > 1]
        c.label = " ".join([f"{c.backend} x{c.world_size}", *shown])
    return out


def reference_for(cfg: Config, configs: list[Config]) -> Config | None:
    """The reference of speed-up (SweepConfig.reference: `single` x1, same task, threads and accumulation), if it
    ran."""
    wanted = cfg.config.reference()
    return next((c for c in configs if c.config == wanted and c.ok), None)


def speedup(cfg: Config, configs: list[Config]) -> Summary | None:
    """Per round: this configuration's samples/s over the same round's reference run, summarised."""
    ref = reference_for(cfg, configs)
    if ref is None:
        return None
    return stats.summarize(stats.paired_ratios(cfg.by_round(), ref.by_round()))


def scaled(s: Summary | None, k: float) -> Summary | None:
    """The summary divided by `k` (a speed-up by the world size: the scaling efficiency); None stays None."""
    if s is None:
        return None
    return Summary(
        s.median / k,
        s.lo / k if s.has_interval else None,
        s.hi / k if s.has_interval else None,
        s.min / k,
        s.max / k,
        s.n,
    )


# ---- comparisons --------------------------------------------------------------------------------
def comparisons(configs: list[Config]) -> list[tuple[str, str, Summary | None]]:
    """(a, b, paired ratio a/b): each pair of configurations at the same world size, threads per process, nodes
    and link (a pair that differs in threads measures the threads, not the library), then each distributed one
    against its reference."""
    out = []
    ok = [c for c in configs if c.ok]
    for a, b in combinations(ok, 2):
        if a.config.held() == b.config.held():
            out.append((b.label, a.label, stats.summarize(stats.paired_ratios(b.by_round(), a.by_round()))))
    for c in ok:
        ref = reference_for(c, configs)
        if c.world_size > 1 and ref is not None:
            out.append((c.label, ref.label, speedup(c, configs)))
    return out


def resolution(configs: list[Config]) -> tuple[float, int] | None:
    """What the repeats can resolve: the median half-width (in %) of the paired ratios' intervals, and how many
    comparisons it is the median of; None where no comparison has an interval (too few rounds)."""
    widths = [r.half_width_pct() for _, _, r in comparisons(configs) if r is not None and r.has_interval]
    if not widths:
        return None
    return sorted(widths)[len(widths) // 2], len(widths)
