"""User tasks (a file or a module outside the package), the fairness self-check, and synthetic-resnet."""

import json
import sys
import textwrap

import pytest
import torch

from distbench import fairness
from distbench.config import RunConfig
from distbench.errors import UserError
from distbench.tasks import build_task, task_class, with_defaults
from tests.helpers import ROOT, child_env, run_cmd

# A user's task, written outside the package: the example's shape, with a hook per way of breaking the contract.
TASK = textwrap.dedent("""
    import os
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import TensorDataset

    class Good:
        name = "user-good"
        defaults = {"epochs": 1, "batch_size": 32, "lr": 1e-2}

        def __init__(self, cfg):
            self.cfg = cfg

        def build_model(self):
            p = 0.1 if self.cfg.dropout is None else self.cfg.dropout
            return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 2))

        def build_optimizer(self, model):
            return torch.optim.Adam(model.parameters(), lr=self.cfg.lr)

        def data_seed(self):
            return self.cfg.seed

        def datasets(self):
            g = torch.Generator().manual_seed(self.data_seed())
            x = torch.randn(1200, 8, generator=g)
            y = (x.sum(1) > 0).long()
            return TensorDataset(x[:1000], y[:1000]), TensorDataset(x[1000:], y[1000:])

        def collate(self, samples):
            xs, ys = zip(*samples)
            return torch.stack(xs), torch.stack(ys)

        def step(self, model, batch):
            return F.cross_entropy(model(batch[0]), batch[1])

        def evaluate(self, model, batch):
            x, y = batch
            out = model(x)
            return {"loss_sum": F.cross_entropy(out, y, reduction="sum"), "correct": (out.argmax(1) == y).sum(),
                    "count": torch.tensor(len(y))}

    class UnseededWeights(Good):
        def build_model(self):
            model = super().build_model()
            g = torch.Generator()
            g.seed()  # from the OS, not from the run's seed
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            return model

    class RankDependentData(Good):
        def data_seed(self):
            return self.cfg.seed + int(os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "0")))

    class EvalSkipsSamples(Good):
        def evaluate(self, model, batch):
            x, y = batch
            return super().evaluate(model, (x[1:], y[1:]))  # drops the first sample of every batch

    class NoEvaluate:
        def __init__(self, cfg):
            pass

        def build_model(self): ...
        def build_optimizer(self, model): ...
        def datasets(self): ...
        def collate(self, samples): ...
        def step(self, model, batch): ...
""")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user-task") / "my_task.py"
    path.write_text(TASK)
    return path


def test_a_task_loads_from_a_file_and_from_a_module(task_file, monkeypatch):
    task = build_task(RunConfig(task=f"{task_file}:Good"))
    assert task.name == "user-good" and with_defaults(RunConfig(task=f"{task_file}:Good")).batch_size == 32
    monkeypatch.syspath_prepend(str(task_file.parent))
    assert task_class("my_task:Good").__name__ == "Good"


@pytest.mark.parametrize(
    "spec,message",
    [
        ("{file}:NoEvaluate", "does not satisfy the Task interface (docs/tasks.md): missing evaluate"),
        ("{file}:Missing", "has no class Missing"),
        ("/no/such/task.py:X", "does not exist"),
        ("no_such_module_xyz:X", "could not be imported: ModuleNotFoundError"),
        ("imagenet", "unknown task 'imagenet'"),
    ],
)
def test_a_task_that_cannot_be_used_is_one_line(task_file, tmp_path, spec, message):
    spec = spec.replace("{file}", str(task_file))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_task(RunConfig(task=spec))
    proc = run_cmd([sys.executable, "run.py", "--task", spec, "--no-progress"], timeout=60, env=child_env(tmp_path),
                   expect_rc=2)  # fmt: skip
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_seed_check_and_the_fingerprint_see_what_they_should(task_file):
    assert fairness.weights_follow_the_seed(build_task(RunConfig(task=f"{task_file}:Good", dropout=0.0)))
    assert not fairness.weights_follow_the_seed(build_task(RunConfig(task=f"{task_file}:UnseededWeights")))
    a = build_task(RunConfig(task=f"{task_file}:Good")).datasets()
    b = build_task(RunConfig(task=f"{task_file}:Good", seed=1)).datasets()
    assert fairness.fingerprint(*a) == fairness.fingerprint(*a) != fairness.fingerprint(*b)


