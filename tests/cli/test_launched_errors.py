"""Bad input under a launcher: distbench's line once, then the launcher's own report."""

import pytest

from distbench.launching.launch import TORCHRUN
from tests.helpers import launch, run_in

COMMON = ["--no-progress", "--threads", "1"]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_batch_not_dividing_the_world_fails_cleanly(tmp_path):
    proc = run_in(tmp_path, launch("ddp", 2, ["--batch-size", "63", *COMMON]), timeout=120, expect_rc=None)
    assert proc.returncode != 0
    line = "error: --batch-size 63 is the global batch and must divide evenly across 2 processes"
    assert line in proc.stderr.split("Traceback")[0]  # printed by rank 0, before torchrun's own report
    # torchrun's failure summary names that line as the root cause (through the worker's error file)
    summary = proc.stderr[proc.stderr.index("Root Cause") :]
    assert f"traceback : {line}" in summary and "To enable traceback" not in summary


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_horovod_under_torchrun_is_refused(tmp_path):
    proc = run_in(tmp_path, launch("horovod", 2, COMMON, TORCHRUN), timeout=120, expect_rc=None)
    assert proc.returncode != 0 and "--backend horovod was started by torchrun" in proc.stderr


@pytest.mark.multiproc
@pytest.mark.parametrize(
    "backend,args,fragment",
    [
        ("ddp", ["--batch-size", "64", "--accumulate", "3"], "each process's 32 samples per step must split into 3"),
        ("horovod", ["--grad-compression", "bf16"], "Horovod 0.28.1 cannot all-reduce bfloat16 tensors"),
    ],
    ids=["ddp-indivisible", "horovod-bf16"],
)
def test_bad_knobs_under_a_launcher_are_one_line_from_distbench(tmp_path, backend, args, fragment):
    """Under a launcher the main process says it once; the launcher then adds its own failure report."""
    cmd = launch(backend, 2, ["--max-steps", "2", "--no-progress", "--output", str(tmp_path / "r.json"), *args])
    proc = run_in(tmp_path, cmd, timeout=180, expect_rc=None)
    lines = [line.split("<stderr>:", 1)[-1] for line in (proc.stdout + proc.stderr).splitlines()]  # horovodrun
    ours = [line for line in lines if line.startswith("error: --")]  # torchrun's summary quotes it indented
    assert proc.returncode != 0 and len(ours) == 1 and fragment in ours[0], proc.stdout + proc.stderr
    assert not (tmp_path / "r.json").exists()
