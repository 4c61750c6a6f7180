"""The Backend interface at world size 1 (backends/base.py) and the registry (backends/__init__.py)."""

import pytest
import torch

from distbench.backends import ALL_REDUCING, DISTRIBUTED, NAMES, REFERENCE, REGISTRY, SHARDING
from distbench.backends.base import Backend, ReduceOp
from distbench.backends.single import SingleBackend
from distbench.config import RunConfig
from distbench.errors import UserError
from distbench.launching.commands import command
from distbench.process import ACCELERATE, DEEPSPEED, FABRIC, HOROVODRUN, PYTHON, TORCHRUN, LaunchEnv


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


def test_the_registry_is_the_one_list_of_backends():
    assert NAMES == (
        "single",
        "ddp",
        "accelerate",
        "horovod",
        "fsdp",
        "accelerate-fsdp",
        "deepspeed",
        "accelerate-deepspeed",
        "fabric",
    )
    from distbench.cli.declared import backend_choices

    assert [b.value for b in backend_choices()] == list(NAMES)  # the CLI's --backend choices
    assert (REFERENCE, DISTRIBUTED) == ("single", NAMES[1:])
    assert (ALL_REDUCING, SHARDING) == (("ddp", "accelerate", "horovod", "fabric"), ("fsdp", "accelerate-fsdp"))
    usual = [PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, TORCHRUN, ACCELERATE, DEEPSPEED, ACCELERATE, FABRIC]
    assert [REGISTRY[n].launchers[0] for n in NAMES] == usual
    with pytest.raises(UserError, match="unknown backend 'mpi'"):
        command("mpi", 2, [])
