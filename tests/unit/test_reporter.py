"""Writing records (distbench/training/reporter.py): appends that a cut-short line cannot corrupt, a record that
cannot be written."""

import json
import os

import pytest

from distbench.training import reporter
from distbench.training.reporter import append_line, read_jsonl
from tests.helpers import cut_short, synthetic_sweep


def test_an_append_after_a_line_cut_short_starts_a_line_of_its_own(tmp_path):
    records = synthetic_sweep(noise=0.01, drift=[1.0] * 2)
    path = tmp_path / "results.jsonl"
    path.write_bytes(cut_short(records))
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


def test_a_record_that_cannot_be_written_at_the_end_goes_to_stderr(tmp_path, capsys):
    """The folder was writable at start-up but is not at the end: the record is printed, the run fails."""
    import json
    from pathlib import Path

    from distbench.errors import RecordNotWritten
    from distbench.training.reporter import Reporter

    record = {"backend": "single", "final_loss": 0.25}
    with pytest.raises(RecordNotWritten) as e:
        Reporter(is_main=True).write_record(record, Path("/proc/nope/x.json"))
    assert e.value.exit_code != 0 and "/proc/nope/x.json" in str(e.value)
    assert json.loads(capsys.readouterr().err) == record
