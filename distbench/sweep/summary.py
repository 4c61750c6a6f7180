"""The report's summary in plain words, and its failures section.

The summary says, per task: the fastest configuration at each world size (with the same threads, nodes and link)
and its verdicts against the others there (stats.verdict, the sentences the Verdicts section prints), which of them
are within noise of it, the memory each rank holds, the start-up, and how many runs failed. The failures section
gives each failed run's cause whole: the table has room for its last line only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from distbench.sweep import stats
from distbench.sweep.configuration import AXES, SweepConfig
from distbench.sweep.context import spread
from distbench.sweep.grouping import Config, resolution, scaled, speedup
from distbench.training.memory import state_bytes


def labeller(configs: list[Config]) -> Callable[[dict], str]:
    """A record's configuration label (as the report's table shows it)."""
    labels = {c.config: c.label for c in configs}
    return lambda rec: labels[SweepConfig.from_record(rec)]


def _groups(configs: list[Config]) -> dict[tuple, list[Config]]:
    """The configurations that ran, by what a verdict holds equal (task, world size, threads, nodes, link), each
    group fastest first by median samples/s."""
    groups: dict[tuple, list[Config]] = {}
    for c in configs:
        if c.summary() is not None:
            groups.setdefault(c.config.held(), []).append(c)
    return {k: sorted(g, key=lambda c: -c.summary().median) for k, g in groups.items()}


def _where(group: list[Config], task_configs: list[Config]) -> str:
    """The group's name: "mnist, world size 2", plus each held axis that varies among the task's configurations."""
    c = group[0]
    varies = [
        name
        for name, f in AXES.items()
        if f.metadata["held"] and f.metadata["text"] and len({getattr(o.config, name) for o in task_configs}) > 1
    ]
    return ", ".join([f"{c.task}, world size {c.world_size}", *(c.config.texts()[name] for name in varies)])


def _fastest_line(group: list[Config], configs: list[Config], task_configs: list[Config]) -> str:
    best = group[0]
    text = f"- **{_where(group, task_configs)}**: "
    sps = f"{best.summary().median:,.0f} samples/s"
    eff = scaled(speedup(best, configs), best.world_size)
    if eff is not None and best.world_size > 1:
        sps += f", efficiency {eff.median:.2f}"
    if len(group) == 1:
        return text + f"only {best.label} ran ({sps})."
    text += f"fastest by its median: {best.label} ({sps}). "
    ratios = [(o, stats.summarize(stats.paired_ratios(best.by_round(), o.by_round()))) for o in group[1:]]
    text += "; ".join(stats.verdict(best.label, o.label, r) for o, r in ratios) + "."
    close = [o.label for o, r in ratios if r is not None and stats.distinguishable(r) is False]
    if close:
        text += f" Within noise of the fastest (their interval contains 1): {', '.join(close)}."
    if any(r is None or stats.distinguishable(r) is None for _, r in ratios):
        text += f" With fewer than {stats.MIN_FOR_INTERVAL} rounds, no difference here can be called real."
    return text


def _memory_line(task_configs: list[Config]) -> str | None:
    """Parameters + gradients + optimizer state per rank, the configurations sharing each amount; peak RSS."""
    by_amount: dict[float, list[str]] = {}
    for c in task_configs:
        total = state_bytes(c.ok[0].get("memory_per_rank") or {})
        if total is not None:
            by_amount.setdefault(total / 2**20, []).append(c.label)
    rss = [v for v in (c.median("peak_rss_mb") for c in task_configs) if v is not None]
    said = []
    if by_amount:
        amounts = "; ".join(f"{mb:.2f} MB under {', '.join(labels)}" for mb, labels in sorted(by_amount.items()))
        said.append(f"parameters + gradients + optimizer state per rank (largest rank): {amounts}")
    if rss:
        said.append(f"peak RSS {spread(rss, ',.0f')} MB (largest process)")
    return f"- Memory: {'; '.join(said)}." if said else None


def _startup_line(task_configs: list[Config]) -> str | None:
    """The shortest and longest median start-up: from the launcher's start (else the process's) to the first step."""
    times = []
    for c in task_configs:
        t = c.median("launch_to_first_step_s")
        t = c.median("startup_s") if t is None else t
        if t is not None:
            times.append((t, c.label))
    if not times:
        return None
    (lo, fast), (hi, slow) = min(times), max(times)
    said = f"{lo:.1f} s ({fast})" if fast == slow else f"{lo:.1f} s ({fast}) to {hi:.1f} s ({slow})"
    return f"- Start-up (launch to first step, median): {said}."


def failures_line(records: list[dict], label: Callable[[dict], str]) -> str:
    """How many runs failed, and of which configurations (`label`: a record's configuration's label)."""
    failed = [r for r in records if r["status"] != "ok"]
    if not failed:
        return f"- Failures: none of the {len(records)} runs."
    counts: dict[str, int] = {}
    for r in failed:
        counts[label(r)] = counts.get(label(r), 0) + 1
    which = ", ".join(f"{name}: {n}" for name, n in counts.items())
    return f"- **Failures: {len(failed)} of {len(records)} runs failed** ({which}); each cause in full under Failures."


def summary_lines(configs: list[Config], records: list[dict]) -> list[str]:
    """Per task: the fastest configuration of each group with its verdicts, memory and start-up; then failures."""
    lines = []
    for task in dict.fromkeys(c.task for c in configs):
        mine = [c for c in configs if c.task == task and c.ok]
        lines += [_fastest_line(g, configs, mine) for g in _groups(mine).values()]
        if (resolved := resolution(mine)) is not None:
            lines.append(
                f"- Noise: differences smaller than about ±{resolved[0]:.0f} % cannot be told from noise with these "
                f"rounds (the median half-width of the paired ratios' {stats.CI}; {task}'s Noise section)."
            )
        lines += [line for line in (_memory_line(mine), _startup_line(mine)) if line]
    return lines + [failures_line(records, labeller(configs))]


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text`, so that the cause is shown whole."""
    return "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))


def failure_section(records: list[dict], label: Callable[[dict], str]) -> list[str]:
    """Each failed run: its configuration, task and round, the command that started it, and its cause whole."""
    failed = [r for r in records if r["status"] != "ok"]
    if not failed:
        return []
    lines = [
        "## Failures",
        "",
        f"{len(failed)} of {len(records)} runs failed; each one's cause, last, after the last lines of its log (the "
        "whole log: the file named, beside results.jsonl):",
        "",
    ]
    for r in failed:
        code = f", exit code {r['returncode']}" if r.get("returncode") is not None else ""
        cause = (r.get("error") or "(no cause recorded)").rstrip()
        fence = _fence(cause)
        lines += [f"### {r['task']} {label(r)}, round {r.get('round', 1)}{code}", ""]
        if r.get("command"):
            lines += [f"Command: `{r['command']}`", ""]
        if r.get("log"):
            lines += [f"Log: `{r['log']}`", ""]
        lines += [fence, cause, fence, ""]
    return lines
