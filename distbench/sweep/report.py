"""Report of compare sweeps, from results.jsonl: summary.csv (one row per configuration), runs.csv (one row
per run), a markdown report with verdicts and a noise gauge, and plots with error bars.

A *configuration* is what a sweep varies (distbench/sweep/configuration.py: task, backend, world size, threads per
process and the other axes); each is run once per round. Summaries are medians over rounds with bootstrap
intervals; speed-up and efficiency are paired with the same round's reference run (`single` x1, same threads per
process). The statistics are in distbench/sweep/stats.py, and why they are these in docs/statistics.md.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from distbench.backends import SHARDING
from distbench.errors import UserError
from distbench.sweep import stats
from distbench.sweep.configuration import AXES, SweepConfig
from distbench.sweep.stats import Summary
from distbench.training.memory import KINDS, state_bytes
from distbench.training.reporter import read_jsonl
from distbench.training.timer import DATA, FORWARD_BACKWARD, OPTIMIZER, PHASES

AXIS_COLUMNS = list(SweepConfig().to_record())  # the configuration's axes, as the records name them

# what the report shows of each configuration as the plain median over its rounds ("epochs": not a column)
_MEDIAN_FIELDS = (
    "startup_s",
    "launch_to_first_step_s",
    "peak_rss_mb",
    "final_loss",
    "eval_accuracy",
    "eval_count",
    "time_to_target_s",
    "steps",
    "epochs",
)
# the summarised metrics: the median, then its interval's ends (and, for samples/s, the min and max)
_SUMMARIES = {
    "samples_per_sec": ("", "_lo", "_hi", "_min", "_max"),
    "speedup": ("", "_lo", "_hi"),
    "scaling_efficiency": ("", "_lo", "_hi"),
}
# memory per rank (training/memory.py): exact counts, the same in every round of a configuration
MEMORY = (*KINDS, "peak_allocated_bytes")
COLUMNS = [
    *AXIS_COLUMNS,
    *("label", "runs", "runs_ok"),
    *(metric + end for metric, ends in _SUMMARIES.items() for end in ends),
    *("step_p50_ms", "step_p90_ms", *PHASES),
    *_MEDIAN_FIELDS[:-1],
    *MEMORY,
    *("error", "command"),
]

RUN_COLUMNS = [
    "round",
    "order",
    *AXIS_COLUMNS,
    "status",
    "samples_per_sec",
    "speedup",
    "step_p50_ms",
    "step_p90_ms",
    "peak_rss_mb",
    "final_loss",
    "eval_accuracy",
    "eval_count",
    "launch_to_first_step_s",
    "steps",
    "error",
    "command",
]


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
        return [r for r in self.runs if r["status"] == "ok"]

    def by_round(self, metric: str = "samples_per_sec") -> dict[int, float]:
        return {r["round"]: r[metric] for r in self.ok if r.get(metric)}

    def summary(self, metric: str = "samples_per_sec") -> Summary | None:
        return stats.summarize([_get(r, metric) for r in self.ok])

    def median(self, metric: str):
        """The median alone (no interval: no bootstrap for the table's secondary columns)."""
        values = [v for v in (_get(r, metric) for r in self.ok) if v is not None]
        return statistics.median(values) if values else None


def _get(rec: dict, metric: str):
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


def _scaled(s: Summary | None, k: float) -> Summary | None:
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


def config_row(cfg: Config, configs: list[Config]) -> dict:
    """One configuration's medians (and intervals) as a flat row: the CSV's and the table's."""
    row = {
        **cfg.config.to_record(),
        "label": cfg.label,
        "runs": len(cfg.runs),
        "runs_ok": len(cfg.ok),
        "command": cfg.runs[0].get("command"),
    }
    failed = [r for r in cfg.runs if r["status"] != "ok"]
    row["error"] = (failed[-1].get("error") or "").splitlines()[-1] if failed and failed[-1].get("error") else ""
    sps = cfg.summary()
    if sps is None:
        return row
    row.update(
        samples_per_sec=sps.median,
        samples_per_sec_lo=sps.lo,
        samples_per_sec_hi=sps.hi,
        samples_per_sec_min=sps.min,
        samples_per_sec_max=sps.max,
    )
    up = speedup(cfg, configs)
    eff = _scaled(up, cfg.world_size)
    for name, s in (("speedup", up), ("scaling_efficiency", eff)):
        if s is not None:
            row.update({name: s.median, f"{name}_lo": s.lo, f"{name}_hi": s.hi})
    row["step_p50_ms"], row["step_p90_ms"] = cfg.median("step_time_ms.p50"), cfg.median("step_time_ms.p90")
    for phase in PHASES:
        row[phase] = cfg.median(f"step_breakdown_ms.{phase}")
    for name in _MEDIAN_FIELDS:
        row[name] = cfg.median(name)
    for name in MEMORY:
        row[name] = cfg.median(f"memory_per_rank.{name}")
    row["accuracy_meaningful"] = cfg.ok[0].get("accuracy_meaningful", True)
    return row


def run_rows(records: list[dict], configs: list[Config]) -> list[dict]:
    by_config = {c.config: c for c in configs}
    out = []
    for r in records:
        row = {k: r.get(k) for k in RUN_COLUMNS}
        row["error"] = (r.get("error") or "").splitlines()[-1] if r.get("error") else ""
        if r["status"] == "ok":
            row["step_p50_ms"], row["step_p90_ms"] = r["step_time_ms"]["p50"], r["step_time_ms"]["p90"]
            ref = reference_for(by_config[SweepConfig.from_record(r)], configs)
            ref_sps = ref.by_round().get(r["round"]) if ref else None
            row["speedup"] = r["samples_per_sec"] / ref_sps if ref_sps else None
        out.append(row)
    return out


# ---- verdicts and the noise gauge ----------------------------------------------------------------
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


def verdicts(configs: list[Config]) -> list[str]:
    return [stats.verdict(a, b, ratio) for a, b, ratio in comparisons(configs)]


def noise_lines(configs: list[Config]) -> list[str]:
    """The spread of the reference configurations, and what the repeats can resolve: the median half-width of
    the paired ratios' intervals (drift cancels in them, the runs' own noise does not); a warning above
    stats.NOISE_WARN_PCT."""
    lines = []
    for ref in (c for c in configs if c.config.is_reference and c.ok):
        s = ref.summary()
        lines.append(
            f"- Reference {ref.label}: median {s.median:.1f} samples/s over {s.n} round(s), min-max "
            f"{s.min:.1f}-{s.max:.1f} ({100 * (s.max - s.min) / s.median:.0f} % of the median)."
        )
    rounds = max((len(c.ok) for c in configs), default=0)
    widths = [r.half_width_pct() for _, _, r in comparisons(configs) if r is not None and r.has_interval]
    if not widths:
        lines.append(
            f"- **Warning**: fewer than {stats.MIN_FOR_INTERVAL} rounds: no interval, so no difference can "
            "be called real; run with `--repeats 5` or more."
        )
        return lines
    resolution = sorted(widths)[len(widths) // 2]
    text = (
        f"- Resolution: the paired ratios' {stats.CI} are ±{resolution:.1f} % wide (median over "
        f"{len(widths)} comparisons, {rounds} rounds)"
    )
    if resolution > stats.NOISE_WARN_PCT:
        text += (
            f". **Warning**: this machine is too noisy to resolve differences smaller than about "
            f"{resolution:.0f} % with {rounds} rounds; more rounds (`--repeats`) or a quieter machine narrow "
            "it"
        )
    return lines + [text + "."]


def baseline_verdicts(old: list[Config], new: list[Config]) -> list[str]:
    """Each configuration of the new sweep against the same one in the baseline (unpaired: different sweeps)."""
    old_by_config = {c.config: c for c in old if c.ok}
    lines = []
    for c in new:
        before = old_by_config.get(c.config)
        if before is None or not c.ok:
            lines.append(f"{c.task} {c.label}: not in both sweeps (or failed in one)")
            continue
        ratio = stats.ratio_of_medians([r["samples_per_sec"] for r in c.ok], [r["samples_per_sec"] for r in before.ok])
        lines.append(f"{c.task}: " + stats.verdict(f"{c.label} (new)", f"{c.label} (baseline)", ratio))
    return lines


# ---- markdown ------------------------------------------------------------------------------------
def _fmt(v, spec: str) -> str:
    return "—" if v is None or v == "" else format(v, spec)


def with_interval(row: dict, name: str, spec: str) -> str:
    if row.get(name) is None:
        return "—"
    if row.get(f"{name}_lo") is None:
        return format(row[name], spec)
    return f"{row[name]:{spec}} ({row[f'{name}_lo']:{spec}}-{row[f'{name}_hi']:{spec}})"


def _accuracy(row: dict) -> str:
    """The test accuracy, or a plain note where the run was shorter than one epoch: its accuracy says nothing about
    the backend (the column is then throughput only). Evaluation is still exact: the count is shown."""
    if row.get("accuracy_meaningful") is False:
        return f"n/a: synthetic data ({row['eval_count']:.0f})"
    epochs = row.get("epochs")
    if epochs is not None and epochs < 1:
        return f"n/a: {epochs:.2f} epoch ({row['eval_count']:.0f})"
    return f"{row['eval_accuracy']:.4f} ({row['eval_count']:.0f})"


def table_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| configuration | samples/s median (95 % CI) | min-max | speed-up (CI) | efficiency (CI) | "
        "step p50 / p90 ms | accuracy (count) | final loss | peak RSS MB | start-up s | runs ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs_ok = f"{r['runs_ok']}/{r['runs']}"
        if r.get("samples_per_sec") is None:
            lines.append(f"| {r['label']} | — | — | — | — | — | — | — | — | — | {runs_ok}: failed: {r['error'][:80]} |")
            continue
        if r["runs_ok"] < r["runs"]:
            runs_ok += f" (failed: {r['error'][:60]})"
        lines.append(
            f"| {r['label']} | {with_interval(r, 'samples_per_sec', '.1f')} | "
            f"{r['samples_per_sec_min']:.1f}-{r['samples_per_sec_max']:.1f} | {with_interval(r, 'speedup', '.2f')} | "
            f"{with_interval(r, 'scaling_efficiency', '.2f')} | {r['step_p50_ms']:.1f} / {r['step_p90_ms']:.1f} | "
            f"{_accuracy(r)} | {r['final_loss']:.4f} | {r['peak_rss_mb']:.0f} | "
            f"{_fmt(r.get('launch_to_first_step_s'), '.1f')} | {runs_ok} |"
        )
    return lines


def mb(value, spec: str = ".2f") -> str:
    """Bytes as MB (2^20 bytes); "—" where there is no count."""
    return "—" if value is None else f"{value / 2**20:{spec}}"


def memory_lines(rows: list[dict]) -> list[str]:
    """Memory per rank: the largest rank's bytes of each kind of state it holds (exact), the device's peak allocated
    where there is a device, and peak RSS."""
    rows = [r for r in rows if r.get("params_bytes") is not None]
    if not rows:
        return []
    lines = [
        "### Memory per rank",
        "",
        "| configuration | parameters MB | gradients MB | optimizer state MB | sum MB | peak allocated MB | "
        "peak RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {' | '.join(mb(r.get(k)) for k in KINDS)} | {mb(state_bytes(r))} | "
            f"{mb(r.get('peak_allocated_bytes'))} | {_fmt(r.get('peak_rss_mb'), '.0f')} |"
        )
    lines += [
        "",
        "Counted from the tensors each rank holds (a sharded parameter's local shard), the largest rank's; "
        "MB = 2^20 bytes. Peak allocated: the device allocator's peak (activations and the libraries' buffers "
        "too); none without a device. Peak RSS: the largest process, mostly the libraries on a CPU.",
        "",
    ]
    return lines


def gloo_caveat(configs: list[Config]) -> list[str]:
    """The line that must stand beside any speed of a sharding backend measured on CPU (gloo)."""
    shown = sorted({c.backend for c in configs if c.backend in SHARDING and c.ok and _on_cpu(c.ok[0])})
    if not shown:
        return []
    return [
        f"On CPU ({', '.join(shown)}): gloo has no reduce-scatter, and PyTorch carries out FSDP's with an all-reduce "
        "of the whole gradient (pytorch/pytorch#118911), so each rank receives W times what NCCL's reduce-scatter "
        "sends it. These samples/s are not FSDP's speed on a GPU cluster (docs/fsdp.md).",
        "",
    ]


def _on_cpu(rec: dict) -> bool:
    return (rec.get("environment") or {}).get("device", "cpu") == "cpu"


def _steps_line(configs: list[Config]) -> str:
    ok = [r for c in configs for r in c.ok]
    steps = sorted({r["steps"] for r in ok})
    warmup = sorted({r.get("warmup_steps") for r in ok if r.get("warmup_steps") is not None})
    rounds = max((r["round"] for c in configs for r in c.runs), default=0)
    return (
        f"Each run: {', '.join(map(str, steps))} global steps, the first {', '.join(map(str, warmup))} of them "
        f"warm-up (not timed); {rounds} round(s), every configuration once per round."
    )


def markdown(
    records: list[dict],
    sweeps: list[dict],
    plot_dir: str,
    built_by: str | None = None,
    baseline: list[dict] | None = None,
    skipped: list[str] = (),
) -> str:
    configs = configurations(records)
    lines = ["# distbench comparison", ""]
    if built_by:
        lines += [f"Built by `{built_by}` from the sweeps listed under Commands.", ""]
    for task in dict.fromkeys(c.task for c in configs):
        mine = [c for c in configs if c.task == task]
        rows = [config_row(c, configs) for c in mine]
        lines += [f"## {task}", "", _steps_line(mine), "", *table_lines(rows), "", *gloo_caveat(mine)]
        lines += memory_lines(rows)
        said = [f"- {v}" for v in verdicts(mine)] or ["- (one configuration)"]
        lines += ["### Verdicts", "", *said, ""]
        noise = noise_lines(mine) or ["- no reference run (`single` x1) in this sweep"]
        lines += ["### Noise", "", *noise, ""]
        pics = [f"![{n}]({plot_dir}/{task}-{n}.png)" for n in PLOTS]
        lines += [" ".join(pics[:2]), "", " ".join(pics[2:4]), "", *pics[4:], ""]
    if baseline is not None:
        lines += [
            "## Against the baseline sweep",
            "",
            "Each configuration's median samples/s in this sweep over the same configuration's in the baseline "
            f"(unpaired: the sweeps ran at different times; {stats.CI} by resampling each side).",
            "",
            *[f"- {v}" for v in baseline_verdicts(configurations(baseline), configs)],
            "",
        ]
    lines += [
        f"Medians over rounds; intervals are the bootstrap {stats.CI} of the median (docs/statistics.md). Speed-up "
        "and efficiency are paired: each run over the same round's `single` x1 with the same threads per process "
        "(efficiency = speed-up / world size). A verdict calls a difference real only when its interval excludes 1. "
        "samples/s: steady-state global samples per second. Start-up: from the launcher's start to the first "
        "training step. Peak RSS: the largest process. Labels: `backend xWORLD`, then `tTHREADS`, `accK` "
        "(micro-batches per step), the gradient compression, `K nodes` (simulated nodes, each on its own cores, or "
        "a scheduler's) and `@RATE` (the shaped link, `unshaped` without one) where they vary.",
        "",
    ]
    if skipped:
        lines += [
            "## Skipped lines",
            "",
            "These lines of the results held no complete record (a sweep killed while it "
            "wrote, a full disk) and are left out of everything above:",
            "",
            *[f"- {why}" for why in skipped],
            "",
        ]
    lines += _environment_lines(records)
    lines += ["## Commands", ""]
    for s in sweeps:
        order = f" (repeats {s['repeats']}, order seed {s['order_seed']})" if "repeats" in s else ""
        lines += [f"Sweep ({s['started_at']}){order}:", "", "```", s["command"], "```", ""]
    lines += ["Runs (round 1):", "", "```"] + [r["command"] for r in records if r["round"] == 1] + ["```", ""]
    return "\n".join(lines)


def _environment_lines(records: list[dict]) -> list[str]:
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    env = ok[0]["environment"]
    lines = ["## Environment", ""] + [
        f"- {k}: {env.get(k)}"
        for k in ("torch", "accelerate", "horovod", "transformers", "python", "platform", "cpu_count", "device")
    ]
    threads = sorted({r["threads_per_process"] for r in records})
    lines.append(f"- threads per process: {', '.join(map(str, threads))} (intra-op, set per run)")
    unshaped = AXES["link_rate"].default
    rates = sorted({r.get("link_rate") or unshaped for r in records}, key=AXES["link_rate"].metadata["order"])
    if rates != [unshaped]:
        lines.append(
            f"- link: {', '.join(rates)} (loopback of a private network namespace shaped with tc tbf, one "
            "bucket for all traffic; distbench/launching/link.py)"
        )
    nodes = sorted({r.get("nodes", 1) for r in records})
    jobs = sorted({r["scheduler"]["job_id"] for r in records if (r.get("scheduler") or {}).get("name") == "slurm"})
    if jobs:
        lines.append(
            f"- nodes: {', '.join(map(str, nodes))}, Slurm's (job steps of job {', '.join(jobs)}; docs/slurm.md)"
        )
    elif nodes != [1]:
        lines.append(
            f"- simulated nodes: {', '.join(map(str, nodes))} (each on its own share of the cores; "
            "distbench/launching/topology.py)"
        )
    return lines + [""]


# ---- plots ---------------------------------------------------------------------------------------
def _errorbar(ax, points: list[tuple[int, Summary]], label: str) -> None:
    """Medians joined by a line, with the interval (or, with too few rounds, the min-max) as error bars."""
    xs = [x for x, _ in points]
    ys = [s.median for _, s in points]
    lo = [s.median - (s.lo if s.has_interval else s.min) for _, s in points]
    hi = [(s.hi if s.has_interval else s.max) - s.median for _, s in points]
    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=label)


def _finish(fig, ax, path: Path) -> None:
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)  # outside: covers no data
    fig.savefig(path, dpi=100, bbox_inches="tight")


