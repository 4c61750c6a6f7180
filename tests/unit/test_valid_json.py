"""Every JSON file distbench writes is JSON (distbench/training/reporter.py, to_json): what is not measured or not
defined is null, never NaN or Infinity, which Python's json writes and no other JSON reader accepts."""

import json
import math
import os
import re

import pytest

from distbench.training import reporter
from tests.helpers import ROOT


def strict(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_what_is_not_finite_is_null_at_any_depth():
    value = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2, math.nan), "e": "nan", "f": 3}
    assert strict(reporter.to_json(value)) == {
        "a": None,
        "b": [1.0, None, {"c": None}],
        "d": [2, None],
        "e": "nan",
        "f": 3,
    }


@pytest.mark.parametrize("name", ["run.json", "results.jsonl"])
def test_a_record_with_nan_is_written_as_valid_json(tmp_path, name):
    """A sharded model's checksum on a rank without the whole state, a run without a timed step: NaN in the record,
    null in its file."""
    record = {"param_checksum": math.nan, "samples_per_sec": math.nan, "step_time_ms": {"p50": math.nan}, "steps": 3}
    path = tmp_path / name
    reporter.write_record(record, path)
    written = strict(path.read_text())  # the .jsonl holds one line
    assert written == {"param_checksum": None, "samples_per_sec": None, "step_time_ms": {"p50": None}, "steps": 3}
    assert reporter.read_records(path) == [written]


def test_every_json_writer_goes_through_to_json():
    """json.dump(s) appears in distbench only inside reporter.to_json: every other writer calls it (or write_json,
    write_record, which do)."""
    calls = re.compile(r"\bjson\.dumps?\(")
    found = []
    for folder, _, files in os.walk(ROOT / "distbench", followlinks=True):  # backends/, models/, data/: links
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found += [f"{os.path.relpath(path, ROOT)}: {line.strip()}" for line in open(path) if calls.search(line)]
    assert found == [
        "distbench/training/reporter.py: return json.dumps(finite(value), allow_nan=False, **dumps_options)"
    ]
