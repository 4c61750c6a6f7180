"""The Backend interface: everything that differs between data-parallel libraries lives behind it.

A backend owns process setup, sharding, wrapping, collectives, rank-0 gating and teardown. The
training loop (distbench/training/loop.py) talks only to this interface; tasks never see it. Which launchers may
start a backend is said in its registry entry (backends/__init__.py), not here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from distbench.errors import UserError
from distbench.process import LaunchEnv
from distbench.sharding import EvalShardSampler, GlobalBatchSampler


class ReduceOp(str, Enum):
    """The reductions every backend's all_reduce supports, with the same result in each."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"


T = TypeVar("T")


class Progress(Protocol):
    """What a library that continues in the processes that survive a failure (Horovod Elastic) keeps and gives back:
    the trainer's place in the run beside the model and optimizer (training/loop.Trainer)."""

    def snapshot(self) -> dict:
        """The place to roll back to (a collective: every rank calls it at the same step)."""

    def resume(self, place: dict) -> None:
        """Continue from `place` (a snapshot): at each attempt's start, after a rollback or a resize."""

    def noticed(self, error: BaseException) -> None:
        """A collective failed: a peer is gone or silent."""


# the dtype each 16-bit name means (--grad-compression fp16/bf16, --precision bf16)
SIXTEEN_BIT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def gpu_placement(local_rank: int, local_world_size: int) -> tuple[torch.device, str] | None:
    """A process's GPU and its group's collective library (None without a GPU): a GPU per process over NCCL; where a
    node has fewer GPUs than processes, process i on GPU i mod n, over gloo, since NCCL refuses two processes on one
    GPU (torch.distributed: each process must have exclusive access to every GPU it uses)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        return None
    return torch.device("cuda", local_rank % gpus), "gloo" if local_world_size > gpus else "nccl"


def _own_generator() -> torch.Generator:
    """Each DataLoader iterator draws a seed from its generator; a private one keeps that draw off the
    global RNG, so evaluating mid-run (or not) cannot shift the dropout masks of training."""
    return torch.Generator().manual_seed(0)


class Backend:
    """Base class with the world-size-1 behaviour; each library overrides what it does differently.

    Attributes set by `setup()`: rank, world_size, local_rank, device. `is_main` is the one flag for
    "this process logs, writes results and checkpoints".
    """

    name: ClassVar[str] = "base"
    # True where every forward is a collective (a sharding library all-gathers the parameters): evaluation then runs
    # the same number of forwards on every rank (training/loop.evaluate)
    forward_is_collective: ClassVar[bool] = False
    # The name of the library's own checkpoint where the library writes one (every rank its part of the model and
    # optimizer); None: the loop keeps them as whole tensors in checkpoint.pt (model_state_dict and the rest below)
    own_checkpoint: ClassVar[str | None] = None
    # Whether a node's processes may share its GPUs over gloo where it has fewer GPUs than processes (place_on_gpu);
    # the other libraries need a GPU per process
    shares_a_gpu: ClassVar[bool] = False

    @property
    def joins_under_way(self) -> bool:
        """Whether a process of this job may start while the others train (Horovod Elastic's new worker on a host that
        comes back): then it makes no collective before run_training, where the library's own sync is its first
        (main_process_first, prepare and the start's busy check make none)."""
        return False

    def __init__(
        self,
        launch: LaunchEnv,
        precision: str = "fp32",
        timeout_s: int = 300,
        accumulate: int = 1,
        grad_compression: str = "none",
        zero_stage: int = 0,
        max_grad_norm: float | None = None,
        loader_workers: int = 0,
        resumes_from: int | None = None,
    ):
        """A backend for the process that `launch` describes (read before any setup): `precision` fp32 or bf16
        (autocast), `timeout_s` how long a collective waits for a missing rank, `accumulate` micro-batches per
        optimizer step, `grad_compression` the gradients' type on the wire (none, fp16, bf16), `resumes_from` the
        world size that wrote the checkpoint this run resumes from (None: it starts afresh). Nothing starts before
        `setup()`."""
        self.launch = launch
        self.precision = precision
        self.timeout_s = timeout_s
        self.accumulate = accumulate  # micro-batches per optimizer step
        self.grad_compression = grad_compression  # none, fp16, bf16: the gradients' type on the wire
        self.zero_stage = zero_stage  # DeepSpeed's ZeRO stage (the registry refuses it for the other backends)
        self.max_grad_norm = max_grad_norm  # for a library that configures clipping once (DeepSpeed's config)
        self.loader_workers = loader_workers  # each loader's worker processes (0: this process loads)
        self.resumes_from = resumes_from  # for a library told at set-up how it will load a checkpoint (DeepSpeed's)
        self.rank, self.world_size, self.local_rank = 0, 1, 0
        self.device = torch.device("cpu")
        self._train_sampler: GlobalBatchSampler | None = None
        self._eval_sampler: EvalShardSampler | None = None

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0: the one that logs, writes results and checkpoints."""
        return self.rank == 0

    # ---- lifecycle -------------------------------------------------------------------------
    def setup(self) -> None:
        """Join the process group (or start the library); sets rank, world_size, device."""

    def teardown(self) -> None:
        """Leave the process group; safe to call after a failed setup."""

    def run_training(self, train: Callable[[], T], model: nn.Module, optimizer, progress: Progress) -> T:
        """Run `train` (the loop, from the trainer's step to the end). Here a failed collective ends the processes,
        and a launcher that restarts them (torchrun's agent) resumes from the last checkpoint. A library that
        continues in the processes that survive (Horovod Elastic) rolls back to its last `commit` and runs `train`
        again, at the size the job has then."""
        return train()

    def commit(self) -> None:
        """Keep the state that a rollback returns to (every --commit-every steps); nothing where there is none."""

    def resized(self, now: LaunchEnv) -> None:
        """After the world changed size in these processes (an elastic library's survivors): this rank's place in it
        (`now`: the ranks, sizes and nodes as the library numbers them now), and its share of each global batch and
        of the test set (the global batch is kept: every step averages the gradient of the same samples as before,
        split across fewer ranks)."""
        self.launch = now
        self.rank, self.world_size, self.local_rank = now.rank, now.world_size, now.local_rank
        for sampler in (self._train_sampler, self._eval_sampler):
            if sampler is not None:
                sampler.resplit(now.rank, now.world_size)

    def place_on_gpu(self) -> str:
        """Put this process on its GPU, where there is one, before its process group is made (torch.cuda.set_device,
        as NCCL asks), and return the collective library for the group: gpu_placement's."""
        placed = gpu_placement(self.launch.local_rank, self.launch.local_world_size)
        if placed is None:
            return "gloo"
        device, collective = placed
        if collective == "gloo" and not self.shares_a_gpu:
            raise UserError(
                f"--backend {self.name}: {self.launch.local_world_size} processes on a node with "
                f"{torch.cuda.device_count()} GPU(s): {self.name} needs a GPU per process; ddp runs processes that "
                "share a GPU (over gloo)"
            )
        self.device = device
        torch.cuda.set_device(device)
        return collective

    # ---- data ------------------------------------------------------------------------------
    @property
    def pin_memory(self) -> bool:
        """Whether the loaders pin their batches in page-locked host memory: on a GPU, so that the loop's
        non-blocking copies to the device are asynchronous (from pageable memory a copy blocks the host); on a CPU
        there is no copy."""
        return self.device.type == "cuda"

    def train_loader(self, dataset: Dataset, collate: Callable, global_batch: int, seed: int) -> DataLoader:
        """This rank's loader over one seeded global order, global_batch / world samples per step."""
        self._train_sampler = GlobalBatchSampler(len(dataset), global_batch, self.rank, self.world_size, seed)
        return self.loader(dataset, collate, self._train_sampler)

    def eval_loader(self, dataset: Dataset, collate: Callable, batch_size: int) -> DataLoader:
        """This rank's strided share of the test set: every sample evaluated exactly once overall."""
        self._eval_sampler = EvalShardSampler(len(dataset), batch_size, self.rank, self.world_size)
        return self.loader(dataset, collate, self._eval_sampler)

    def loader(self, dataset: Dataset, collate: Callable, batches) -> DataLoader:
        """A loader of the batches a batch sampler draws, on its own generator, pinned where the device wants it,
        loaded by `loader_workers` processes kept for the whole run (the batches and their order are the same: the
        sampler runs here, the workers only fetch and collate)."""
        workers = self.loader_workers
        return DataLoader(
            dataset,
            batch_sampler=batches,
            collate_fn=collate,
            generator=_own_generator(),
            pin_memory=self.pin_memory,
            num_workers=workers,
            persistent_workers=workers > 0,
        )

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """Start the train loader's `epoch` (its own seeded order) at global step `start_step` of it (a resume)."""
        assert self._train_sampler is not None, "train_loader() first"
        self._train_sampler.set_epoch(epoch, start_step)

    @property
    def steps_per_epoch(self) -> int:
        """Whole global batches per epoch (the last partial one is dropped); after `train_loader()`."""
        assert self._train_sampler is not None, "train_loader() first"
        s = self._train_sampler
        return s.n // s.global_batch_size

    # ---- model -----------------------------------------------------------------------------
    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, train_loader: DataLoader, shard_units=()
    ) -> tuple:
        """Wrap what the library wraps; returns (model, optimizer, train_loader). `shard_units` are the task's
        submodules that a sharding library shards one by one (Task.shard_units); a replicating one ignores them."""
        return model.to(self.device), optimizer, train_loader

    def schedulable(self, optimizer):
        """The torch optimizer a task's learning-rate scheduler is built over (Task.build_scheduler): `prepare`'s."""
        return optimizer

    def memory_held(self, model: nn.Module, optimizer) -> dict[str, int]:
        """This rank's bytes of parameters, gradients and optimizer state (training/memory.py): read from the
        parameters, their gradients and the optimizer's state, where the library keeps them all there."""
        from distbench.backends.held import held

        return held(model, optimizer)

    # ---- checkpoints: whole tensors, one form for every backend (a collective where the state is sharded) -----
    def model_state_dict(self, model: nn.Module) -> dict:
        """The model's whole state, as the plain model's `state_dict()` (gathered where the library shards it)."""
        return self.unwrap(model).state_dict()

    def load_model_state_dict(self, model: nn.Module, state: dict) -> None:
        """Load a whole state written by `model_state_dict` (into each rank's shard where the library shards it)."""
        self.unwrap(model).load_state_dict(state)

    def optimizer_state_dict(self, model: nn.Module, optimizer) -> dict:
        """`optimizer.state_dict()`'s form: state keyed by the parameter's index over the groups in order."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, model: nn.Module, optimizer, state: dict) -> None:
        """Load a state written by `optimizer_state_dict`, in that form."""
        optimizer.load_state_dict(state)

    def save_own_checkpoint(self, model: nn.Module, folder: Path, tag: str) -> str | None:
        """Where `own_checkpoint` is set: write the library's checkpoint of the model and optimizer under `folder` as
        `tag` (every rank calls it; all of it is written when it returns). Returns None where the library can resume it
        at another world size, else why it cannot (kept in checkpoint.pt: training/checkpoint.check_library)."""
        raise NotImplementedError(f"the {self.name} backend keeps whole tensors (own_checkpoint is None)")

    def load_own_checkpoint(self, model: nn.Module, folder: Path, tag: str) -> None:
        """Where `own_checkpoint` is set: load what `save_own_checkpoint` wrote as `tag` with `resumes_from`
        processes, at this world size (every rank calls it)."""
        raise NotImplementedError(f"the {self.name} backend keeps whole tensors (own_checkpoint is None)")

    def accumulation(self, model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
        """The context of one micro-batch's forward and backward; `sync` is True for the last micro-batch of an
        optimizer step, the one whose backward exchanges the gradients. No exchange here: nothing to skip."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's mean loss, scaled by 1/accumulate so that the K accumulated gradients
        add up to the gradient of the whole batch's mean loss."""
        (loss / self.accumulate if self.accumulate > 1 else loss).backward()

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        """Clip the (already averaged) gradients to max_grad_norm when given, then step."""
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's model inside what `prepare` wrapped it in."""
        return model

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when asked for; implemented once here so every backend honours it."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ---- collectives (return early at world size 1) ------------------------------------------
    def all_reduce(self, t: torch.Tensor, op: ReduceOp = ReduceOp.SUM) -> torch.Tensor:
        """The reduction of `t` over every rank (a new tensor on every rank; `t` is left as it is)."""
        op = ReduceOp(op)  # one error for an unknown op, in every backend
        if self.world_size == 1:
            return t.clone()
        return self._all_reduce(t, op)

    def _all_reduce(self, t: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} runs at world size {self.world_size}: implement _all_reduce")

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        """Sum `t` over every rank with the call the library uses for gradients, as it uses it (in place, or into
        a copy where the library makes one): what `run.py commbench` times. Nothing to exchange at world size 1."""
        if self.world_size > 1:
            raise NotImplementedError(f"{type(self).__name__}: implement gradient_all_reduce")

    def parameter_all_gather(self, flat: torch.Tensor, part: torch.Tensor) -> None:
        """Gather every rank's `part` (its 1/W of `flat`, in rank order) into `flat` with the call the library uses
        for updated parameters after a sharded optimizer's step (DeepSpeed's ZeRO-1 and 2): what `run.py commbench`
        times beside the gradients' all-reduce, for the libraries that have one."""
        raise NotImplementedError(f"{type(self).__name__} has no parameter all-gather of its own")

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's `t`, stacked along a new first dimension in rank order."""
        return t.unsqueeze(0)

    def barrier(self) -> None:
        """Wait until every rank reaches this point; nothing to wait for at world size 1."""

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Let the main process do a side effect (download, cache) before the others read it."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()
