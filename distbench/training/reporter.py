"""Rank-0 side effects in one place: progress bar, log lines, the results record, the summary line.

Every method is a no-op on processes other than the main one, so the loop can call them freely.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsFloat

from tqdm import tqdm

from distbench.errors import RecordNotWritten


class Reporter:
    def __init__(self, is_main: bool, progress: bool = True):
        self.is_main = is_main
        self.progress = progress and is_main
        self._bar: tqdm | None = None

    def info(self, message: str) -> None:
        if self.is_main:
            print(message, file=sys.stderr, flush=True)

    def start(self, total_steps: int, desc: str, initial: int = 0) -> None:
        if self.progress:
            self._bar = tqdm(
                total=total_steps, initial=initial, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr
            )

    def update(self, step: int, loss: SupportsFloat) -> None:
        """Show the step and its loss (the global mean, as the record keeps it). A tensor's value is read here, on
        the main process only: the other ranks do not wait for their copy."""
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
            self._bar.update(step - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write_record(self, record: dict, path: Path) -> None:
        """Write the record; if that fails now (the folder was checked at start-up), print it to stderr so
        that the run's result is not lost, and fail."""
        if not self.is_main:
            return
        try:
            write_record(record, path)
        except OSError as e:
            print(to_json(record, sort_keys=True), file=sys.stderr, flush=True)
            raise RecordNotWritten(
                f"could not write the record to {path} ({e.strerror or e}); it is the JSON line above, on stderr"
            ) from e

    def summary(self, record: dict, path: Path) -> None:
        if not self.is_main:
            return
        acc = f"{record['eval_accuracy']:.4f}" if record.get("accuracy_meaningful", True) else "n/a (synthetic data)"
        print(
            f"{record['task']} | {record['backend']} x{record['world_size']} | "
            f"{record['samples_per_sec']:.1f} samples/s | accuracy {acc} "
            f"({record['eval_count']} test samples) | final loss {record['final_loss']:.4f} | "
            f"{record['steps']} steps in {record['wall_time_s']:.1f} s | record: {path}",
            flush=True,
        )


def finite(value):
    """`value` with every float that is not finite (NaN, an infinity) replaced by None, in nested dicts, lists and
    tuples too: what was not measured, or not defined, is null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def to_json(value, **dumps_options) -> str:
    """`value` as JSON text, valid by the standard: a float that is not finite becomes null (Python's json would
    write NaN or Infinity, which no other JSON reader accepts). Every JSON file distbench writes goes through it."""
    return json.dumps(finite(value), allow_nan=False, **dumps_options)


def write_json(path: Path, value, **dumps_options) -> None:
    """A whole JSON file (to_json), ended by a newline."""
    path.write_text(to_json(value, **dumps_options) + "\n", encoding="utf-8")


def write_record(record: dict, path: Path) -> None:
    """`.jsonl`: append one line (never rewrites what is there). `.json`: write atomically (temp + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        append_line(path, to_json(record, sort_keys=True))
        return
    text = to_json(record, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def append_line(path: Path, text: str) -> None:
    """Append `text` as one line of `path`, whole or not at all. A last line that a killed writer left without its
    newline is ended first, so that this line cannot extend it into a corrupt one; a write that fails midway (a full
    disk) is cut back to where it began."""
    data = (text + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        begin = os.lseek(fd, 0, os.SEEK_END)
        if begin and os.pread(fd, 1, begin - 1) != b"\n":
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.ftruncate(fd, begin)
            raise
    finally:
        os.close(fd)


@dataclass
class JsonLines:
    """The records of a .jsonl file, and the lines that held none (each "line N: why")."""

    records: list[dict]
    skipped: list[str]


def read_jsonl(path: Path) -> JsonLines:
    """Every whole record of a .jsonl file; a line cut short (a writer killed mid-line, a full disk) or otherwise
    not a JSON object is skipped and named, never the end of the reading."""
    records, skipped = [], []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            skipped.append(f"line {number}: not a whole JSON record (cut short?)")
            continue
        if not isinstance(rec, dict):
            skipped.append(f"line {number}: a JSON {type(rec).__name__}, not a record")
            continue
        records.append(rec)
    return JsonLines(records, skipped)


def read_records(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return read_jsonl(path).records
    return [json.loads(path.read_text(encoding="utf-8"))]
