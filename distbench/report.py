"""Report of compare sweeps: summary.csv, a markdown report and matplotlib plots, from results.jsonl."""

from __future__ import annotations

import csv
import json
from pathlib import Path

COLUMNS = [
    "task", "backend", "world_size", "threads_per_process", "status", "samples_per_sec", "speedup",
    "scaling_efficiency", "step_p50_ms", "step_p90_ms", "data_ms", "forward_backward_ms", "optimizer_ms",
    "startup_s", "launch_to_first_step_s", "peak_rss_mb", "final_loss", "eval_accuracy", "eval_count",
    "time_to_target_s", "steps", "wall_time_s", "error", "command",
]  # fmt: skip


def load(dirs: list[Path]) -> tuple[list[dict], list[dict]]:
    records, sweeps = [], []
    for d in dirs:
        path = d / "results.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []  # interrupted before any
        records += [json.loads(line) for line in lines if line.strip()]
        if (d / "sweep.json").is_file():
            sweeps.append(json.loads((d / "sweep.json").read_text()))
    return records, sweeps


def baseline_for(rec: dict, records: list[dict]) -> dict | None:
    """`single` at world size 1, same task, same threads per process."""
    for r in records:
        if (r["status"] == "ok" and r["backend"] == "single" and r["world_size"] == 1 and r["task"] == rec["task"]
                and r["threads_per_process"] == rec["threads_per_process"]):  # fmt: skip
            return r
    return None


def rows(records: list[dict]) -> list[dict]:
    out = []
    for r in records:
        row = {k: r.get(k) for k in ("task", "backend", "world_size", "threads_per_process", "status",
                                     "startup_s", "launch_to_first_step_s", "peak_rss_mb", "final_loss",
                                     "eval_accuracy", "eval_count", "time_to_target_s", "steps", "wall_time_s",
                                     "command", "samples_per_sec", "epochs")}  # fmt: skip
        row["error"] = (r.get("error") or "").splitlines()[-1] if r.get("error") else ""
        if r["status"] == "ok":
            row["step_p50_ms"] = r["step_time_ms"]["p50"]
            row["step_p90_ms"] = r["step_time_ms"]["p90"]
            row.update(r.get("step_breakdown_ms", {}))
            base = baseline_for(r, records)
            if base and base["samples_per_sec"]:
                row["speedup"] = r["samples_per_sec"] / base["samples_per_sec"]
                row["scaling_efficiency"] = row["speedup"] / r["world_size"]
        out.append(row)
    return out


def _accuracy(row: dict) -> str:
    """The test accuracy, or a plain note where the run was shorter than one epoch: its accuracy says nothing about
    the backend (the column is then throughput only). Evaluation is still exact: the count is shown."""
    epochs = row.get("epochs")
    if epochs is not None and epochs < 1:
        return f"n/a: {epochs:.2f} epoch ({row['eval_count']})"
    return f"{row['eval_accuracy']:.4f} ({row['eval_count']})"


def _fmt(v, spec: str) -> str:
    return "—" if v is None or v == "" else format(v, spec)


