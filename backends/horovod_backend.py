"""Horovod: `hvd.init()`, `broadcast_parameters`, `DistributedOptimizer`. Started by horovodrun or python."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import replace

import torch
from torch import nn

from distbench.backends.base import Backend, Progress, ReduceOp
from distbench.data import download
from distbench.errors import BackendUnavailable, UserError

try:
    import horovod
    import horovod.torch as hvd
    from horovod.common.exceptions import HorovodInternalError
except ImportError as e:  # pragma: no cover - exercised only where horovod is missing
    raise BackendUnavailable(
        "--backend horovod needs Horovod built with PyTorch and Gloo: run `make setup` "
        f"(it builds a patched horovod 0.28.1 wheel, see scripts/build_horovod.sh) ({e})"
    ) from e


# Horovod: fp16 is its own Compression.fp16. bf16 cannot be had through its Compressor interface: Horovod 0.28's
# PyTorch extension refuses bfloat16 tensors in every collective ("Tensor type torch.BFloat16Tensor is not
# supported"), and the interface only changes what the all-reduce is given.
_COMPRESSION = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.grad_compression not in _COMPRESSION:
            raise UserError(
                f"--grad-compression {self.grad_compression}: Horovod {horovod.__version__} cannot all-reduce "
                "bfloat16 tensors (its PyTorch extension rejects them); use fp16 or none"
            )

    def setup(self) -> None:
        # Horovod: bound the Gloo rendezvous and collectives so survivors of a dead rank do not hang.
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(self.timeout_s))
        hvd.init()
        self.rank, self.world_size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        if torch.cuda.is_available():
            if not hvd.cuda_built():
                # Horovod: a build without CUDA (scripts/build_horovod.sh's, Gloo on CPU) cannot exchange GPU tensors
                raise UserError(
                    f"--backend horovod on a GPU: this Horovod {horovod.__version__} was built without CUDA; build it "
                    "with HOROVOD_GPU_OPERATIONS=NCCL"
                )
            self.place_on_gpu()

    def teardown(self) -> None:
        if hvd.is_initialized():
            hvd.shutdown()

    @property
    def elastic(self) -> bool:
        """Whether horovodrun started this job elastic (--min-np/--max-np, a host discovery script)."""
        return os.environ.get("HOROVOD_ELASTIC") == "1"

    @property
    def joins_under_way(self) -> bool:
        # Horovod: Horovod Elastic starts a worker on a host that is added to a job under way; the workers under way
        # meet it in the state's sync (hvd.elastic.run), so none of its collectives may come before
        return self.elastic

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        if not self.joins_under_way:
            with super().main_process_first():
                yield
            return
        # Horovod: Horovod Elastic's examples load their data under a file lock, not a barrier: each host's processes
        # one after another, whichever first filling the cache (a worker that joins later has no one to meet here;
        # every process may download: training/loop.build)
        cache = download.cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".horovod-elastic.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            yield

    def run_training(self, train, model, optimizer, progress: Progress):
        if not self.elastic:
            return train()
        # Horovod: Horovod Elastic, as its examples run it. hvd.elastic.run runs the loop; a failed collective
        # (HorovodInternalError) rolls the TorchState back to its last commit() (model, optimizer, and the trainer's
        # place beside them), re-initialises Horovod over the hosts left (horovodrun blacklists the failed worker's
        # host), calls the reset callbacks, broadcasts rank 0's state and runs the loop again. No process restarts.
        # (the snapshot is a collective only once steps were trained: none here, where a joining worker starts too)
        self._state = hvd.elastic.TorchState(model=model, optimizer=optimizer, place=progress.snapshot())
        self._progress = progress
        self._state.register_reset_callbacks([self._reset])

        @hvd.elastic.run
        def attempt(state):
            progress.resume(state.place)
            try:
                return train()
            except HorovodInternalError as e:
                progress.noticed(e)
                raise

        return attempt(self._state)

    def commit(self) -> None:
        if getattr(self, "_state", None) is None:
            return
        self._state.place = self._progress.snapshot()
        self._state.commit()  # Horovod: also where a worker learns that hosts were added or removed

    def _reset(self) -> None:
        """Horovod Elastic re-initialised Horovod over the workers left: this rank's place, and its share of the
        data, in the world of the new size."""
        try:
            # Horovod: its cross rank and size number the hosts left, as its local ones a host's workers
            hosts = dict(node_rank=hvd.cross_rank(), nodes=hvd.cross_size())
            ranks = dict(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank())
            self.resized(replace(self.launch, **ranks, local_world_size=hvd.local_size(), **hosts))
        except ValueError as e:
            raise UserError(
                f"Horovod Elastic continued with {hvd.size()} process(es): {e}; distbench keeps the "
                "global batch, so give one that every size from --min-np to --max-np divides"
            ) from e

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        model = model.to(self.device)
        # Horovod: rank 0's weights win, whatever the other ranks initialised; under Horovod Elastic the state's sync
        # broadcasts them (hvd.elastic.run, each time the workers change), and nothing may come before it
        if not self.joins_under_way:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        # Horovod: not broadcast_optimizer_state, which its examples call here too: given a fresh optimizer (as every
        # rank's is here, a checkpoint is loaded later, on every rank) it steps it with zero gradients to make its
        # state, which moves AdamW's weights by its weight decay and starts Adam's bias correction a step late; the
        # other libraries take no such step. (Horovod Elastic's sync calls it, on the optimizer as it is then.)
        # Horovod: gradients are averaged by hooks during backward and waited for in step(). With
        # backward_passes_per_step=K a parameter's hook all-reduces only after its K-th backward; the K local
        # gradients are *summed* then (horovod#2497), so the loss is divided by K in backward() (the base
        # class's) to make the result the large batch's mean gradient.
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            op=hvd.Average,
            backward_passes_per_step=self.accumulate,
            compression=_COMPRESSION[self.grad_compression],
        )
        return model, optimizer, train_loader

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        if max_grad_norm is None:
            optimizer.step()  # Horovod: waits for the gradient all-reduces, then steps
            return
        # Horovod: the all-reduces run asynchronously during backward; wait for them before clipping,
        # then step without synchronising a second time.
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        with optimizer.skip_synchronize():
            optimizer.step()

    def _all_reduce(self, t: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        ops = {ReduceOp.SUM: hvd.Sum, ReduceOp.AVG: hvd.Average, ReduceOp.MAX: hvd.Max, ReduceOp.MIN: hvd.Min}
        return hvd.allreduce(t, op=ops[op])

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        # Horovod: DistributedOptimizer's hooks queue each gradient's in-place all-reduce for the background thread,
        # which fuses what is ready into its fusion buffer (one tensor here: its own size, through the buffer). They
        # name it after its parameter, so that from the second step on the response cache spares it the full
        # negotiation; an unnamed all-reduce gets a new name, and a full negotiation, every call (0.2-0.4 ms here)
        if self.world_size > 1:
            hvd.synchronize(hvd.allreduce_async_(t, name=f"gradient.{t.dtype}.{t.numel()}", op=hvd.Sum))

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t.unsqueeze(0)
        return hvd.allgather(t.unsqueeze(0))  # Horovod: concatenates along dim 0

    def barrier(self) -> None:
        if self.world_size > 1:
            hvd.barrier()
