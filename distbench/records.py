"""The results record as a file: its schema version, writing JSON that is valid by the standard, appending and reading
JSON lines whole.

Training writes records through it (training/reporter.py, the fields: training/record.py and docs/architecture.md),
a sweep appends them to results.jsonl, and the report, commbench and the projection read them back. Every reader goes
through read_jsonl or read_records, which hand back each record in the current schema (upgrade), so that no reader
has to know what older records said differently.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# 1: the first; 2: an unshaped link's `link_rate` is "none" (launching/link.py UNSHAPED), as the sweep's axis and the
# options name it, where version 1 wrote null. Fields are only added within a version; renaming one, dropping one or
# changing what a value means bumps it, with a step in `upgrade` that reads the older version.
SCHEMA_VERSION = 2

# launching/link.py UNSHAPED, which this core module cannot import (a layer above it); tests/unit/test_records.py
# checks that the two agree
_UNSHAPED = "none"


def upgrade(record: dict) -> dict:
    """`record` as the current schema (SCHEMA_VERSION) has it, whatever version wrote it; a record without a
    `schema_version` is version 1. Version 1 -> 2: an unshaped link's rate null (or absent: a record from before the
    link was recorded) becomes "none". A record already current is returned as it is."""
    version = record.get("schema_version") or 1
    if not isinstance(version, int) or version >= SCHEMA_VERSION:
        return record
    return {**record, "link_rate": record.get("link_rate") or _UNSHAPED, "schema_version": SCHEMA_VERSION}


def accuracy_missing(record: dict) -> str | None:
    """Why a run's (or a report row's) test accuracy says nothing, where it says nothing: "emulated" (its computation
    replaced by waits) or "synthetic data"; None where it is the model's accuracy."""
    if record.get("accuracy_meaningful", True):
        return None
    return "emulated" if record.get("emulated") else "synthetic data"


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


_UMASK = os.umask(0)  # read once, on import (os.umask can only set it), and put back at once
os.umask(_UMASK)


def write_record(record: dict, path: Path) -> None:
    """`.jsonl`: append one line (never rewrites what is there). `.json`: write atomically (temp + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        append_line(path, to_json(record, sort_keys=True))
        return
    text = to_json(record, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.fchmod(fd, 0o644 & ~_UMASK)  # as the .jsonl beside it (mkstemp's 0600: a record only its writer could read)
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
    """Every whole record of a .jsonl file, in the current schema (upgrade); a line cut short (a writer killed
    mid-line, a full disk) or otherwise not a JSON object is skipped and named, never the end of the reading."""
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
        records.append(upgrade(rec))
    return JsonLines(records, skipped)


def read_records(path: Path) -> list[dict]:
    """The records of a file a run wrote (`--output`), in the current schema (upgrade): every whole line of a
    `.jsonl` (read_jsonl, the lines that held none left out), or the one record of a `.json`."""
    if path.suffix == ".jsonl":
        return read_jsonl(path).records
    return [upgrade(json.loads(path.read_text(encoding="utf-8")))]