def markdown(records: list[dict], sweeps: list[dict], plot_dir: str, built_by: str | None = None) -> str:
    table_rows = rows(records)
    lines = ["# distbench comparison", ""]
    if built_by:
        lines += [f"Built by `{built_by}` from the sweeps listed under Commands.", ""]
    for task in dict.fromkeys(r["task"] for r in records):
        mine = [r for r in table_rows if r["task"] == task]
        lines += [f"## {task}", "",
                  "| backend | world | threads/proc | samples/s | speed-up | efficiency | step p50 / p90 ms | "
                  "accuracy (count) | final loss | peak RSS MB | start-up s | status |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in mine:
            if r["status"] != "ok":
                lines.append(f"| {r['backend']} | {r['world_size']} | {r['threads_per_process']} | — | — | — | — | — "
                             f"| — | — | — | failed: {r['error'][:80]} |")  # fmt: skip
                continue
            lines.append(
                f"| {r['backend']} | {r['world_size']} | {r['threads_per_process']} | {r['samples_per_sec']:.1f} | "
                f"{_fmt(r.get('speedup'), '.2f')} | {_fmt(r.get('scaling_efficiency'), '.2f')} | "
                f"{r['step_p50_ms']:.1f} / {r['step_p90_ms']:.1f} | {_accuracy(r)} | "
                f"{r['final_loss']:.4f} | {r['peak_rss_mb']:.0f} | "
                f"{_fmt(r.get('launch_to_first_step_s'), '.1f')} | ok |"
            )
        pics = [
            f"![{name}]({plot_dir}/{task}-{name}.png)" for name in ("throughput", "efficiency", "loss", "breakdown")
        ]
        lines += ["", " ".join(pics[:2]), "", " ".join(pics[2:]),
                  ""]  # fmt: skip
    lines += [
        "Speed-up and efficiency are against `single` at world size 1 with the same threads per process "
        "(efficiency = speed-up / world size). samples/s: steady-state global samples per second. Start-up: "
        "from the launcher's start to the first training step. Peak RSS: the largest process.",
        "",
    ]
    ok = [r for r in records if r["status"] == "ok"]
    if ok:
        env = ok[0]["environment"]
        lines += ["## Environment", ""] + [
            f"- {k}: {env.get(k)}"
            for k in ("torch", "accelerate", "horovod", "transformers", "python", "platform", "cpu_count", "device")
        ]
        threads = sorted({r["threads_per_process"] for r in records})
        lines += [f"- threads per process: {', '.join(map(str, threads))} (intra-op, set per run)", ""]
    lines += ["## Commands", ""]
    for s in sweeps:
        lines += [f"Sweep ({s['started_at']}):", "", "```", s["command"], "```", ""]
    lines += ["Runs:", "", "```"] + [r["command"] for r in records] + ["```", ""]
    return "\n".join(lines)


def plots(records: list[dict], plot_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = rows(records)
    for task in dict.fromkeys(r["task"] for r in records):
        mine = [r for r in table if r["task"] == task and r["status"] == "ok"]
        recs = [r for r in records if r["task"] == task and r["status"] == "ok"]
        for metric, ylabel, name in (("samples_per_sec", "global samples/s", "throughput"),
                                     ("scaling_efficiency", "scaling efficiency", "efficiency")):  # fmt: skip
            fig, ax = plt.subplots(figsize=(6, 4))
            for backend in dict.fromkeys(r["backend"] for r in mine):
                pts = sorted((r["world_size"], r[metric]) for r in mine if r["backend"] == backend and r.get(metric))
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=backend)
            ax.set(xlabel="world size (processes)", ylabel=ylabel, title=f"{task}: {ylabel}")
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(plot_dir / f"{task}-{name}.png", dpi=100)
            plt.close(fig)
        fig, ax = plt.subplots(figsize=(7, 4))
        for r in recs:
            ax.plot(r["loss_history"], label=f"{r['backend']} x{r['world_size']} t{r['threads_per_process']}",
                    alpha=0.7)  # fmt: skip
        ax.set(xlabel="global step", ylabel="training loss", title=f"{task}: loss curves (all runs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot_dir / f"{task}-loss.png", dpi=100)
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = [f"{r['backend']}\nx{r['world_size']} t{r['threads_per_process']}" for r in mine]
        bottom = [0.0] * len(mine)
        for part in ("data_ms", "forward_backward_ms", "optimizer_ms"):
            vals = [r.get(part) or 0.0 for r in mine]
            name = {"data_ms": "data", "forward_backward_ms": "forward+backward (DDP: + overlapped sync)",
                    "optimizer_ms": "optimizer step (Horovod: + gradient wait)"}[part]  # fmt: skip
            ax.bar(labels, vals, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set(ylabel="ms per step (main process)", title=f"{task}: step-time breakdown")
        ax.tick_params(axis="x", labelsize=7)
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot_dir / f"{task}-breakdown.png", dpi=100)
        plt.close(fig)


def write_report(dirs: list[Path], out: Path, built_by: str | None = None) -> str:
    """Write summary.csv, the markdown report and plots; returns the markdown.

    `out` is a folder (report.md inside it) or a .md path (plots and CSV in the folder of the same stem).
    """
    records, sweeps = load(dirs)
    if out.suffix == ".md":
        md_path, plot_dir = out, out.parent / out.stem
    else:
        md_path, plot_dir = out / "report.md", out
    plot_dir.mkdir(parents=True, exist_ok=True)
    with open(plot_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows(records))
    plots(records, plot_dir)
    rel = plot_dir.relative_to(md_path.parent) if plot_dir != md_path.parent else Path(".")
    text = markdown(records, sweeps, str(rel), built_by)
    md_path.write_text(text, encoding="utf-8")
    return text
