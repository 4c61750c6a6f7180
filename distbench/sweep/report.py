"""Report of compare sweeps, from results.jsonl: summary.csv (one row per configuration), runs.csv (one row
per run), a markdown report with verdicts and a noise gauge, and plots with error bars.

A *configuration* is what a sweep varies (distbench/sweep/configuration.py: task, backend, world size, threads per
process and the other axes); each is run once per round. Summaries are medians over rounds with bootstrap
intervals; speed-up and efficiency are paired with the same round's reference run (`single` x1, same threads per
process). The statistics are in distbench/sweep/stats.py, and why they are these in docs/statistics.md.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from distbench.backends import SHARDING
from distbench.errors import UserError
from distbench.sweep import context, plots, settings, stats, summary
from distbench.sweep.configuration import AXES, SweepConfig
from distbench.sweep.context import device_kind
from distbench.sweep.grouping import (
    Config,
    comparisons,
    configurations,
    load,
    reference_for,
    resolution,
    scaled,
    speedup,
)
from distbench.training.memory import KINDS, state_bytes
from distbench.training.timer import PHASES

DOCS = Path(__file__).resolve().parents[2] / "docs"  # this checkout's docs/, which the report links to
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
    eff = scaled(up, cfg.world_size)
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
            sps = r["samples_per_sec"]  # null: no step timed
            row["speedup"] = sps / ref_sps if ref_sps and sps is not None else None
        out.append(row)
    return out


# ---- verdicts and the noise gauge ----------------------------------------------------------------
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
    resolved = resolution(configs)
    if resolved is None:
        lines.append(
            f"- **Warning**: fewer than {stats.MIN_FOR_INTERVAL} rounds: no interval, so no difference can "
            "be called real; run with `--repeats 5` or more."
        )
        return lines
    width, n = resolved
    text = (
        f"- Resolution: the paired ratios' {stats.CI} are ±{width:.1f} % wide (median over "
        f"{n} comparisons, {rounds} rounds)"
    )
    if width > stats.NOISE_WARN_PCT:
        text += (
            f". **Warning**: this machine is too noisy to resolve differences smaller than about "
            f"{width:.0f} % with {rounds} rounds; more rounds (`--repeats`) or a quieter machine narrow "
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
        speeds = [[r["samples_per_sec"] for r in side.ok if r["samples_per_sec"] is not None] for side in (c, before)]
        if not all(speeds):
            lines.append(f"{c.task} {c.label}: no timed step in one of the sweeps")
            continue
        ratio = stats.ratio_of_medians(*speeds)
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
    return f"{_fmt(row['eval_accuracy'], '.4f')} ({row['eval_count']:.0f})"


def table_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| configuration | samples/s median (95 % CI) | min-max | speed-up (CI) | efficiency (CI) | "
        "step p50 / p90 ms | accuracy (count) | final loss | peak RSS MB | start-up s | runs ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs_ok = f"{r['runs_ok']}/{r['runs']}"
        if r.get("samples_per_sec") is None:
            lines.append(
                f"| {r['label']} | {' | '.join(['—'] * 9)} | {runs_ok}: failed: {r['error'][:80]} (Failures) |"
            )
            continue
        if r["runs_ok"] < r["runs"]:
            runs_ok += f" (failed: {r['error'][:60]}; Failures)"
        lines.append(
            f"| {r['label']} | {with_interval(r, 'samples_per_sec', '.1f')} | "
            f"{r['samples_per_sec_min']:.1f}-{r['samples_per_sec_max']:.1f} | {with_interval(r, 'speedup', '.2f')} | "
            f"{with_interval(r, 'scaling_efficiency', '.2f')} | {r['step_p50_ms']:.1f} / {r['step_p90_ms']:.1f} | "
            f"{_accuracy(r)} | {_fmt(r['final_loss'], '.4f')} | {r['peak_rss_mb']:.0f} | "
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
    shown = sorted({c.backend for c in configs if c.backend in SHARDING and c.ok and device_kind(c.ok[0]) == "cpu"})
    if not shown:
        return []
    return [
        f"On CPU ({', '.join(shown)}): gloo has no reduce-scatter, and PyTorch carries out FSDP's with an all-reduce "
        "of the whole gradient (pytorch/pytorch#118911), so each rank receives W times what NCCL's reduce-scatter "
        "sends it. These samples/s are not FSDP's speed on a GPU cluster (docs/fsdp.md).",
        "",
    ]


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
    docs: str = "docs",
    differences: list[settings.Difference] | None = None,
) -> str:
    """The report: what it measured on and its summary in words first, then each task's table, memory, verdicts,
    noise and plots, the failures in full, the comparison with a baseline, the environment and the commands.
    `docs`: the path of this checkout's docs/ from the report's folder, for the links into it."""
    configs = configurations(records)
    lines = ["# distbench comparison", ""]
    if built_by:
        lines += [f"Built by `{built_by}` from the sweeps listed under Commands.", ""]
    lines += context.banner(records, docs)
    label = summary.labeller(configs)
    said = [
        *summary.summary_lines(configs, records),
        *context.dataset_lines(records),
        *context.load_lines(records, label, docs),
        *context.dropout_lines(records),
    ]
    lines += ["## Summary", "", *said, ""]
    for task in dict.fromkeys(c.task for c in configs):
        lines += _task_lines(task, configs, plot_dir)
    lines += summary.failure_section(records, label)
    if baseline is not None:
        lines += [
            "## Against the baseline sweep",
            "",
            *settings.difference_lines(differences or []),
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


def _task_lines(task: str, configs: list[Config], plot_dir: str) -> list[str]:
    """One task's section: its steps, table, memory, verdicts, noise, and plots with what their bars show."""
    mine = [c for c in configs if c.task == task]
    rows = [config_row(c, configs) for c in mine]
    lines = [f"## {task}", "", _steps_line(mine), "", *table_lines(rows), "", *gloo_caveat(mine)]
    lines += memory_lines(rows)
    said = [f"- {v}" for v in verdicts(mine)] or ["- (one configuration)"]
    lines += ["### Verdicts", "", *said, ""]
    noise = noise_lines(mine) or ["- no reference run (`single` x1) in this sweep"]
    lines += ["### Noise", "", *noise, ""]
    pics = [f"![{n}]({plot_dir}/{task}-{n}.png)" for n in plots.PLOTS]
    captions = [f"*{name.capitalize()}*: {plots.caption(configs, task, name)}" for name in ("throughput", "efficiency")]
    return lines + [" ".join(pics[:2]), "", " ".join(captions), "", " ".join(pics[2:4]), "", *pics[4:], ""]


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


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_report(
    dirs: list[Path],
    out: Path,
    built_by: str | None = None,
    baseline: Path | None = None,
    allow_different: bool = False,
) -> str:
    """Write summary.csv, runs.csv, the markdown report and plots; returns the markdown.

    `out` is a folder (report.md inside it) or a .md path (plots and CSVs in the folder of the same stem).
    `baseline`: a sweep folder to compare each configuration with (`run.py report --baseline`); a baseline that
    differs in what makes the sweeps incomparable (settings.INCOMPARABLE) is one line, nothing written, unless
    `allow_different`.
    """
    loaded = load(dirs)
    records, sweeps = loaded.records, loaded.sweeps
    if loaded.skipped and not records:
        raise UserError(
            f"no complete record to report in {', '.join(map(str, dirs))} ({len(loaded.skipped)} line(s) "
            f"skipped, the first: {loaded.skipped[0]}); nothing was written"
        )
    old = diffs = None
    if baseline is not None:
        old = load([baseline]).records
        diffs = settings.differences(old, records)
        refused = settings.refusal(diffs, str(baseline), ", ".join(map(str, dirs)))
        if refused and not allow_different:
            raise UserError(refused)
    for why in loaded.skipped:
        print(f"note: skipped {why}", file=sys.stderr)
    if out.suffix == ".md":
        md_path, plot_dir = out, out.parent / out.stem
    else:
        md_path, plot_dir = out / "report.md", out
    plot_dir.mkdir(parents=True, exist_ok=True)
    configs = configurations(records)
    _write_csv(plot_dir / "summary.csv", COLUMNS, [config_row(c, configs) for c in configs])
    _write_csv(plot_dir / "runs.csv", RUN_COLUMNS, run_rows(records, configs))
    plots.plots(records, plot_dir)
    rel = plot_dir.relative_to(md_path.parent) if plot_dir != md_path.parent else Path(".")
    docs = os.path.relpath(DOCS, md_path.parent.resolve())
    text = markdown(records, sweeps, str(rel), built_by, old, loaded.skipped, docs, diffs)
    md_path.write_text(text, encoding="utf-8")
    return text