def test_synthetic_resnet_is_seeded_random_data_and_says_accuracy_means_nothing():
    task = build_task(RunConfig(task="synthetic-resnet", model="resnet18", image_size=32))
    train, test, info = task.datasets()
    assert torch.equal(train[5][0], train[5][0]) and not torch.equal(train[5][0], train[6][0])
    assert train[5][0].shape == (3, 32, 32) and info["model"] == "resnet18" and task.accuracy_meaningful is False
    with pytest.raises(UserError, match="synthetic-resnet runs one of"):
        build_task(RunConfig(task="synthetic-resnet", model="vgg16"))


# ---- check-task, with the real launchers ------------------------------------------------------------------------


def check_task(task_file, tmp_path, cls: str, backends: str, expect_rc: int):
    return run_cmd([sys.executable, "run.py", "check-task", f"{task_file}:{cls}", "--steps", "8", "--backends",
                    backends], timeout=400, env=child_env(tmp_path), expect_rc=expect_rc)  # fmt: skip


@pytest.mark.multiproc
@pytest.mark.timeout(450)
def test_a_user_task_runs_under_every_backend_and_keeps_the_contract(task_file, tmp_path):
    proc = check_task(task_file, tmp_path, "Good", "ddp,accelerate,horovod", 0)
    print(proc.stdout)
    for backend in ("single x1", "ddp x2", "accelerate x2", "horovod x2"):
        assert f"| {backend} |" in proc.stdout and proc.stdout.split(f"| {backend} |")[1].split("\n")[0].endswith(
            "ok |"
        )
    assert "keeps the contract" in proc.stdout and "200 test samples" in proc.stdout


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "cls,message",
    [
        ("UnseededWeights", "weights do not follow the seed"),
        ("RankDependentData", "ddp x2: data differs between ranks"),
        ("EvalSkipsSamples", "evaluation counted 199 of the 200 test samples"),
    ],
)
def test_a_broken_task_fails_check_task_naming_the_broken_part(task_file, tmp_path, cls, message):
    proc = check_task(task_file, tmp_path, cls, "ddp", 1)
    assert "FAILS the contract" in proc.stderr and message in proc.stderr, proc.stderr[-2000:]


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_synthetic_resnet_under_every_backend(tmp_path):
    """x2 only for the distributed backends (their world-size-1 paths are the MNIST tests'): the synthetic data is
    sharded, and the single run at 1 thread is the x2 runs' reference."""
    out = tmp_path / "sweep"
    run_cmd([sys.executable, "run.py", "compare", "--task", "synthetic-resnet", "--backends",
             "single,ddp,accelerate,horovod", "--nprocs", "2", "--max-steps", "3", "--batch-size", "8", "--extra",
             "--model resnet18 --image-size 32", "--out", str(out)], timeout=560, env=child_env(tmp_path),
            cwd=ROOT)  # fmt: skip
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    done = {(r["backend"], r["world_size"], r["environment"]["threads_per_process"]) for r in records}
    assert done == {("single", 1, 1), ("ddp", 2, 1), ("accelerate", 2, 1), ("horovod", 2, 1)}
    assert all(r["accuracy_meaningful"] is False and r["eval_count"] == 64 for r in records)
    assert all(r["dataset"]["model"] == "resnet18" and len(set(r["data_fingerprints"])) == 1 for r in records)
    assert "n/a: synthetic data" in (out / "report.md").read_text()
