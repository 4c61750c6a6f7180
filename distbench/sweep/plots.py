"""The report's plots of each task: throughput and scaling efficiency over world size (medians with error bars that
say what they show, and the ideal-scaling line), loss curves, the step-time breakdown and the memory held per rank.
"""

from __future__ import annotations

from pathlib import Path

from distbench.sweep import stats
from distbench.sweep.configuration import AXES
from distbench.sweep.grouping import Config, configurations, scaled, speedup
from distbench.sweep.stats import Summary
from distbench.training.memory import state_bytes
from distbench.training.timer import DATA, FORWARD_BACKWARD, OPTIMIZER


def _errorbar(ax, points: list[tuple[int, Summary]], label: str) -> None:
    """Medians joined by a line, with the interval (or, with too few rounds, the min-max) as error bars."""
    xs = [x for x, _ in points]
    ys = [s.median for _, s in points]
    lo = [s.median - (s.lo if s.has_interval else s.min) for _, s in points]
    hi = [(s.hi if s.has_interval else s.max) - s.median for _, s in points]
    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=label)


def _finish(fig, ax, path: Path) -> None:
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a plot with no line (no run of its kind succeeded) has no legend
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)  # outside the axes
    fig.savefig(path, dpi=100, bbox_inches="tight")


def plot_series(configs: list[Config], task: str, metric: str) -> dict[str, list[tuple[int, Summary]]]:
    """The lines of a plot over world size: one per (backend, threads per process, accumulation, compression),
    so that runs at different settings are never joined; each point is the configuration's summary
    (throughput or efficiency)."""
    series: dict[str, list[tuple[int, Summary]]] = {}
    for c in sorted((c for c in configs if c.task == task and c.ok), key=lambda c: c.world_size):
        s = c.summary() if metric == "throughput" else scaled(speedup(c, configs), c.world_size)
        if s is None:
            continue
        label = f"{c.backend}, {c.threads} thread{'s' if c.threads > 1 else ''}/proc"
        label += "".join(
            f", {text}"
            for axis, text in c.config.texts().items()
            if axis != "threads" and getattr(c.config, axis) != AXES[axis].default
        )
        series.setdefault(label, []).append((c.world_size, s))
    return series


def ideal_series(configs: list[Config], task: str, metric: str) -> dict[str, list[tuple[int, float]]]:
    """The ideal-scaling line of a plot over world size: for throughput, each reference's (`single` x1) median
    samples/s times the world size, over the world sizes of the configurations it is the reference of; for
    efficiency, 1 at every world size. A reference whose configurations all ran at world size 1 draws no line."""
    mine = [c for c in configs if c.task == task and c.ok]
    if metric == "efficiency":
        worlds = sorted({c.world_size for c in mine})
        return {"ideal scaling (efficiency 1)": [(w, 1.0) for w in worlds]} if worlds else {}
    lines = {}
    for ref in (c for c in mine if c.config.is_reference and c.summary() is not None):
        worlds = sorted({c.world_size for c in mine if c.config.reference() == ref.config})
        if len(worlds) > 1:
            lines[f"ideal: {ref.label} x world size"] = [(w, ref.summary().median * w) for w in worlds]
    return lines


def caption(configs: list[Config], task: str, metric: str) -> str:
    """What a plot's points and error bars are: medians, and the bootstrap interval of the median over the rounds
    (or the min-max where there were too few rounds for one), over how many rounds; the dashed line."""
    points = [s for pts in plot_series(configs, task, metric).values() for _, s in pts]
    if not points:
        return "no completed runs"
    ns = sorted({s.n for s in points})
    rounds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    what = "median" if metric == "throughput" else "median paired ratio (each run / its round's single x1 / world size)"
    interval = f"bootstrap {stats.CI} of the {what} over {rounds} rounds"
    minmax = f"min-max over {rounds} rounds (fewer than {stats.MIN_FOR_INTERVAL}: no interval)"
    with_ci = {s.has_interval for s in points}
    if with_ci == {True}:
        bars = interval
    elif with_ci == {False}:
        bars = minmax
    else:
        bars = f"{interval} where there were {stats.MIN_FOR_INTERVAL} or more, else the {minmax}"
    ideal = "1" if metric == "efficiency" else "single x1's samples/s x world size"
    return f"points: medians; bars: {bars}; dashed: ideal scaling ({ideal})."


