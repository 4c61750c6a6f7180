"""HuggingFace Accelerate: `Accelerator()`, `prepare`, `backward`, `wait_for_everyone`.

Started by plain python (one process), `accelerate launch --multi_gpu --num_processes N` or torchrun.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import torch
from torch import nn
from torch.utils.data import DataLoader

from distbench.backends.base import Backend, ReduceOp
from distbench.backends.ddp import bucket_cap_mb
from distbench.process import LOOPBACK, PYTHON
from distbench.sharding import GlobalBatchSampler
from distbench.torchelastic import init_process_group, under_agent_store

try:
    from accelerate import (
        Accelerator,
        DataLoaderConfiguration,
        DistributedDataParallelKwargs,
        InitProcessGroupKwargs,
    )
    from accelerate.utils import DDPCommunicationHookType, GradientAccumulationPlugin
except ImportError as e:  # pragma: no cover - exercised only where accelerate is missing
    from distbench.errors import BackendUnavailable

    raise BackendUnavailable(f"--backend accelerate needs the accelerate package: pip install accelerate ({e})") from e


_COMM_HOOKS = {
    "none": DDPCommunicationHookType.NO,
    "fp16": DDPCommunicationHookType.FP16,
    "bf16": DDPCommunicationHookType.BF16,
}


class AccelerateBackend(Backend):
    name = "accelerate"

    def setup(self) -> None:
        if self.launch.launcher != PYTHON:
            os.environ.setdefault("MASTER_ADDR", LOOPBACK)
        # Accelerate: a GPU per process (it wraps DDP with device_ids=[local_process_index]); on it before the group
        collective = self.place_on_gpu()
        if under_agent_store():
            # torchrun / accelerate launch: the group is made on a key namespace of this round's own, so
            # that a restart is clean (distbench/torchelastic.py); Accelerate keeps a group that exists.
            init_process_group(collective, timedelta(seconds=self.timeout_s))
        # Accelerate wraps the model in DDP: the same bucket settings as the ddp backend (the size is set in
        # prepare(), when the model is known).
        # Accelerate: --grad-compression is its DDP kwargs' comm_hook (the same torch hooks as the ddp backend)
        self._ddp_kwargs = DistributedDataParallelKwargs(
            gradient_as_bucket_view=True, comm_hook=_COMM_HOOKS[self.grad_compression]
        )
        self.before_accelerator()
        self.accelerator = Accelerator(
            **self.plugins(),
            # Accelerate: --accumulate is its gradient accumulation; the step count alone decides when to sync
            # (the loop always runs exactly `accumulate` micro-batches per step, also at an epoch's end).
            gradient_accumulation_plugin=GradientAccumulationPlugin(
                num_steps=self.accumulate, sync_with_dataloader=False
            ),
            # Accelerate: the loader's batch is the *global* batch and each process takes its slice,
            # which is exactly distbench's global-batch semantics (see distbench/sharding.py).
            # Accelerate: its prepared loader moves each batch to the device itself, blocking unless told otherwise
            dataloader_config=DataLoaderConfiguration(split_batches=True, non_blocking=self.pin_memory),
            mixed_precision="bf16" if self.precision == "bf16" else "no",
            # Accelerate: without a GPU, only cpu=True makes a multi-process launch a gloo group
            # (otherwise every process silently runs alone with world size 1).
            cpu=self.cpu_mode(),
            kwargs_handlers=[
                InitProcessGroupKwargs(timeout=timedelta(seconds=self.timeout_s)),
                self._ddp_kwargs,
            ],
        )
        acc = self.accelerator
        self.after_accelerator()
        self.rank, self.world_size = acc.process_index, acc.num_processes
        self.local_rank, self.device = acc.local_process_index, acc.device

    def plugins(self) -> dict:
        """Further Accelerator arguments of a configuration of this backend (accelerate-fsdp's plugin)."""
        return {}

    def cpu_mode(self) -> bool:
        """Accelerator(cpu=...): on a machine without a GPU, its CPU mode (a gloo group)."""
        return not torch.cuda.is_available()

    def before_accelerator(self) -> None:
        """What a configuration of this backend sets up before the Accelerator is made."""

    def after_accelerator(self) -> None:
        """What a configuration of this backend sets once the Accelerator exists."""

    def teardown(self) -> None:
        acc = getattr(self, "accelerator", None)
        if acc is not None:
            acc.end_training()
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()

    def train_loader(self, dataset, collate, global_batch: int, seed: int) -> DataLoader:
        # Accelerate: hand it the loader of *global* batches (the rank-0-of-1 view); `prepare` shards
        # it. Adding our own per-rank sharding as well would shard twice.
        self._train_sampler = GlobalBatchSampler(len(dataset), global_batch, 0, 1, seed)
        return self.loader(dataset, collate, self._train_sampler)

    # eval_loader is the base one: Accelerate's prepared loaders pad the last batch with duplicates
    # (even_batches), so the test set is sharded by distbench and the sums are all-reduced instead.

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        # Accelerate: reads its DDP kwargs handler when it wraps the model, here; the handler passes DDP only what
        # differs from its defaults, so DDP's own 25 MB is passed as nothing, as the ddp backend's bucket_kwargs does
        self._ddp_kwargs.bucket_cap_mb = bucket_cap_mb(self.device, model)
        model, optimizer, train_loader = self.accelerator.prepare(model, optimizer, train_loader)
        return model, optimizer, train_loader

    @contextlib.contextmanager
    def accumulation(self, model: nn.Module, sync: bool):
        # Accelerate: accumulate() counts micro-batches itself and uses DDP's no_sync on all but the last one
        with self.accelerator.accumulate(model):
            if self.accelerator.sync_gradients != sync:
                raise RuntimeError(f"Accelerate's accumulation count is out of step with distbench's ({sync=})")
            yield

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)  # Accelerate: divides the loss by gradient_accumulation_steps itself

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        if max_grad_norm is not None:
            # Accelerate: its clip_grad_norm_ unscales mixed-precision gradients first.
            self.accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return self.accelerator.unwrap_model(model)

    def autocast(self):
        if self.precision == "bf16":
            return self.accelerator.autocast()
        return contextlib.nullcontext()

    def _all_reduce(self, t: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        if op in (ReduceOp.SUM, ReduceOp.AVG):
            return self.accelerator.reduce(t.clone(), reduction="sum" if op is ReduceOp.SUM else "mean")
        # Accelerate: reduce() knows only sum and mean; max and min come from everyone's copy
        gathered = self.accelerator.gather(t.reshape(1, -1))
        return (gathered.amax(dim=0) if op is ReduceOp.MAX else gathered.amin(dim=0)).reshape(t.shape)

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        # Accelerate: its gradients go through the DDP it wraps the model in; its own collective, reduce(), copies
        # the tensor first and all-reduces the copy: timed here as Accelerate's all-reduce
        if self.world_size > 1:
            self.accelerator.reduce(t, reduction="sum")

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        return self.accelerator.gather(t.unsqueeze(0))  # Accelerate: concatenates along dim 0

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    @contextlib.contextmanager
    def main_process_first(self):
        with self.accelerator.main_process_first():
            yield