def plot_series(configs: list[Config], task: str, metric: str) -> dict[str, list[tuple[int, Summary]]]:
    """The lines of a plot over world size: one per (backend, threads per process, accumulation, compression),
    so that runs at different settings are never joined; each point is the configuration's summary
    (throughput or efficiency)."""
    series: dict[str, list[tuple[int, Summary]]] = {}
    for c in sorted((c for c in configs if c.task == task and c.ok), key=lambda c: c.world_size):
        s = c.summary() if metric == "throughput" else _scaled(speedup(c, configs), c.world_size)
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
            ax.set(xlabel="world size (processes)", ylabel=f"{ylabel}, median", title=f"{task}: {ylabel}")
            ax.set_xticks(sorted({c.world_size for c in mine}))
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


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_report(dirs: list[Path], out: Path, built_by: str | None = None, baseline: Path | None = None) -> str:
    """Write summary.csv, runs.csv, the markdown report and plots; returns the markdown.

    `out` is a folder (report.md inside it) or a .md path (plots and CSVs in the folder of the same stem).
    `baseline`: a sweep folder to compare each configuration with (`run.py report --baseline`).
    """
    loaded = load(dirs)
    records, sweeps = loaded.records, loaded.sweeps
    if loaded.skipped and not records:
        raise UserError(
            f"no complete record to report in {', '.join(map(str, dirs))} ({len(loaded.skipped)} line(s) "
            f"skipped, the first: {loaded.skipped[0]}); nothing was written"
        )
    for why in loaded.skipped:
        print(f"note: skipped {why}", file=sys.stderr)
    old = load([baseline]).records if baseline is not None else None
    if out.suffix == ".md":
        md_path, plot_dir = out, out.parent / out.stem
    else:
        md_path, plot_dir = out / "report.md", out
    plot_dir.mkdir(parents=True, exist_ok=True)
    configs = configurations(records)
    _write_csv(plot_dir / "summary.csv", COLUMNS, [config_row(c, configs) for c in configs])
    _write_csv(plot_dir / "runs.csv", RUN_COLUMNS, run_rows(records, configs))
    plots(records, plot_dir)
    rel = plot_dir.relative_to(md_path.parent) if plot_dir != md_path.parent else Path(".")
    text = markdown(records, sweeps, str(rel), built_by, old, loaded.skipped)
    md_path.write_text(text, encoding="utf-8")
    return text
