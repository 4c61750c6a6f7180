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


@pytest.mark.parametrize(
    "gpus,local_world_size,placed",
    [
        (0, 2, None),  # no GPU: the CPU, gloo
        (2, 2, [("cuda:0", "nccl"), ("cuda:1", "nccl")]),  # a GPU per process: NCCL
        (1, 2, [("cuda:0", "gloo"), ("cuda:0", "gloo")]),  # two processes share one GPU: gloo (NCCL refuses)
        (2, 4, [("cuda:0", "gloo"), ("cuda:1", "gloo"), ("cuda:0", "gloo"), ("cuda:1", "gloo")]),
    ],
)
def test_gpu_placement(monkeypatch, gpus, local_world_size, placed):
    from distbench.backends.base import gpu_placement

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    got = [gpu_placement(rank, local_world_size) for rank in range(local_world_size)]
    assert got == ([None] * local_world_size if placed is None else [(torch.device(d), c) for d, c in placed])


@pytest.mark.parametrize("backend", DISTRIBUTED)
def test_only_ddp_puts_processes_that_share_a_gpu_on_it_the_others_refuse(monkeypatch, backend):
    """Two processes, one GPU: ddp shares it over gloo (the GPU tier runs it); the other libraries need a GPU per
    process, said in one line before any group is made."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    set_to = []
    monkeypatch.setattr(torch.cuda, "set_device", set_to.append)
    cls = type("Shell", (Backend,), {"name": backend, "shares_a_gpu": REGISTRY[backend].load().shares_a_gpu})
    one = cls(LaunchEnv(TORCHRUN, rank=1, local_rank=1, world_size=2, local_world_size=2))
    if backend == "ddp":
        assert one.place_on_gpu() == "gloo" and one.device == torch.device("cuda", 0) == set_to[0]
        return
    with pytest.raises(UserError, match=f"--backend {backend}: 2 processes on a node with 1 GPU"):
        one.place_on_gpu()
    assert not set_to


PREPARED = """
import torch
from distbench.backends.horovod_backend import HorovodBackend
from distbench.process import LaunchEnv

backend = HorovodBackend(LaunchEnv("python"))
backend.setup()
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
before = [p.detach().clone() for p in model.parameters()]
model, optimizer, _ = backend.prepare(model, optimizer, None)
print(all(torch.equal(a, b) for a, b in zip(before, model.parameters())), len(optimizer.state_dict()["state"]))
backend.teardown()
"""


def test_horovods_prepare_takes_no_step_of_a_fresh_optimizer(tmp_path):
    """Horovod's broadcast_optimizer_state steps a fresh optimizer with zero gradients to make its state: AdamW's
    weights moved by its weight decay, Adam's bias correction a step late (the BERT task's optimizer), which no other
    library does. prepare leaves the weights and the (empty) state as they were; at world size 1, in a process of its
    own (Horovod's global state)."""
    import subprocess
    import sys

    from tests.helpers import ROOT, child_env

    proc = subprocess.run([sys.executable, "-c", PREPARED], cwd=ROOT, env=child_env(tmp_path), capture_output=True)
    assert (proc.returncode, proc.stdout.split()) == (0, [b"True", b"0"]), proc.stderr.decode()[-2000:]


def _rebuilt_buckets(model: torch.nn.Module, kwargs: dict) -> list[int]:
    """The bytes of each bucket DDP rebuilt after its first step (first sent first), at world size 1."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(model, **kwargs)
        for _ in range(3):  # rebuilt in the order the gradients became ready at the second forward, logged at the third
            ddp(torch.ones(1, 1024)).sum().backward()
        sizes = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]  # torch's own account: "2099200, 29388800, ..."
        return [int(s) for s in str(sizes).replace(",", " ").split()]
    finally:
        dist.destroy_process_group()


def test_ddp_keeps_its_1_mib_first_bucket_where_the_cap_is_its_default():
    """bucket_kwargs passes DDP nothing where bucket_cap_mb's choice is DDP's own 25 MB (more than 8 MB of
    gradients), so that the gradients ready first (here the last layer's 2 MB, ResNet-18's classifier) are sent
    alone while backward goes on, as in Accelerate's DDP and a user's DDP(model); torch 2.14 gives the first bucket
    the whole cap once bucket_cap_mb is passed at all, which the ddp and Fabric backends did: the last layer then
    waited for 25 MB of others. A small model gets its 1 MB buckets passed."""
    from distbench.backends.ddp import bucket_kwargs

    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 1024) for _ in range(10)] + [torch.nn.Linear(1024, 512)]  # 44 MB of gradients
    model = torch.nn.Sequential(*layers)
    kwargs = bucket_kwargs(torch.device("cpu"), model)
    assert kwargs == {} and bucket_kwargs(torch.device("cuda"), model) == {}
    buckets = _rebuilt_buckets(model, kwargs)
    assert buckets[0] == (1024 * 512 + 512) * 4 and sum(buckets) == sum(p.numel() * 4 for p in model.parameters())
    if hasattr(torch.nn.parallel.distributed, "_BucketCapacityConfig"):  # torch 2.14's rule (not the GPU's 2.11)
        passed = _rebuilt_buckets(model, {"bucket_cap_mb": 25.0})  # what the backends passed before
        assert passed[0] > 25 * 2**20  # the last layer's gradients waited for 25 MB of others
    assert bucket_kwargs(torch.device("cpu"), torch.nn.Linear(100, 100)) == {"bucket_cap_mb": 1.0}
