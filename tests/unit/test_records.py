"""The record as a file (distbench/records.py): JSON valid by the standard (what is not measured or not defined is
null, never NaN or Infinity, which Python's json writes and no other JSON reader accepts), appends that a cut-short
line cannot corrupt, and every record read back in the current schema version."""

import json
import math
import os
import re

import pytest

from distbench import records
from distbench.launching import link
from distbench.records import SCHEMA_VERSION, append_line, read_jsonl, read_records, to_json, upgrade, write_record
from tests.helpers import ROOT, cut_short, synthetic_sweep


def strict(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ---- writing: valid JSON ---------------------------------------------------------------------------------------------
def test_what_is_not_finite_is_null_at_any_depth():
    value = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2, math.nan), "e": "nan", "f": 3}
    assert strict(to_json(value)) == {"a": None, "b": [1.0, None, {"c": None}], "d": [2, None], "e": "nan", "f": 3}


def test_to_json_refuses_nothing_json_can_hold():
    """Every kind JSON has, nested, and the options of json.dumps, pass through as they are."""
    value = {"s": "é", "i": -3, "f": 0.5, "t": True, "n": None, "l": [[], {}], "z": {"b": 1, "a": 2}}
    assert strict(to_json(value)) == value
    assert to_json({"b": 1, "a": [1]}, sort_keys=True, indent=1) == '{\n "a": [\n  1\n ],\n "b": 1\n}'


@pytest.mark.parametrize("name", ["run.json", "results.jsonl"])
def test_a_record_with_nan_is_written_as_valid_json(tmp_path, name):
    """A sharded model's checksum on a rank without the whole state, a run without a timed step: NaN in the record,
    null in its file; the file readable by all, as any other result file (not mkstemp's 0600)."""
    record = {"schema_version": SCHEMA_VERSION, "link_rate": "none", "param_checksum": math.nan, "steps": 3}
    record |= {"samples_per_sec": math.inf, "step_time_ms": {"p50": math.nan}}
    path = tmp_path / name
    write_record(record, path)
    written = strict(path.read_text())  # the .jsonl holds one line
    assert written == {
        "schema_version": SCHEMA_VERSION,
        "link_rate": "none",
        "param_checksum": None,
        "samples_per_sec": None,
        "step_time_ms": {"p50": None},
        "steps": 3,
    }
    assert read_records(path) == [written]
    assert path.stat().st_mode & 0o777 == 0o644 & ~os.umask(os.umask(0))  # as open() makes it, both forms


def test_every_json_writer_goes_through_to_json():
    """json.dump(s) appears in distbench only inside records.to_json: every other writer calls it (or write_json,
    write_record, which do)."""
    calls = re.compile(r"\bjson\.dumps?\(")
    found = []
    for folder, _, files in os.walk(ROOT / "distbench", followlinks=True):  # backends/, models/, data/: links
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found += [f"{os.path.relpath(path, ROOT)}: {line.strip()}" for line in open(path) if calls.search(line)]
    assert found == ["distbench/records.py: return json.dumps(finite(value), allow_nan=False, **dumps_options)"]


# ---- appending and reading lines whole -------------------------------------------------------------------------------
def test_a_line_cut_short_is_skipped_and_named(tmp_path):
    written = synthetic_sweep(noise=0.01, drift=[1.0] * 2)
    path = tmp_path / "results.jsonl"
    path.write_bytes(cut_short(written) + b"\n[1, 2]\n")  # and a line that is JSON but no record
    got = read_jsonl(path)
    assert got.records == [upgrade(r) for r in written[:-1]]
    assert got.skipped == [
        f"line {len(written)}: not a whole JSON record (cut short?)",
        f"line {len(written) + 1}: a JSON list, not a record",
    ]


def test_an_append_after_a_line_cut_short_starts_a_line_of_its_own(tmp_path):
    written = synthetic_sweep(noise=0.01, drift=[1.0] * 2)
    path = tmp_path / "results.jsonl"
    path.write_bytes(cut_short(written))
    append_line(path, json.dumps(written[0]))
    got = read_jsonl(path)
    assert got.records == [upgrade(r) for r in [*written[:-1], written[0]]]  # the cut one is lost, the new one whole
    assert got.skipped == [f"line {len(written)}: not a whole JSON record (cut short?)"]


def test_an_append_that_fails_midway_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    append_line(path, '{"a": 1}')
    before = path.read_bytes()
    real_write = os.write

    def full_disk(fd, data):  # writes a few bytes, then the disk is full
        if len(data) > 4:
            real_write(fd, bytes(data[:4]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(records.os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        append_line(path, '{"b": 2}')
    assert path.read_bytes() == before


# ---- older schema versions, read as the current one ------------------------------------------------------------------
V1 = {"schema_version": 1, "backend": "ddp", "link_rate": None, "link_mode": "shared", "steps": 3}


@pytest.mark.parametrize("name", ["run.json", "results.jsonl"])
def test_a_version_1_record_is_read_as_version_2(tmp_path, name):
    """Version 1 wrote null for an unshaped link; every reader gets "none", as the sweep's axis names it."""
    path = tmp_path / name
    path.write_text(json.dumps(V1) + "\n")
    assert read_records(path) == [{**V1, "schema_version": 2, "link_rate": "none"}]
    assert records.upgrade(V1)["link_rate"] == link.UNSHAPED  # the core's word for it is the launching layer's


def test_what_upgrade_changes_and_leaves():
    assert upgrade({"backend": "ddp"}) == {"backend": "ddp", "link_rate": "none", "schema_version": 2}  # no version: 1
    shaped = {**V1, "link_rate": "100mbit"}
    assert upgrade(shaped) == {**shaped, "schema_version": 2}
    current = {"schema_version": SCHEMA_VERSION, "link_rate": "none"}
    assert upgrade(current) is current
    assert V1["link_rate"] is None  # the record read is not changed in place


def test_an_accuracy_that_says_nothing_is_said_so_with_why_everywhere_it_is_printed():
    """The run's summary line, the sweep's progress line and the report's cell take one answer (an emulated run's
    eval_accuracy is a number, 0.0 from its waits: printed as an accuracy, it read as a model that learned nothing)."""
    assert records.accuracy_missing({"accuracy_meaningful": True, "emulated": None}) is None
    assert records.accuracy_missing({"eval_accuracy": 0.9}) is None  # a record from before the field
    assert records.accuracy_missing({"accuracy_meaningful": False, "emulated": {"profile": "p.json"}}) == "emulated"
    assert records.accuracy_missing({"accuracy_meaningful": False, "emulated": None}) == "synthetic data"
    sources = [ROOT / "distbench" / f for f in ("training/reporter.py", "sweep/runner.py", "sweep/markdown.py")]
    assert all("accuracy_missing(" in p.read_text() for p in sources)
    assert not any("accuracy_meaningful" in p.read_text() for p in sources)
