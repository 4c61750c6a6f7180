"""`run.py check-task`: a user's task under every backend, and each way of breaking the contract named."""

import json
import sys

import pytest

from distbench.backends import DISTRIBUTED
from tests.helpers import py, run_in


def check_task(task_file, tmp_path, cls: str, backends: str, expect_rc: int):
    return run_in(
        tmp_path,
        [sys.executable, "run.py", "check-task", f"{task_file}:{cls}", "--steps", "8", "--backends", backends],
        timeout=400,
        expect_rc=expect_rc,
    )


@pytest.mark.multiproc
@pytest.mark.timeout(450)
def test_a_user_task_runs_under_every_backend_and_keeps_the_contract(task_file, tmp_path):
    # each library once: accelerate-fsdp and accelerate-deepspeed are Accelerate's loop around the library, whose
    # contract test_contract checks and whose loss test_equivalence does
    libraries = [b for b in DISTRIBUTED if not b.startswith("accelerate-")]
    proc = check_task(task_file, tmp_path, "Good", ",".join(libraries), 0)
    print(proc.stdout)
    for backend in ("single x1", *(f"{b} x2" for b in libraries)):
        assert f"| {backend} |" in proc.stdout and proc.stdout.split(f"| {backend} |")[1].split("\n")[0].endswith(
            "ok |"
        )
    assert "keeps the contract" in proc.stdout and "200 test samples" in proc.stdout


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "cls,messages",
    [
        ("UnseededWeights", ["weights do not follow the seed"]),
        # two ways at once, each named: the reference's evaluation, and ddp's data besides
        (
            "RankDependentAndSkipping",
            ["single x1: evaluation counted 199 of the 200 test samples", "ddp x2: data differs between ranks"],
        ),
    ],
)
def test_a_broken_task_fails_check_task_naming_the_broken_part(task_file, tmp_path, cls, messages):
    proc = check_task(task_file, tmp_path, cls, "ddp", 1)
    assert "FAILS the contract" in proc.stderr, proc.stderr[-2000:]
    assert all(m in proc.stderr for m in messages), proc.stderr[-2000:]


RESNET = ["single", "ddp", "fsdp"]


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_synthetic_resnet_replicated_and_sharded(tmp_path):
    """The ResNet (batch norm's buffers, which DDP broadcasts and FSDP shards beside the parameters) on its synthetic,
    sharded data, replicated (ddp) and sharded (fsdp) at x2 against the single run at 1 thread. Every backend runs a
    task of the user's under the same loop: test_a_user_task_runs_under_every_backend_and_keeps_the_contract."""
    out = tmp_path / "sweep"
    cmd = py(
        f"run.py compare --task synthetic-resnet --backends {','.join(RESNET)} --nprocs 2 "
        "--max-steps 3 --batch-size 8 --extra",
        "--model resnet18 --image-size 32",
        "--out",
        str(out),
    )
    run_in(tmp_path, cmd, timeout=560)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    done = {(r["backend"], r["world_size"], r["environment"]["threads_per_process"]) for r in records}
    assert done == {("single", 1, 1), *((b, 2, 1) for b in RESNET[1:])}
    assert all(r["accuracy_meaningful"] is False and r["eval_count"] == 64 for r in records)
    assert all(r["dataset"]["model"] == "resnet18" and len(set(r["data_fingerprints"])) == 1 for r in records)
    assert "n/a: synthetic data" in (out / "report.md").read_text()