IDEAL_STYLES = ("--", ":", "-.", (0, (5, 5)))  # one per reference (threads per process) on a plot

PLOTS = ("throughput", "efficiency", "loss", "breakdown", "memory")  # each task's, {task}-{name}.png


def memory_series(configs: list[Config], task: str) -> dict[str, list[tuple[int, float]]]:
    """Parameters + gradients + optimizer state per rank (MB) over world size: one line per backend and setting."""
    series: dict[str, list[tuple[int, float]]] = {}
    for c in sorted((c for c in configs if c.task == task and c.ok), key=lambda c: c.world_size):
        total = state_bytes(c.ok[0].get("memory_per_rank") or {})
        if total is None:
            continue
        label = c.backend + "".join(
            f", {text}"
            for axis, text in c.config.texts().items()
            if axis not in ("threads", "world_size") and getattr(c.config, axis) != AXES[axis].default
        )
        series.setdefault(label, []).append((c.world_size, total / 2**20))
    return series


def _memory_plot(plt, configs: list[Config], task: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, pts in memory_series(configs, task).items():
        ax.plot([w for w, _ in pts], [mb for _, mb in pts], marker="o", label=label)
    ax.set(
        xlabel="world size (processes)",
        ylabel="parameters + gradients + optimizer, MB",
        title=f"{task}: state held per rank (largest rank)",
    )
    ax.set_xticks(sorted({c.world_size for c in configs if c.task == task and c.ok}))
    _finish(fig, ax, path)
    plt.close(fig)


def plots(records: list[dict], plot_dir: Path) -> None:
    """Each task's plots (PLOTS) in `plot_dir`, as {task}-{name}.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = configurations(records)
    for task in dict.fromkeys(c.task for c in configs):
        mine = [c for c in configs if c.task == task and c.ok]
        for name, ylabel in (("throughput", "global samples/s"), ("efficiency", "scaling efficiency (paired)")):
            fig, ax = plt.subplots(figsize=(6.5, 4))
            for label, pts in plot_series(configs, task, name).items():
                _errorbar(ax, pts, label)
            for (label, pts), style in zip(ideal_series(configs, task, name).items(), IDEAL_STYLES, strict=False):
                ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle=style, color="gray", label=label)
            ax.set(xlabel="world size (processes)", ylabel=f"{ylabel}, median", title=f"{task}: {ylabel}")
            ax.set_xticks(sorted({c.world_size for c in mine}))
            fig.text(0.0, -0.04, caption(configs, task, name), fontsize=8, ha="left", va="top", wrap=True)
            _finish(fig, ax, plot_dir / f"{task}-{name}.png")
            plt.close(fig)
        fig, ax = plt.subplots(figsize=(7, 4))
        for c in mine:  # every round of a configuration trains the same steps: its first run stands for all
            ax.plot(c.ok[0]["loss_history"], label=c.label, alpha=0.7)
        ax.set(xlabel="global step", ylabel="training loss", title=f"{task}: loss curves")
        _finish(fig, ax, plot_dir / f"{task}-loss.png")
        plt.close(fig)
        _breakdown_plot(plt, mine, plot_dir / f"{task}-breakdown.png", task)
        _memory_plot(plt, configs, task, plot_dir / f"{task}-memory.png")


def _breakdown_plot(plt, configs: list[Config], path: Path, task: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [c.label.replace(" ", "\n", 1) for c in configs]
    bottom = [0.0] * len(configs)
    names = {
        DATA: "data",
        FORWARD_BACKWARD: "forward+backward (DDP: + overlapped sync)",
        OPTIMIZER: "optimizer step (Horovod: + gradient wait)",
    }
    for part, name in names.items():
        vals = [c.median(f"step_breakdown_ms.{part}") or 0.0 for c in configs]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set(ylabel="ms per step, median (main process)", title=f"{task}: step-time breakdown")
    ax.tick_params(axis="x", labelsize=7)
    _finish(fig, ax, path)
    plt.close(fig)
