"""Lightning Fabric with its DDP strategy: `Fabric(...)`, `setup`, `backward`, `no_backward_sync`, `clip_gradients`.

Started by `fabric run` (Fabric's own launcher: torchrun's agent), torchrun, srun (Fabric reads Slurm's variables
itself) or plain python (one process). Fabric's FSDP strategy is not offered: Fabric refuses it without a GPU
("FSDP is only available on GPU", lightning_fabric/connector.py), so no run here could check it.
"""

from __future__ import annotations

import warnings
from datetime import timedelta

import torch
from torch import nn

from distbench.backends.base import Backend, ReduceOp
from distbench.backends.ddp import NO_BUFFER_SYNC, bucket_kwargs
from distbench.process import FABRIC
from distbench.torchelastic import init_process_group, under_agent_store

try:
    from lightning_fabric import Fabric
    from lightning_fabric.strategies import DDPStrategy
except ImportError as e:  # pragma: no cover - exercised only where lightning-fabric is missing
    from distbench.errors import BackendUnavailable

    raise BackendUnavailable(f"--backend fabric needs Lightning Fabric: pip install lightning-fabric ({e})") from e


# Fabric: 2.6's all_gather calls torch.distributed.nn.functional.all_gather, which torch 2.14 deprecates, on every rank
warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_gather is deprecated")


class FabricBackend(Backend):
    name = "fabric"

    def setup(self) -> None:
        cuda = torch.cuda.is_available()
        collective = self.place_on_gpu()  # Fabric: a GPU per process (it refuses more devices than the node has)
        if under_agent_store():
            # fabric run / torchrun: the group is made on a key namespace of this round's own, so that a restart is
            # clean (distbench/torchelastic.py); Fabric keeps a group that exists
            init_process_group(collective, timedelta(seconds=self.timeout_s))
        # DDP's settings as the ddp backend's (the bucket size in prepare(), when the model is known)
        self._strategy = DDPStrategy(
            process_group_backend="nccl" if cuda else "gloo",
            timeout=timedelta(seconds=self.timeout_s),
            gradient_as_bucket_view=True,
            **NO_BUFFER_SYNC,
        )
        self.fabric = Fabric(
            accelerator="cuda" if cuda else "cpu",
            devices=self.launch.local_world_size,
            num_nodes=self.launch.nodes,
            strategy=self._strategy,
            precision="bf16-mixed" if self.precision == "bf16" else "32-true",
        )
        if self.launch.launcher != FABRIC:
            # Fabric: under `fabric run` the Fabric object has joined the group already, and launch() is refused;
            # otherwise launch() joins it (the processes exist: torchrun's, srun's, or this one alone)
            self.fabric.launch()
        fabric = self.fabric
        self.rank, self.world_size, self.local_rank, self.device = (
            fabric.global_rank,
            fabric.world_size,
            fabric.local_rank,
            fabric.device,
        )

    def teardown(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    # train_loader is the base one, not passed to setup_dataloaders: Fabric's loader calls set_epoch on the batch
    # sampler with its own count of iterations at every iter(), which would undo a resume's start step; the batches
    # are moved to the device by the loop, as Fabric's loader would.

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        # Fabric: its DDPStrategy hands the keyword arguments it was made with to DistributedDataParallel when it
        # wraps the model, here; the bucket size depends on the model, so it is added now (no public setter)
        self._strategy._ddp_kwargs.update(bucket_kwargs(self.device, model))
        model, optimizer = self.fabric.setup(model, optimizer)
        return model, optimizer, train_loader

    def schedulable(self, optimizer):
        return optimizer.optimizer  # Fabric: the torch optimizer inside its _FabricOptimizer

    def memory_held(self, model: nn.Module, optimizer) -> dict[str, int]:
        return super().memory_held(model, optimizer.optimizer)

    def optimizer_state_dict(self, model: nn.Module, optimizer) -> dict:
        return optimizer.optimizer.state_dict()

    def load_optimizer_state_dict(self, model: nn.Module, optimizer, state: dict) -> None:
        optimizer.optimizer.load_state_dict(state)

    def accumulation(self, model: nn.Module, sync: bool):
        # Fabric: no_backward_sync (DDP's no_sync) around the forward and backward of all but the last micro-batch
        return self.fabric.no_backward_sync(model, enabled=not sync)

    def backward(self, loss: torch.Tensor) -> None:
        # Fabric: backward() does not scale the loss for accumulation; its users divide it, as here
        self.fabric.backward(loss / self.accumulate if self.accumulate > 1 else loss)

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        if max_grad_norm is not None:
            self.fabric.clip_gradients(model, optimizer, max_norm=max_grad_norm)
        optimizer.step()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)  # Fabric: _FabricModule.module is the user's model

    def autocast(self):
        # Fabric: its module's forward runs under its precision's autocast already; this covers the loss as well
        return self.fabric.autocast() if self.precision == "bf16" else super().autocast()

    def _all_reduce(self, t: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        # Fabric: "avg" on gloo is its sum divided by the world size; all_reduce works in place, so on a copy
        return self.fabric.all_reduce(t.clone(), reduce_op=op.value)

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        # Fabric: its gradients go through the DDP it wraps the model in; its own collective, all_reduce, reduces the
        # tensor in place: timed here as Fabric's all-reduce
        if self.world_size > 1:
            self.fabric.all_reduce(t, reduce_op="sum")

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t.unsqueeze(0)  # Fabric: adds no dimension at world size 1
        return self.fabric.all_gather(t)

    def barrier(self) -> None:
        if self.world_size > 1:
            self.fabric.barrier()

    # main_process_first is the base one: Fabric's rank_zero_first waits on a group with no timeout
    # (_InfiniteBarrier), where a dead rank would hang the others; the base waits as long as --timeout
