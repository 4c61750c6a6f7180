"""The settings a sweep ran under, read from its records, and where two sweeps differ (`run.py report --baseline`).

Two sweeps compare configuration by configuration only when they trained the same work on the same kind of device:
a different task, dataset, number of steps, global batch or device makes every ratio between them a ratio of
different things, so `report --baseline` refuses them unless told `--allow-different`. Every other difference
(threads, link, library versions, the machine, an option) is named in the report and the comparison goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from distbench.config import AXIS, FIELDS, SET
from distbench.sweep.configuration import AXES
from distbench.sweep.context import collective, device_kind


def _dataset(rec: dict):
    d = rec.get("dataset")
    return f"{d.get('name')} from {d.get('source')} ({d.get('n_train')} / {d.get('n_test')})" if d else None


# what makes two sweeps incomparable: each setting's name and how a record says it
INCOMPARABLE: dict[str, Callable[[dict], object]] = {
    "task": lambda r: r.get("task"),
    "dataset": _dataset,
    "steps": lambda r: r.get("steps"),
    "global batch": lambda r: r.get("global_batch_size"),
    "device": device_kind,
}
# the rest: the axes (which values each sweep covered), the machine, the libraries (and below, the run's options)
NAMED: dict[str, Callable[[dict], object]] = {
    **{
        name.replace("_", " "): (lambda r, f=f, n=name: r.get(f.metadata["record"] or n, f.default))
        for name, f in AXES.items()
        if name != "task"
    },
    "warm-up steps": lambda r: r.get("warmup_steps"),
    "precision": lambda r: r.get("precision"),
    "dropout p": lambda r: r.get("dropout_p"),
    "collective": collective,
    **{
        f"machine {key}": (lambda r, k=key: (r.get("environment") or {}).get(k))
        for key in ("device_name", "cpu_count", "platform", "python", "torch", "accelerate", "horovod", "transformers")
    },
}
# options of the record's config that are no setting of their own: the axes and what the sweep sets for each run
# (as config.py declares them), those said above, and those that say only how a run shows or keeps its work
_NOT_SETTINGS = {name for name, f in FIELDS.items() if f.metadata["sweep"] in (AXIS, SET)}
_NOT_SETTINGS |= {"task", "batch_size", "max_steps", "epochs", "precision"}
_NOT_SETTINGS |= {"progress", "log_every", "data_dir", "checkpoint_dir"}


@dataclass(frozen=True)
class Difference:
    """A setting in which two sweeps differ: its values in the baseline and the new sweep, and whether it makes them
    incomparable (settings.INCOMPARABLE)."""

    setting: str
    old: str
    new: str
    incomparable: bool

    def text(self) -> str:
        """The difference in words: "steps 5 (baseline) vs 10"."""
        return f"{self.setting} {self.old} (baseline) vs {self.new}"


def _values(records: list[dict], read: Callable[[dict], object]) -> str | None:
    """The setting's values over a sweep's completed runs, as text; None where no record says (older records)."""
    values = {read(r) for r in records if r.get("status", "ok") == "ok"} - {None}
    if not values:
        return None
    return ", ".join(sorted(map(str, values), key=lambda v: (len(v), v)))


def settings(records: list[dict]) -> dict[str, tuple[str | None, bool]]:
    """Each setting's values in a sweep, and whether a difference in it makes two sweeps incomparable."""
    out = {name: (_values(records, read), True) for name, read in INCOMPARABLE.items()}
    out |= {name: (_values(records, read), False) for name, read in NAMED.items()}
    out["rounds"] = (str(max((r.get("round", 1) for r in records), default=0)) if records else None, False)
    options = {k for r in records for k in (r.get("config") or {})} - _NOT_SETTINGS
    for key in sorted(options):
        read = lambda r, k=key: _option(r, k)  # noqa: E731
        out[f"--{key.replace('_', '-')}"] = (_values(records, read), False)
    return out


def _option(rec: dict, key: str) -> object:
    config = rec.get("config") or {}
    return str(config[key]) if key in config else None  # None said as "None": an unset option is a value too


def differences(old: list[dict], new: list[dict]) -> list[Difference]:
    """Every setting whose values differ between the two sweeps (a setting only one of them records is left out)."""
    before, after = settings(old), settings(new)
    out = []
    for name, (value, incomparable) in after.items():
        was = before.get(name, (None, incomparable))[0]
        if value is not None and was is not None and value != was:
            out.append(Difference(name, was, value, incomparable))
    return out


def refusal(diffs: list[Difference], old: str, new: str) -> str | None:
    """The one line that refuses to compare two sweeps that differ in what makes them incomparable; None if none."""
    blocking = [d for d in diffs if d.incomparable]
    if not blocking:
        return None
    said = "; ".join(d.text() for d in blocking)
    return (
        f"the baseline {old} and {new} are not comparable: {said}; give --allow-different to compare them anyway "
        "(nothing was written)"
    )


def difference_lines(diffs: list[Difference]) -> list[str]:
    """The report's list of what differs between the sweeps, the incomparable first."""
    if not diffs:
        return ["The two sweeps ran under the same settings (as far as their records say).", ""]
    lines = ["Settings in which the two sweeps differ (baseline vs this sweep):", ""]
    for d in sorted(diffs, key=lambda d: not d.incomparable):
        note = " **(makes them incomparable: compared anyway, `--allow-different`)**" if d.incomparable else ""
        lines.append(f"- {d.setting}: {d.old} vs {d.new}{note}")
    return lines + [""]
