"""docs/reliability.md's table of bad inputs is what the commands say now (benchmarks/bad_inputs.py runs each case
in-process; `python -m benchmarks.bad_inputs` rewrites the table when a message changes)."""

import pytest


@pytest.mark.timeout(120)
def test_the_documented_table_of_bad_inputs_is_what_the_commands_say():
    from benchmarks.bad_inputs import DOC, regenerated

    fresh = regenerated()
    assert DOC.read_text().splitlines() == fresh.splitlines(), "run: python -m benchmarks.bad_inputs"
    table = [line for line in fresh.splitlines() if line.startswith("| ") and "python run.py" in line]
    assert len(table) > 30 and all(line.split(" | ")[2] == "2" and "| error: " in line for line in table)
    assert "fsdp" in fresh and "accelerate-fsdp" in fresh  # the backends' list as it is now (issue 34)
