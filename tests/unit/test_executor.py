"""A failed run's record ends with its cause, whole (distbench/sweep/executor.py's run_one): the line the progress
line and the report show."""

import sys

from distbench.sweep.executor import run_one


def _run(tmp_path, code: str, timeout_s: float = 60) -> dict:
    return run_one([[sys.executable, "-c", code]], tmp_path / "r.json", timeout_s, tmp_path / "r.log")


def test_the_cause_of_a_failure_is_its_last_line(tmp_path):
    cause = "error: a cause longer than any table cell" + ", and it keeps every word" * 5
    rec = _run(tmp_path, f"import sys; print({cause!r}); print('launcher noise after it'); sys.exit(2)")
    assert (rec["status"], rec["returncode"]) == ("failed", 2)
    assert rec["error"].splitlines()[-1] == cause


def test_a_timeout_says_so_last(tmp_path):
    rec = _run(tmp_path, "import time; print('error: not the cause', flush=True); time.sleep(60)", timeout_s=1)
    assert rec["error"].splitlines()[-1] == "timed out after 1 s"


def test_a_run_that_ends_well_without_its_record_says_so(tmp_path):
    rec = _run(tmp_path, "print('done')")
    assert rec["error"].splitlines()[-1] == f"exited 0 without writing its record {tmp_path / 'r.json'}"
