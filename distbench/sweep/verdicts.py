"""What the report concludes from a sweep's configurations: each one's figures as one flat row (medians, bootstrap
intervals, the speed-up and efficiency paired with the same round's reference run, memory per rank), the verdicts
between configurations, the noise gauge, and the verdicts against a baseline sweep.

The statistics themselves are in stats.py, the grouping of records into configurations and their pairings in
grouping.py; the markdown (markdown.py) and the CSV files (csvfiles.py) show what this computes.
"""

from __future__ import annotations

from distbench.sweep import stats
from distbench.sweep.grouping import Config, comparisons, resolution, scaled, speedup
from distbench.training.memory import KINDS
from distbench.training.timer import PHASES

# what the report shows of each configuration as the plain median over its rounds ("epochs": not a column)
MEDIAN_FIELDS = (
    "startup_s",
    "launch_to_first_step_s",
    "peak_rss_mb",
    "final_loss",
    "eval_accuracy",
    "eval_count",
    "time_to_target_s",
    # what GPU users read (training/flops.py): None where unknown (MFU without a known peak, tokens of a task
    # without tokens)
    *("tokens_per_sec", "model_flops_per_sample", "achieved_tflops_per_device", "mfu"),
    "steps",
    "epochs",  # last: not a column of summary.csv
)
# the summarised metrics: the median, then its interval's ends (and, for samples/s, the min and max)
SUMMARIES = {
    "samples_per_sec": ("", "_lo", "_hi", "_min", "_max"),
    "speedup": ("", "_lo", "_hi"),
    "scaling_efficiency": ("", "_lo", "_hi"),
}
# memory per rank (training/memory.py): exact counts, the same in every round of a configuration
MEMORY = (*KINDS, "peak_allocated_bytes")


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
    for name in MEDIAN_FIELDS:
        row[name] = cfg.median(name)
    for name in MEMORY:
        row[name] = cfg.median(f"memory_per_rank.{name}")
    row["accuracy_meaningful"] = cfg.ok[0].get("accuracy_meaningful", True)
    row["emulated"] = cfg.ok[0].get("emulated") is not None
    return row


def verdicts(configs: list[Config]) -> list[str]:
    """One sentence per comparison of the configurations (grouping.comparisons): each pair at the same world size,
    threads, nodes and link, and each distributed one against its reference."""
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
