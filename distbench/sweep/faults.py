"""The report's faults section: what each fault a sweep injected (`--fault`, an axis) cost each library, against the
same configuration without it, paired within rounds.

A faulted run that the library continued (a launcher that restarts the group, from the run's last checkpoint; Horovod
Elastic's survivors, from their last commit, with fewer ranks where the failed worker's host was dropped) records
what the fault cost (training/faults.py: the record's `fault`); one that the library did not continue
failed, and what is known is how long the job took to end (the executor's `elapsed_s`). A straggler (`slow`) is a
fault of every step: what it cost is the step time against the run without it.
"""

from __future__ import annotations

from dataclasses import replace

from distbench.config import NO_FAULT
from distbench.sweep import stats
from distbench.sweep.grouping import Config, field_value
from distbench.sweep.stats import Summary

COLUMNS = (
    "| configuration | fault | continued | job ended after (s) | first noticed (s) | restarted (s) | recovered (s) "
    "| steps redone | regrown (s) | step time vs without | goodput vs without |"
)


def fault_lines(configs: list[Config]) -> list[str]:
    """The section: one row per faulted configuration; nothing where the sweep injected none."""
    faulted = [c for c in configs if c.config.fault != NO_FAULT]
    if not faulted:
        return []
    rows = [_row(c, _without(c, configs)) for c in faulted]
    return [
        "## Faults",
        "",
        "Each faulted configuration against the same one without the fault (`--fault`, docs/faults.md), medians over "
        "rounds: how many runs the library continued past the fault; for those it did not, how long until the job "
        "ended; for those it did, from the fault: when a survivor's collective first failed, when the launcher had "
        "the group running again, when it completed its next step, and the steps trained again (from the last "
        "checkpoint, or Horovod Elastic's last commit; `xN after`: it continued with N ranks; `x2 > x1 > x2`: the "
        "sizes it ran at in turn, where the lost node came back; regrown: from the node's return to the first step "
        "at the launched size); then, paired within "
        f"rounds ({stats.CI} where there are enough), the median step time and the "
        "whole run's useful samples per second of wall time (goodput), each over the run without the fault.",
        "",
        COLUMNS,
        "|" + "---|" * COLUMNS.count(" | ") + "---|",
        *rows,
        "",
    ]


def _without(c: Config, configs: list[Config]) -> Config | None:
    wanted = replace(c.config, fault=NO_FAULT)
    return next((o for o in configs if o.config == wanted), None)


def _row(c: Config, free: Config | None) -> str:
    ok = c.ok
    ended = stats.summarize([r.get("elapsed_s") for r in c.runs if r["status"] != "ok"])
    cells = [
        c.label,
        f"`{c.config.fault}`",
        f"{len(ok)} of {len(c.runs)}{_shrunk(c)}",
        _median(ended),
        *(_median(stats.summarize([field_value(r, f"fault.{k}") for r in ok])) for k in _COSTS),
        _paired(c, free, _step_time),
        _paired(c, free, _goodput),
    ]
    return "| " + " | ".join(cells) + " |"


def _shrunk(c: Config) -> str:
    """Where the library continued with fewer ranks (Horovod Elastic drops the failed worker's host): how many; where
    a lost node came back (kill-node:NODE@STEP:BACK), the sizes the job ran at in turn."""
    paths = sorted({tuple(p) for r in c.ok if len(set(p := field_value(r, "fault.world_sizes") or ())) > 1})
    if paths:
        return f" ({', '.join('x' + ' > x'.join(map(str, p)) for p in paths)})"
    after = sorted({a for r in c.ok if (a := field_value(r, "fault.world_size_after")) is not None})
    shrunk = [a for a in after if a != c.config.world_size]
    return f" (x{'/'.join(map(str, shrunk))} after)" if shrunk else ""


_COSTS = ("first_noticed_s", "restarted_s", "recovered_s", "steps_redone", "regrown_s")


def _step_time(r: dict) -> float | None:
    return field_value(r, "step_time_ms.p50")


def _goodput(r: dict) -> float | None:
    """Useful samples per second of the whole run: the fault's own account where it was met (its wall from the
    first attempt's start), else the run's steps over its wall time."""
    if (cost := r.get("fault")) and cost.get("goodput_samples_per_sec"):
        return cost["goodput_samples_per_sec"]
    wall = r.get("wall_time_s")
    return r["steps"] * r["global_batch_size"] / wall if wall else None


def _paired(c: Config, free: Config | None, metric) -> str:
    if free is None:
        return "— (no run without the fault)"
    mine = {r["round"]: v for r in c.ok if (v := metric(r))}
    theirs = {r["round"]: v for r in free.ok if (v := metric(r))}
    ratio = stats.summarize(stats.paired_ratios(mine, theirs))
    if ratio is None:
        return "—"
    if ratio.has_interval:
        return f"{ratio.median:.2f}x ({ratio.lo:.2f}-{ratio.hi:.2f})"
    return f"{ratio.median:.2f}x"


def _median(s: Summary | None) -> str:
    return "—" if s is None else f"{s.median:.1f}"
