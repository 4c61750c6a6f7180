"""The report's CSV files: summary.csv, one row per configuration (its medians and intervals: verdicts.config_row),
and runs.csv, one row per run of every round.
"""

from __future__ import annotations

import csv
from pathlib import Path

from distbench.sweep.configuration import SweepConfig
from distbench.sweep.grouping import Config, reference_for
from distbench.sweep.verdicts import MEDIAN_FIELDS, MEMORY, SUMMARIES, config_row
from distbench.training.timer import PHASES

AXIS_COLUMNS = list(SweepConfig().to_record())  # the configuration's axes, as the records name them
COLUMNS = [
    *AXIS_COLUMNS,
    *("label", "runs", "runs_ok"),
    *(metric + end for metric, ends in SUMMARIES.items() for end in ends),
    *("step_p50_ms", "step_p90_ms", *PHASES),
    *MEDIAN_FIELDS[:-1],
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


def run_rows(records: list[dict], configs: list[Config]) -> list[dict]:
    """One row per run: its configuration, status, speed, its speed-up over the same round's reference run, and the
    last line of its error."""
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


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_csvs(folder: Path, records: list[dict], configs: list[Config]) -> None:
    """summary.csv and runs.csv in `folder`."""
    _write_csv(folder / "summary.csv", COLUMNS, [config_row(c, configs) for c in configs])
    _write_csv(folder / "runs.csv", RUN_COLUMNS, run_rows(records, configs))
