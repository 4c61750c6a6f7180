"""Native PyTorch DistributedDataParallel, started by torchrun (or as one process by plain python)."""

from __future__ import annotations

import contextlib
import inspect
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distbench.backends.base import Backend, ReduceOp
from distbench.errors import UserError
from distbench.process import PYTHON, SRUN, world_of_one
from distbench.torchelastic import init_process_group

# DDP: gloo has no AVG; it is a SUM divided by the world size (the same result as NCCL's AVG).
_OPS = {
    ReduceOp.SUM: dist.ReduceOp.SUM,
    ReduceOp.AVG: dist.ReduceOp.SUM,
    ReduceOp.MAX: dist.ReduceOp.MAX,
    ReduceOp.MIN: dist.ReduceOp.MIN,
}


SMALL_MODEL_MB = 8.0  # gradients up to this size count as a small model (the MNIST ConvNet: 1.2 MB)
DEFAULT_CAP_MB = 25.0  # DistributedDataParallel's own bucket_cap_mb


def bucket_cap_mb(device: torch.device, model: nn.Module) -> float:
    """DDP's gradient bucket size, the one place it is chosen (the ddp, Accelerate and Fabric backends, the scaling
    benchmark; passed to DDP by bucket_kwargs). On CPU/gloo, a small model gets 1 MB buckets, so that the all-reduce
    of the first gradients ready (the classifier layers) overlaps the rest of backward; with the default 25 MB the
    MNIST ConvNet's gradients form one bucket sent after backward (DDP's rebuilt buckets at x2,
    `_get_ddp_logging_data`: 1 MB gives 1,182,504 + 19,200 bytes, 25 MB one of 1,201,704; measured here: +3 to +9 %
    samples/s at world size 2, docs/performance.md). A larger model (BERT's 87 MB) keeps the default 25 MB: 1 MB
    buckets make it about 90 all-reduces per step, each with gloo's fixed cost; measured here, ddp x2, the BERT
    recipe, 25 steps, three A/B pairs: 25 MB ran at 1.06x the samples/s of 1 MB (per pair 1.16, 0.95, 1.06;
    docs/performance.md). On GPU, NCCL's default (25 MB) stays."""
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return bucket_cap_mb_for(device.type, grad_bytes)


def bucket_kwargs(device: torch.device, model: nn.Module) -> dict:
    """DistributedDataParallel's bucket arguments for bucket_cap_mb's choice: none where it is DDP's default, so that
    DDP keeps its 1 MiB first bucket (the gradients ready first, sent while backward goes on), as a user's
    `DDP(model)` does and as Accelerate's kwargs handler leaves it (it passes only values that differ from the
    default). # DDP: torch 2.14 gives the first bucket the whole cap once bucket_cap_mb is passed at all, 25 included
    (_BucketCapacityConfig); passed, ResNet-18's rebuilt buckets were 29.5 + 15.1 MiB where Accelerate's were 2.0 +
    27.5 + 15.1, and ddp and Fabric ran 6 % slower than Accelerate on 250 Mbit/s links (docs/projection.md)."""
    cap = bucket_cap_mb(device, model)
    return {} if cap == DEFAULT_CAP_MB else {"bucket_cap_mb": cap}


def bucket_cap_mb_for(device_type: str, grad_bytes: int) -> float:
    """bucket_cap_mb's choice from the device type and the model's gradient bytes (also the projection's)."""
    if device_type == "cuda":
        return 25.0
    return 1.0 if grad_bytes / 2**20 <= SMALL_MODEL_MB else 25.0


def comm_hook(compression: str):
    """DDP's own communication hook for --grad-compression (None: DDP's built-in all-reduce): the bucket is
    cast to 16 bits, all-reduced, divided by the world size and cast back (torch's default_hooks). Also the
    hook Accelerate registers for the same option (DDPCommunicationHookType.FP16/BF16)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return {"none": None, "fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[
        compression
    ]


# DDP: its buffers (none that differ here: identical by construction) are not broadcast before each forward. torch
# 2.13 renamed the keyword (broadcast_buffers, deprecated, to forward_sync_buffers); the older name where that is all
# the installed torch has (the GPU machine's 2.11)
NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class DDPBackend(Backend):
    name = "ddp"
    shares_a_gpu = True  # over gloo, where a node has fewer GPUs than processes (Backend.place_on_gpu)

    def setup(self) -> None:
        if self.launch.launcher == PYTHON:
            world_of_one()  # DDP: plain `python run.py --backend ddp` is a world of one
        elif self.launch.launcher == SRUN:
            # DDP: srun's tasks are the processes; torch's env:// rendezvous reads its own variables from Slurm's
            if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
                raise UserError(
                    "--backend ddp under srun needs MASTER_ADDR and MASTER_PORT (the first node's address "
                    "and a free port there)"
                )
            launch = self.launch
            os.environ.update(
                RANK=str(launch.rank), WORLD_SIZE=str(launch.world_size), LOCAL_RANK=str(launch.local_rank)
            )
        self.local_rank = self.launch.local_rank
        # DDP: gloo on CPU, nccl on GPU (gloo where processes share a GPU); the timeout bounds how long survivors wait
        # for a dead rank. Under torchrun, on a key namespace of this round's own, so that a restart is clean.
        init_process_group(self.place_on_gpu(), timedelta(seconds=self.timeout_s))
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def teardown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        model = model.to(self.device)
        # DDP: gradients are bucketed views (no extra copy); buffers are identical by construction.
        ddp = DistributedDataParallel(
            model,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            gradient_as_bucket_view=True,
            **bucket_kwargs(self.device, model),
            **NO_BUFFER_SYNC,
        )
        hook = comm_hook(self.grad_compression)
        if hook is not None:
            ddp.register_comm_hook(state=None, hook=hook)
        return ddp, optimizer, train_loader

    def accumulation(self, model: nn.Module, sync: bool):
        # DDP: no_sync() skips the all-reduce; the gradients accumulate locally until the micro-batch that syncs
        return contextlib.nullcontext() if sync else model.no_sync()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def _all_reduce(self, t: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t, op=_OPS[op])
        return t / self.world_size if op is ReduceOp.AVG else t

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        # DDP: the reducer all-reduces each bucket in place with the process group's all_reduce (then divides)
        if self.world_size > 1:
            dist.all_reduce(t)

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t.unsqueeze(0)
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.stack(parts)

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()
