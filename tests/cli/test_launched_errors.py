"""Bad input under a launcher: distbench's line once, then the launcher's own report."""

import pytest

from tests.helpers import launch, run_in

COMMON = ["--no-progress", "--threads", "1"]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_batch_not_dividing_the_world_fails_cleanly(tmp_path):
    """Under torchrun rank 0 says it once, before any process group; torchrun then adds its own failure report.
    (Every refusal's message, the same checks run in one process: docs/reliability.md's table, test_bad_input_table;
    that a launched run finds its launcher: test_equivalence.)"""
    out = tmp_path / "r.json"
    cmd = launch("ddp", 2, ["--batch-size", "63", *COMMON, "--output", str(out)])
    proc = run_in(tmp_path, cmd, timeout=120, expect_rc=None)
    assert proc.returncode != 0
    line = "error: --batch-size 63 is the global batch and must divide evenly across 2 processes"
    assert line in proc.stderr.split("Traceback")[0]  # printed by rank 0, before torchrun's own report
    assert [x for x in proc.stderr.splitlines() if x.startswith("error: --")] == [line]  # once, not by every rank
    # torchrun's failure summary names that line as the root cause (through the worker's error file)
    summary = proc.stderr[proc.stderr.index("Root Cause") :]
    assert f"traceback : {line}" in summary and "To enable traceback" not in summary
    assert not out.exists()


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_a_bad_knob_under_horovodrun_is_one_line_from_distbench(tmp_path):
    """Under horovodrun (every rank's output prefixed by its own) the main process says it once; horovodrun then
    adds its own failure report."""
    fragment = "Horovod 0.28.1 cannot all-reduce bfloat16 tensors"
    args = ["--max-steps", "2", "--no-progress", "--output", str(tmp_path / "r.json"), "--grad-compression", "bf16"]
    proc = run_in(tmp_path, launch("horovod", 2, args), timeout=180, expect_rc=None)
    lines = [line.split("<stderr>:", 1)[-1] for line in (proc.stdout + proc.stderr).splitlines()]  # horovodrun
    ours = [line for line in lines if line.startswith("error: --")]  # torchrun's summary quotes it indented
    assert proc.returncode != 0 and len(ours) == 1 and fragment in ours[0], proc.stdout + proc.stderr
    assert not (tmp_path / "r.json").exists()
