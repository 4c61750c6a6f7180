"""A results file cut short (a sweep killed while it wrote, a full disk): appends never extend the broken line, the
report is rebuilt from every complete record and names what it skipped, and fails only when nothing could be read."""

import json
import os
import sys

import pytest

from distbench import reporter
from distbench.reporter import append_line, read_jsonl
from tests.helpers import child_env, run_cmd
from tests.test_stats import _sweep


def _cut(records: list[dict]) -> bytes:
    """The records as results.jsonl lines, the last one cut short halfway, without its newline."""
    lines = [json.dumps(r, sort_keys=True).encode() for r in records]
    return b"".join(line + b"\n" for line in lines[:-1]) + lines[-1][: len(lines[-1]) // 2]


def test_an_append_after_a_line_cut_short_starts_a_line_of_its_own(tmp_path):
    records = _sweep(noise=0.01, drift=[1.0] * 2)
    path = tmp_path / "results.jsonl"
    path.write_bytes(_cut(records))
    append_line(path, json.dumps(records[0]))
    got = read_jsonl(path)
    assert got.records == [*records[:-1], records[0]]  # the cut one is lost, the new one whole
    assert got.skipped == [f"line {len(records)}: not a whole JSON record (cut short?)"]


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

    monkeypatch.setattr(reporter.os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        append_line(path, '{"b": 2}')
    assert path.read_bytes() == before


def test_the_report_is_rebuilt_from_every_complete_record_and_names_the_skipped_line(tmp_path):
    records = _sweep(noise=0.01, drift=[1.0] * 5)
    (tmp_path / "results.jsonl").write_bytes(_cut(records) + b"\n" + b'["not a record"]\n')
    proc = run_cmd([sys.executable, "run.py", "report", str(tmp_path)], timeout=120, env=child_env(tmp_path))
    assert "Traceback" not in proc.stderr
    assert f"line {len(records)}: not a whole JSON record" in proc.stderr and "a JSON list, not a record" in proc.stderr
    text = (tmp_path / "report.md").read_text()
    assert "## Skipped lines" in text and f"line {len(records)}: not a whole JSON record" in text
    with open(tmp_path / "runs.csv") as f:
        assert len(f.read().splitlines()) == 1 + len(records) - 1  # the header and every complete record


def test_a_results_file_with_no_complete_record_is_one_line_and_keeps_the_old_report(tmp_path):
    (tmp_path / "results.jsonl").write_bytes(b'{"backend": "ddp", "wor')
    (tmp_path / "report.md").write_text("kept")
    proc = run_cmd([sys.executable, "run.py", "report", str(tmp_path)], timeout=120, env=child_env(tmp_path),
                   expect_rc=2)  # fmt: skip
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no complete record to report" in proc.stderr and "line 1: not a whole JSON record" in proc.stderr
    assert (tmp_path / "report.md").read_text() == "kept"
