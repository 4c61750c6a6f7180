"""Report of compare sweeps, from results.jsonl: summary.csv (one row per configuration), runs.csv (one row
per run), a markdown report with verdicts and a noise gauge, and plots with error bars. `write_report` is the one
entry point; each part has a module of its own:

- grouping.py: the records, loaded and grouped by configuration, and the paired comparisons between them;
- stats.py: medians, bootstrap intervals, paired ratios and the verdict sentence (why these: docs/statistics.md);
- verdicts.py: each configuration's figures as one row, the verdicts, the noise gauge, the baseline's verdicts;
- markdown.py: report.md, with context.py (what the runs measured on), summary.py (the summary in words and the
  failures) and settings.py (where a baseline sweep differs);
- csvfiles.py: summary.csv and runs.csv; plots.py: the plots.

A *configuration* is what a sweep varies (distbench/sweep/configuration.py: task, backend, world size, threads per
process and the other axes); each is run once per round. Summaries are medians over rounds with bootstrap
intervals; speed-up and efficiency are paired with the same round's reference run (`single` x1, same threads per
process).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from distbench.errors import UserError
from distbench.sweep import csvfiles, plots, settings
from distbench.sweep.grouping import Loaded, configurations, load
from distbench.sweep.markdown import markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"  # this checkout's docs/, which the report links to


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
    loaded = _load(dirs)
    records = loaded.records
    old = diffs = None
    if baseline is not None:
        old = load([baseline]).records
        diffs = settings.differences(old, records)
        refused = settings.refusal(diffs, str(baseline), ", ".join(map(str, dirs)))
        if refused and not allow_different:
            raise UserError(refused)
    for why in loaded.skipped:
        print(f"note: skipped {why}", file=sys.stderr)
    md_path, plot_dir = (out, out.parent / out.stem) if out.suffix == ".md" else (out / "report.md", out)
    plot_dir.mkdir(parents=True, exist_ok=True)
    csvfiles.write_csvs(plot_dir, records, configurations(records))
    plots.plots(records, plot_dir)
    rel = plot_dir.relative_to(md_path.parent) if plot_dir != md_path.parent else Path(".")
    docs = os.path.relpath(DOCS, md_path.parent.resolve())
    text = markdown(records, loaded.sweeps, str(rel), built_by, old, loaded.skipped, docs, diffs)
    md_path.write_text(text, encoding="utf-8")
    return text


def _load(dirs: list[Path]) -> Loaded:
    """The sweeps' records; one line, nothing written, where no line of them held a complete record."""
    loaded = load(dirs)
    if loaded.skipped and not loaded.records:
        raise UserError(
            f"no complete record to report in {', '.join(map(str, dirs))} ({len(loaded.skipped)} line(s) "
            f"skipped, the first: {loaded.skipped[0]}); nothing was written"
        )
    return loaded
