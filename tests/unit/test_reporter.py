"""The Reporter (distbench/training/reporter.py): a record that cannot be written at the end is not lost. Writing and
reading records themselves: tests/unit/test_records.py."""

import json
from pathlib import Path

import pytest

from distbench.errors import RecordNotWritten
from distbench.training.reporter import Reporter


def test_a_record_that_cannot_be_written_at_the_end_goes_to_stderr(capsys):
    """The folder was writable at start-up but is not at the end: the record is printed, the run fails."""
    record = {"backend": "single", "final_loss": 0.25}
    with pytest.raises(RecordNotWritten) as e:
        Reporter(is_main=True).write_record(record, Path("/proc/nope/x.json"))
    assert e.value.exit_code != 0 and "/proc/nope/x.json" in str(e.value)
    assert json.loads(capsys.readouterr().err) == record
