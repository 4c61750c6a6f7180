"""What the benchmarks share: the environment of their child processes, reading a child's JSON line, the order of
A/B pairs, the machine line of a document and replacing one section of it."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from distbench.machine import available_cpus

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """Offline, unbuffered: nothing a benchmark run does waits for the network or hides its output."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "DISTBENCH_NO_DOWNLOAD": "1", "PYTHONUNBUFFERED": "1", **extra}


def run_checked(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a child from the repository's root; its failure is an error that quotes the end of its stderr."""
    proc = subprocess.run(cmd, cwd=ROOT, env=env or child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return proc


def last_json(stdout: str) -> dict:
    """The last JSON object a child printed; horovodrun prefixes each line with its rank ("[0]<stdout>:{...}")."""
    line = next(line for line in reversed(stdout.splitlines()) if "{" in line)
    return json.loads(line[line.index("{") :])


def alternate(i: int, first, second) -> tuple:
    """Pair `i` of a series: `first()` then `second()` for even i, the other way round for odd i (A B, B A, ...),
    so that an order effect cannot pass for a difference; returns (first's result, second's result)."""
    if i % 2 == 0:
        a = first()
        return a, second()
    b = second()
    return first(), b


def rotate(i: int, items: list) -> list:
    """Round `i`'s order of several sides: each side first in turn (A B C, B C A, C A B, ...)."""
    k = i % len(items)
    return items[k:] + items[:k]


def machine() -> str:
    return (
        f"{datetime.now(UTC).date()}: {platform.processor() or platform.machine()}, {available_cpus()} cores, "
        f"{platform.platform()}, CPU only (gloo)"
    )


def replace_section(text: str, header: str, section: list[str]) -> str:
    """`text` with the section under `header` (a line that starts with it, up to the next "## " header) replaced, or
    appended. Only at a line's start: "## X" is not the "### X" of a subsection."""
    body = "\n".join(section)
    found = re.search(rf"(?m)^{re.escape(header)}", text)
    if found is None:
        return text.rstrip("\n") + "\n\n" + body
    start = found.start()
    nxt = text.find("\n## ", start + len(header))
    return text[:start] + body + ("\n" + text[nxt + 1 :] if nxt >= 0 else "")


def write_section(out: Path, header: str, section: list[str]) -> None:
    """Replace (or append) one section of the document `out`, leaving the others as they are."""
    out.write_text(replace_section(out.read_text() if out.exists() else "", header, section).rstrip("\n") + "\n")


def library_verdicts(configs) -> list[str]:
    """The report's verdicts between the distributed configurations of a sweep (those against the single-process
    reference left out: the tables give the speed-up), as markdown list lines."""
    from distbench.backends import REFERENCE
    from distbench.sweep import stats
    from distbench.sweep.grouping import comparisons

    return [
        f"- {stats.verdict(a, b, ratio)}"
        for a, b, ratio in comparisons(configs)
        if REFERENCE not in (a.split()[0], b.split()[0])
    ]


def write_task_sections(dirs: list[Path], out: Path, title: str, task_section) -> None:
    """For each `compare` folder and each task in it, `task_section(task, configs, sweep)` (a list of lines whose
    first is its "## " header) replaces that section of `out` (or is appended); the other sections stay."""
    from distbench.sweep.grouping import configurations, load

    text = out.read_text() if out.exists() else f"# {title}\n"
    for d in dirs:
        loaded = load([d])
        configs = configurations(loaded.records)
        for task in dict.fromkeys(c.task for c in configs):
            section = task_section(task, configs, loaded.sweeps[0])
            text = replace_section(text, section[0], section)
            print("\n".join(section))
    out.write_text(text.rstrip("\n") + "\n")
    print(f"written: {out}", file=sys.stderr)
