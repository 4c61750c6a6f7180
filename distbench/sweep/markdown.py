"""The report's markdown (report.md): what the runs measured on and the summary in words (context.py, summary.py),
each task's table, memory per rank, verdicts, noise gauge and plots, the failures in full, the comparison with a
baseline sweep (settings.py), the environment and the commands.

The numbers come from verdicts.py (each configuration's row, the verdicts, the noise) over grouping.py's
configurations; this module only words and lays them out.
"""

from __future__ import annotations

from distbench.backends import SHARDING
from distbench.records import accuracy_missing
from distbench.sweep import context, faults, plots, settings, stats, summary, verdicts
from distbench.sweep.configuration import AXES
from distbench.sweep.context import device_kind
from distbench.sweep.grouping import Config, configurations
from distbench.training.memory import KINDS, state_bytes

# what the report's numbers are, said once below the tables
LEGEND = (
    f"Medians over rounds; intervals are the bootstrap {stats.CI} of the median (docs/statistics.md). Speed-up "
    "and efficiency are paired: each run over the same round's `single` x1 with the same threads per process "
    "(efficiency = speed-up / world size). A verdict calls a difference real only when its interval excludes 1. "
    "samples/s: steady-state global samples per second. Start-up: from the launcher's start to the first "
    "training step. Peak RSS: the largest process. Labels: `backend xWORLD`, then `tTHREADS`, `accK` "
    "(micro-batches per step), the gradient compression, `K nodes` (simulated nodes, each on its own cores, or "
    "a scheduler's) and `@RATE` (the shaped link, `unshaped` without one) where they vary."
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
    `plot_dir`: the plots' folder from the report's; `built_by`: the command that built it, if not a sweep's own;
    `baseline`: the baseline sweep's records, and `differences` in its settings (settings.differences); `skipped`:
    the lines of results.jsonl that held no record; `docs`: the path of this checkout's docs/ from the report's
    folder, for the links into it."""
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
    lines += faults.fault_lines(configs)
    lines += summary.failure_section(records, label)
    if baseline is not None:
        lines += _baseline_lines(configurations(baseline), configs, differences or [])
    lines += [LEGEND, ""]
    lines += _skipped_lines(skipped)
    lines += _environment_lines(records)
    return "\n".join(lines + _commands_lines(records, sweeps))


def _baseline_lines(old: list[Config], new: list[Config], differences: list[settings.Difference]) -> list[str]:
    """The section that compares each configuration with the baseline sweep's, after what differs between them."""
    return [
        "## Against the baseline sweep",
        "",
        *settings.difference_lines(differences),
        "Each configuration's median samples/s in this sweep over the same configuration's in the baseline "
        f"(unpaired: the sweeps ran at different times; {stats.CI} by resampling each side).",
        "",
        *[f"- {v}" for v in verdicts.baseline_verdicts(old, new)],
        "",
    ]


def _skipped_lines(skipped: list[str]) -> list[str]:
    """The lines of the results that held no complete record, each with why; nothing where there were none."""
    if not skipped:
        return []
    return [
        "## Skipped lines",
        "",
        "These lines of the results held no complete record (a sweep killed while it "
        "wrote, a full disk) and are left out of everything above:",
        "",
        *[f"- {why}" for why in skipped],
        "",
    ]


def _commands_lines(records: list[dict], sweeps: list[dict]) -> list[str]:
    """The commands of the sweeps, then of the first round's runs."""
    lines = ["## Commands", ""]
    for s in sweeps:
        order = f" (repeats {s['repeats']}, order seed {s['order_seed']})" if "repeats" in s else ""
        lines += [f"Sweep ({s['started_at']}){order}:", "", "```", s["command"], "```", ""]
    return lines + ["Runs (round 1):", "", "```"] + [r["command"] for r in records if r["round"] == 1] + ["```", ""]


def _fmt(v, spec: str) -> str:
    """A value in `spec`, or "—" where there is none."""
    return "—" if v is None or v == "" else format(v, spec)


def with_interval(row: dict, name: str, spec: str) -> str:
    """A row's median of `name` with its interval, "median (lo-hi)"; the median alone without one, "—" without
    either."""
    if row.get(name) is None:
        return "—"
    if row.get(f"{name}_lo") is None:
        return format(row[name], spec)
    return f"{row[name]:{spec}} ({row[f'{name}_lo']:{spec}}-{row[f'{name}_hi']:{spec}})"


def _accuracy(row: dict) -> str:
    """The test accuracy, or a plain note where the run was shorter than one epoch: its accuracy says nothing about
    the backend (the column is then throughput only). Evaluation is still exact: the count is shown."""
    if why := accuracy_missing(row):
        return f"n/a: {why} ({row['eval_count']:.0f})"
    epochs = row.get("epochs")
    if epochs is not None and epochs < 1:
        return f"n/a: {epochs:.2f} epoch ({row['eval_count']:.0f})"
    return f"{_fmt(row['eval_accuracy'], '.4f')} ({row['eval_count']:.0f})"


def table_lines(rows: list[dict]) -> list[str]:
    """A task's table, a line per configuration (verdicts.config_row): a failed one's cause in brief."""
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


def compute_lines(rows: list[dict]) -> list[str]:
    """What GPU users read beside samples/s (training/flops.py): tokens/s, model FLOPs, achieved TFLOP/s per device
    and MFU; "unknown" where the device's peak is (every CPU; --peak-tflops states one)."""
    rows = [r for r in rows if r.get("samples_per_sec") is not None]
    if not rows or all(r.get("model_flops_per_sample") is None for r in rows):
        return []

    def gflop(value) -> str:
        return "—" if value is None else f"{value / 1e9:.3g}"

    lines = [
        "### Compute",
        "",
        "| configuration | tokens/s | model GFLOP per sample | achieved TFLOP/s per device | MFU |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        mfu = "unknown" if r.get("mfu") is None else f"{100 * r['mfu']:.1f} %"
        tflops = r.get("achieved_tflops_per_device")
        lines.append(
            f"| {r['label']} | {_fmt(r.get('tokens_per_sec'), '.0f')} | {gflop(r.get('model_flops_per_sample'))} | "
            f"{'—' if tflops is None else f'{tflops:.3g}'} | {mfu} |"
        )
    lines += [
        "",
        "Model FLOPs: the forward and backward of the model's matrix and convolution operators, counted once per "
        "run by torch.utils.flop_counter (no optimizer, no element-wise work; the same whatever a backend shards "
        "or exchanges). MFU: achieved against the device's dense peak at the run's precision, unknown where no peak "
        "is known (a CPU, a GPU not in distbench's table) unless --peak-tflops states it.",
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


def _task_lines(task: str, configs: list[Config], plot_dir: str) -> list[str]:
    """One task's section: its steps, table, memory, verdicts, noise, and plots with what their bars show."""
    mine = [c for c in configs if c.task == task]
    rows = [verdicts.config_row(c, configs) for c in mine]
    lines = [f"## {task}", "", _steps_line(mine), "", *table_lines(rows), "", *gloo_caveat(mine)]
    lines += memory_lines(rows)
    lines += compute_lines(rows)
    said = [f"- {v}" for v in verdicts.verdicts(mine)] or ["- (one configuration)"]
    lines += ["### Verdicts", "", *said, ""]
    noise = verdicts.noise_lines(mine) or ["- no reference run (`single` x1) in this sweep"]
    lines += ["### Noise", "", *noise, ""]
    pics = [f"![{n}]({plot_dir}/{task}-{n}.png)" for n in plots.PLOTS]
    captions = [f"*{name.capitalize()}*: {plots.caption(configs, task, name)}" for name in ("throughput", "efficiency")]
    return lines + [" ".join(pics[:2]), "", " ".join(captions), "", " ".join(pics[2:4]), "", *pics[4:], ""]


def _environment_lines(records: list[dict]) -> list[str]:
    """The libraries' versions, the machine, the threads, and the link and nodes where the runs had them."""
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
    rates = sorted({r["link_rate"] for r in records}, key=AXES["link_rate"].metadata["order"])
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
