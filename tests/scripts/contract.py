"""The backend contract, checked on every rank of a real launch (after Accelerate's test_utils/scripts).

    torchrun --nproc_per_node 2 -m tests.scripts.contract --backend ddp
    accelerate launch --multi_gpu --num_processes 2 ... -m tests.scripts.contract --backend accelerate
    horovodrun -np 2 python -m tests.scripts.contract --backend horovod
    torchrun --nproc_per_node 2 -m tests.scripts.contract --backend fsdp
    fabric run --devices 2 run.py -- -m tests.scripts.contract --backend fabric

Each `check_*` asserts on its own rank; a failed check raises, the launcher reports the failure, and the
pytest test (tests/multiproc/test_contract.py) fails with the captured output. The main process prints
"contract ok" when every rank passed every check.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import Dataset

from distbench import leave, process
from distbench.backends import get_spec
from distbench.backends.base import Backend, ReduceOp
from distbench.launching.commands import check_launch
from distbench.sharding import GlobalBatchSampler
from distbench.training import rng

N_SAMPLES, GLOBAL_BATCH, SEED, STEPS = 96, 8, 3, 4


def check_all_reduce(backend: Backend) -> None:
    r = backend.rank + 1
    t = torch.tensor([float(r), -float(r), 10.0 * r])
    w = backend.world_size
    ranks = [float(i + 1) for i in range(w)]
    expected = {
        ReduceOp.SUM: [sum(ranks), -sum(ranks), 10 * sum(ranks)],
        ReduceOp.AVG: [sum(ranks) / w, -sum(ranks) / w, 10 * sum(ranks) / w],
        ReduceOp.MAX: [max(ranks), -min(ranks), 10 * max(ranks)],
        ReduceOp.MIN: [min(ranks), -max(ranks), 10 * min(ranks)],
    }
    for op, want in expected.items():
        got = backend.all_reduce(t, op)
        assert torch.allclose(got, torch.tensor(want)), f"rank {backend.rank}: all_reduce {op.value} gave {got}"
        assert t.tolist() == [float(r), -float(r), 10.0 * r], f"all_reduce {op.value} changed its input"
    try:
        backend.all_reduce(t, "median")
    except ValueError:
        pass
    else:
        raise AssertionError("an unknown reduce op was accepted")


def check_all_gather(backend: Backend) -> None:
    got = backend.all_gather(torch.tensor([backend.rank, 10 * backend.rank]))
    want = torch.tensor([[i, 10 * i] for i in range(backend.world_size)])
    assert torch.equal(got, want), f"rank {backend.rank}: all_gather gave {got.tolist()}, not in rank order"


class Indexed(Dataset):
    """Sample i is (features of i, i), so a batch says which samples it holds."""

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(4, generator=g), i


def collate(samples):
    return torch.stack([x for x, _ in samples]), torch.tensor([i for _, i in samples])


def check_batches_are_slices_of_the_global_batch(backend: Backend, batches: list) -> None:
    order = GlobalBatchSampler(N_SAMPLES, GLOBAL_BATCH, 0, 1, SEED)  # the global batches, world size 1
    per_rank = GLOBAL_BATCH // backend.world_size
    assert len(batches) == STEPS, f"rank {backend.rank}: {len(batches)} batches, expected {STEPS}"
    for step, (global_batch, (_, ids)) in enumerate(zip(order, batches, strict=False)):
        mine = global_batch[backend.rank * per_rank : (backend.rank + 1) * per_rank]
        assert ids.tolist() == mine, f"rank {backend.rank}, step {step}: batch {ids.tolist()}, expected {mine}"


def reference_weights() -> torch.Tensor:
    """The same steps in one process on the whole global batches: what every rank must end with."""
    torch.manual_seed(SEED)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = Indexed()
    for step, ids in enumerate(GlobalBatchSampler(N_SAMPLES, GLOBAL_BATCH, 0, 1, SEED)):
        if step == STEPS:
            break
        x, _ = collate([data[i] for i in ids])
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train_a_few_steps(backend: Backend) -> tuple[nn.Module, list]:
    torch.manual_seed(SEED)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = backend.train_loader(Indexed(), collate, GLOBAL_BATCH, SEED)
    model, optimizer, loader = backend.prepare(model, optimizer, loader)
    backend.set_epoch(0)
    batches = []
    for step, (x, ids) in enumerate(loader):
        if step == STEPS:
            break
        batches.append((x, ids))
        optimizer.zero_grad()
        backend.backward(model(x.to(backend.device)).pow(2).mean())
        backend.optimizer_step(model, optimizer, max_grad_norm=None)
    return model, batches


def check_parameters_agree(backend: Backend, model: nn.Module) -> None:
    # a sharded parameter (fsdp's DTensor) is compared whole: full_tensor() all-gathers its shards
    whole = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in backend.unwrap(model).parameters()]
    mine = torch.cat([p.detach().flatten() for p in whole]).cpu()
    everyone = backend.all_gather(mine.to(backend.device)).cpu()
    for r, theirs in enumerate(everyone):
        assert torch.equal(theirs, mine), f"rank {backend.rank}: parameters differ from rank {r}'s"
    ref = reference_weights()
    assert torch.allclose(mine, ref, atol=1e-6), f"rank {backend.rank}: {mine.tolist()} != one process {ref.tolist()}"


def check_rng_restored_after_resume(backend: Backend) -> None:
    torch.manual_seed(SEED + 1 + backend.rank)  # the loop's per-rank dropout stream
    saved = rng.gather(backend.all_gather, backend.device)  # what a checkpoint holds
    before = torch.rand(5, device=backend.device)
    torch.rand(100)  # the run goes on, then dies
    rng.restore_rank(saved, backend.rank, backend.device)  # a resumed run
    after = torch.rand(5, device=backend.device)
    assert torch.equal(before, after), f"rank {backend.rank}: the restored generator draws other numbers"
    draws = backend.all_gather(after)
    assert backend.world_size == 1 or not torch.equal(draws[0], draws[1]), "ranks share one dropout stream"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    name = parser.parse_args().backend
    torch.set_num_threads(1)
    launch_env = process.current()
    spec = get_spec(name)
    check_launch(name, launch_env)
    backend = spec.load()(launch_env, timeout_s=120)
    backend.setup()
    assert (backend.rank, backend.world_size) == (launch_env.rank, launch_env.world_size), "launch env disagrees"
    check_all_reduce(backend)
    check_all_gather(backend)
    model, batches = train_a_few_steps(backend)
    check_batches_are_slices_of_the_global_batch(backend, batches)
    check_parameters_agree(backend, model)
    check_rng_restored_after_resume(backend)
    backend.barrier()
    if backend.is_main:
        print(f"contract ok: {name} x{backend.world_size} under {launch_env.launcher}", flush=True)
    backend.teardown()


if __name__ == "__main__":
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
