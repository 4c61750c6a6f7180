"""Real multi-process runs of run.py on CPU/gloo, started by each backend's own launcher: the README's commands, exact
evaluation, and every backend following the single process's optimisation path."""

import os
import sys

import pytest

from distbench.backends import DISTRIBUTED
from distbench.launching.launch import BIN
from distbench.records import read_records
from distbench.training import fairness
from tests.conftest import EQUIVALENCE_STEPS, MNIST_STEPS
from tests.helpers import launch, read_record, run_cmd, started_by

COMMON = ["--no-progress", "--threads", "1"]

# the evaluation loss after MNIST_STEPS, relative to single x1's: 0.3 % measured (the amplified rounding)
EVAL_LOSS_TOLERANCE = 0.02


def run_launch(tmp_path, backend, nprocs, args, launcher=None, timeout=240, name="r"):
    out = tmp_path / f"{name}.json"
    run_cmd(
        launch(backend, nprocs, [*args, *COMMON, "--output", str(out)], launcher), timeout=timeout, env=_env(tmp_path)
    )
    return read_record(out)


def _env(tmp_path):
    from tests.helpers import child_env

    return child_env(tmp_path)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
# The three commands of the README, exactly as written (plus a short run and an output path).
@pytest.mark.parametrize(
    "cmd,backend,world",
    [
        ([sys.executable, "run.py", "--backend", "accelerate"], "accelerate", 1),
        ([str(BIN / "horovodrun"), "-np", "4", sys.executable, "run.py", "--backend", "horovod"], "horovod", 4),
        ([str(BIN / "torchrun"), "run.py", "--backend", "ddp"], "ddp", 1),
    ],
    ids=["python-accelerate", "horovodrun-np4", "torchrun-ddp"],
)
def test_documented_commands(tmp_path, cmd, backend, world):
    out = tmp_path / "runs.jsonl"
    proc = run_cmd([*cmd, "--max-steps", "8", "--output", str(out), "--no-progress"], timeout=240, env=_env(tmp_path))
    (rec,) = read_records(out)
    assert (rec["backend"], rec["world_size"], rec["steps"], rec["eval_count"]) == (backend, world, 8, 500)
    assert rec["per_rank_batch_size"] * world == rec["global_batch_size"] == 64
    assert "samples/s" in proc.stdout


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_exact_evaluation_at_world_size_3(tmp_path):
    rec = run_launch(tmp_path, "ddp", 3, ["--max-steps", "2", "--batch-size", "48"])
    assert rec["world_size"] == 3 and rec["eval_count"] == 500  # 167 + 167 + 166, none padded


# each backend's run with loader workers; ddp's leaves pinning off too (one run serves both tests: neither changes what
# the other checks, the loss bit for bit with one thread per process)
LOADED = {"ddp": ("--loader-workers", "2", "--no-pin-cores"), "accelerate": ("--loader-workers", "2")}


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_no_pin_cores_leaves_the_processes_unpinned(mnist_run):
    """Where pinning would apply (two processes, a core each), --no-pin-cores leaves it off."""
    rec = mnist_run("ddp", 2, *LOADED["ddp"])
    assert rec["environment"]["pinned_cores"] is None and rec["config"]["pin_cores"] is False


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", sorted(LOADED))
def test_loader_workers_load_the_same_batches_in_the_same_order(mnist_run, backend):
    """--loader-workers: worker processes fetch and collate, the sampler stays in the training process: the same
    batches in the same order, so the same loss at every step, bit for bit, through the base loader (ddp) and through
    the loader Accelerate rebuilds in prepare(); every test sample evaluated once."""
    plain, loaded = mnist_run(backend, 2), mnist_run(backend, 2, *LOADED[backend])
    assert loaded["config"]["loader_workers"] == 2 and plain["config"]["loader_workers"] == 0
    assert loaded["loss_history"] == plain["loss_history"] and loaded["eval_count"] == 500


@pytest.fixture(scope="module")
def reference(mnist_run):
    return mnist_run("single", 1)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", DISTRIBUTED)
def test_backends_follow_the_single_process_optimisation_path(mnist_run, reference, backend):
    rec = mnist_run(backend, 2)  # also the plain run of test_knobs.py
    ref_losses, losses = reference["loss_history"], rec["loss_history"]
    assert len(losses) == len(ref_losses) == MNIST_STEPS
    early = max(abs(a - b) for a, b in zip(ref_losses[:EQUIVALENCE_STEPS], losses, strict=False))
    late = max(abs(a - b) for a, b in zip(ref_losses, losses, strict=True))
    rel_checksum = abs(rec["param_checksum"] - reference["param_checksum"]) / abs(reference["param_checksum"])
    rel_eval = abs(rec["eval_loss"] - reference["eval_loss"]) / reference["eval_loss"]
    print(
        f"{backend} x2 vs single x1: max per-step loss difference {early:.3e} over {EQUIVALENCE_STEPS} steps, "
        f"{late:.3e} over {MNIST_STEPS}; checksum {rel_checksum:.3e}, eval loss {rel_eval:.3e}"
    )
    assert early < fairness.LOSS_TOLERANCE  # float reordering only (conftest.EQUIVALENCE_STEPS)
    # after 50 steps the amplified rounding (7e-3 per step, 5e-3 checksum, 0.3 % eval loss measured) stays small
    assert late < fairness.LATE_TOLERANCE and rel_checksum < fairness.CHECKSUM_TOLERANCE
    assert rel_eval < EVAL_LOSS_TOLERANCE
    assert rec["eval_count"] == reference["eval_count"] == 500
    assert rec["world_size"] == 2 and rec["per_rank_batch_size"] == 32
    assert rec["launcher"] == started_by(backend).name
    assert rec["environment"]["threads_per_process"] == 1
    # each process computes on its own core (the main process on the first it may use)
    available = sorted(os.sched_getaffinity(0))
    assert rec["environment"]["pinned_cores"] == (available[:1] if len(available) >= 2 else None)
