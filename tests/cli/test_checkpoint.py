"""Checkpoints through run.py: a finished run rerun, a checkpoint past the end, the first format."""

import shutil
import sys

import pytest
import torch

from distbench.training import checkpoint
from tests.helpers import assert_one_line_error, read_record, run_in

COMMON = ["--no-progress", "--threads", "1"]


def _run(tmp_path, name, *args, expect_rc=0, ckpt="ckpt"):
    out = tmp_path / f"{name}.json"
    proc = run_in(
        tmp_path,
        [sys.executable, "run.py", *COMMON, *args, "--checkpoint-dir", str(tmp_path / ckpt), "--output", str(out)],
        timeout=120,
        expect_rc=expect_rc,
    )
    return proc, out


FINISHED = {
    "mid-epoch": ["--max-steps", "20", "--checkpoint-every", "10"],  # the last checkpoint mid-epoch
    "epoch-end": ["--epochs", "1", "--batch-size", "500", "--checkpoint-every", "9"],  # 4,500 / 500: at the end
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """{case: (its folder, the record of the run that wrote the checkpoint)} for the cases of FINISHED."""
    runs = {}
    for case, args in FINISHED.items():
        tmp = tmp_path_factory.mktemp(case)
        runs[case] = tmp, read_record(_run(tmp, "first", *args)[1])
    return runs


def _copy_of(finished_dir, tmp_path):
    shutil.copytree(finished_dir / "ckpt", tmp_path / "ckpt")


@pytest.mark.parametrize("case", list(FINISHED))
def test_rerunning_a_finished_run_finishes_at_once_with_the_same_record(tmp_path, finished, case):
    folder, a = finished[case]
    _copy_of(folder, tmp_path)
    proc, again = _run(tmp_path, "again", *FINISHED[case])
    assert "nothing left to train" in proc.stderr
    b = read_record(again)
    assert b["steps"] == b["resumed_from_step"] == a["steps"]
    assert b["loss_history"] == a["loss_history"] and b["param_checksum"] == a["param_checksum"]
    assert b["eval_count"] == 500 and b["eval_accuracy"] == a["eval_accuracy"]


def test_a_checkpoint_past_the_last_step_is_one_line(tmp_path, finished):
    _copy_of(finished["mid-epoch"][0], tmp_path)
    proc, out = _run(tmp_path, "shorter", "--max-steps", "15", expect_rc=None)
    assert_one_line_error(proc, "at step 20, past --max-steps 15")
    assert not out.exists()


def test_checkpoints_of_the_first_format_still_resume(tmp_path, finished):
    _copy_of(finished["mid-epoch"][0], tmp_path)
    path = checkpoint.path_in(tmp_path / "ckpt")
    state = torch.load(path, weights_only=True)
    assert state["format"] == checkpoint.FORMAT and set(state["rng"]) == {"cpu"}
    state.update(format=1, rng=state["rng"]["cpu"])  # as distbench wrote them before device generators
    torch.save(state, path)
    loaded = checkpoint.load(path, state["config"], world_size=1)
    assert torch.equal(loaded.rng["cpu"], state["rng"])


def test_checkpoints_of_the_second_format_still_resume(tmp_path, finished):
    """Format 2 (before library checkpoints) has no "library": read as whole tensors."""
    _copy_of(finished["mid-epoch"][0], tmp_path)
    path = checkpoint.path_in(tmp_path / "ckpt")
    state = torch.load(path, weights_only=True)
    del state["library"]
    state["format"] = 2
    torch.save(state, path)
    loaded = checkpoint.load(path, state["config"], world_size=1)
    assert loaded.library is None and loaded.step == state["step"]
