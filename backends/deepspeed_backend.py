"""DeepSpeed ZeRO (`deepspeed.initialize`), started by DeepSpeed's own `deepspeed` launcher or by torchrun (or as one
process by plain python).

The engine wraps the task's model and optimizer, its configuration built from the run (`ds_config`): the
micro-batch per rank, `gradient_accumulation_steps` for --accumulate, `gradient_clipping` for --max-grad-norm,
`torch_autocast` for --precision bf16, `communication_data_type` for --grad-compression and
`zero_optimization.stage` for --zero-stage: 0 replicates like DDP (an all-reduce of the gradients), 1 partitions the
optimizer state, 2 the gradients too, 3 the parameters too (each rank all-gathers a layer's parameters before its
forward and backward).
The process group is the ddp backend's (gloo on CPU, nccl on GPU, the same rendezvous); deepspeed.comm runs on it.

# DeepSpeed: its accelerator is chosen when deepspeed is first imported; on a machine without CUDA it must be told
# DS_ACCELERATOR=cpu first, and its CPU accelerator falls back to gloo without oneCCL (DeepSpeed PR 5206, #5313).
# DeepSpeed: the engine divides each micro-batch's loss by gradient_accumulation_steps itself and counts micro-steps
# in `step()`, which must follow every backward: it steps the optimizer only at the accumulation boundary.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn

from distbench.backends import held
from distbench.backends.ddp import DDPBackend
from distbench.errors import UserError


def ds_config(backend: DeepSpeedBackend, micro_batch: int) -> dict:
    """The DeepSpeed configuration of a run, with the keys its users write in ds_config.json."""
    config = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": backend.accumulate,
        "train_batch_size": micro_batch * backend.accumulate * backend.world_size,
        "zero_optimization": {"stage": backend.zero_stage},
        "zero_allow_untested_optimizer": True,  # the task's own optimizer (Adadelta, AdamW), as users pass theirs
        # DeepSpeed: its "bf16" mode casts the model to bf16 and leaves the inputs to the user; its own torch_autocast
        # keeps fp32 parameters and runs the forward under autocast, as --precision bf16 means for every backend
        "torch_autocast": {"enabled": backend.precision == "bf16", "dtype": "bfloat16"},
        "bf16": {"enabled": False},  # (said, so that Accelerate's plugin does not turn it on for mixed_precision)
        "steps_per_print": 2**31 - 1,  # no progress lines of its own: the loop reports
        "wall_clock_breakdown": False,
    }
    # DeepSpeed: gradient_clipping defaults to 1.0 (runtime/constants.py), not to none: always set
    config["gradient_clipping"] = backend.max_grad_norm if backend.max_grad_norm is not None else 0.0
    if backend.grad_compression != "none":
        config["communication_data_type"] = backend.grad_compression
    # DeepSpeed: a ZeRO checkpoint written by another world size loads as a universal checkpoint (each parameter's
    # whole fp32 value and optimizer state), which its users ask for here (said either way: Accelerate's plugin
    # takes this config before the world size is known and is updated with it in prepare)
    config["checkpoint"] = {"load_universal": resharded(backend)}
    return config


def resharded(backend: DeepSpeedBackend) -> bool:
    """Whether the run resumes from a checkpoint whose ZeRO partitions another world size wrote."""
    return backend.zero_stage > 0 and backend.resumes_from not in (None, backend.world_size)


COUNTED_STEPS = 2  # optimizer steps whose gradients are counted (ZeroEngine.engine_made)


def _before(method, first):
    """`method`, calling `first` (with the same arguments) before it."""

    @functools.wraps(method)
    def both(*args, **kwargs):
        first(*args, **kwargs)
        return method(*args, **kwargs)

    return both


def gradients(engine) -> list[torch.Tensor]:
    """The gradient tensors an engine holds: the parameters' `.grad`, and ZeRO's own gradient buffers (stages 1-2: the
    reduced partition, `averaged_gradients`; stage 2 keeps it in `grads_in_partition`; stage 3:
    `grad_partitions_flat_buffer`; the fp32 partitions' `.grad`)."""
    zero = engine.optimizer
    inner = getattr(zero, "optimizer", zero)
    buffers = ("averaged_gradients", "grads_in_partition", "grad_partitions_flat_buffer")
    own = [getattr(zero, name, None) for name in buffers]
    grads = [p.grad for p in engine.module.parameters()] + [p.grad for g in inner.param_groups for p in g["params"]]
    return [t for t in grads if t is not None] + held.tensors_in(own)


def unlink_shm_segment(rank: int) -> None:
    """Remove this rank's name of DeepSpeed's shared-memory all-reduce segment once every rank has it mapped.

    # DeepSpeed: on a CPU, deepspeed.comm creates a 66 MB segment per rank, /dev/shm/deepspeed_allreduce_buffer_
    # {uid}_{MASTER_ADDR}_{MASTER_PORT}_{rank} (ops/csrc/cpu/comm/shm.cpp), and never unlinks it: every run left
    # 66 MB per rank in /dev/shm (RAM) until this machine ran out of memory and killed a run. Unlinked once mapped, the
    # memory is freed when the last process of the job exits, a killed one included."""
    name = f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR')}_{os.environ.get('MASTER_PORT')}"
    with contextlib.suppress(FileNotFoundError):  # none where the op is not used (CUDA, or a world of one)
        os.unlink(f"/dev/shm/{name}_{rank}")


def deepspeed_module():
    """deepspeed, imported on this machine's accelerator."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed: read at its first import (module docstring)
    # DeepSpeed: on a CPU its communication loads a C++ op of its own (deepspeed_shm_comm), compiled when the package
    # was installed (scripts/setup_env.sh); otherwise it would compile it here, at every change of the venv's path
    import deepspeed

    return deepspeed


# what DeepSpeed's universal checkpoint carries of an optimizer's state per parameter (ds_to_universal: Adam's)
UNIVERSAL_STATE = {"exp_avg", "exp_avg_sq", "step"}


def not_universal(engine, stage: int) -> str | None:
    """None where a run's DeepSpeed checkpoint can be resumed at another world size: at stage 0 every rank writes
    the whole state; at stages 1-2 through DeepSpeed's universal checkpoint, which carries each parameter's fp32
    value and Adam's state alone. Else why not, in words."""
    if stage == 0:
        return None
    if stage == 3:
        # DeepSpeed: its converter and loader take a ZeRO-3 checkpoint, but the run did not continue: the tiny BERT
        # (AdamW) killed at x2 after its step-5 checkpoint and resumed at x1 lost 1e-2 against the single process
        # by step 10, where ZeRO-0 and ZeRO-2 resumed to 1.2e-7 (checked 2026-12-03, deepspeed 0.19.8)
        return "DeepSpeed's universal checkpoint of ZeRO-3 did not resume a run's state exactly when checked"
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
    keys = {k for state in inner.state.values() for k in state}
    if keys <= UNIVERSAL_STATE:
        return None
    others = ", ".join(sorted(keys - UNIVERSAL_STATE))
    return (
        f"DeepSpeed's universal checkpoint, which reshards ZeRO-{stage}, carries Adam's state alone, not "
        f"{type(inner).__name__}'s {others}"
    )


def to_universal(tagged: Path, universal: Path) -> None:
    """DeepSpeed's own converter (deepspeed.checkpoint.ds_to_universal, its users' command) from one tag's ZeRO
    partitions to a universal checkpoint; its progress lines go to stderr."""
    from argparse import Namespace

    from deepspeed.checkpoint import ds_to_universal

    args = Namespace(
        input_folder=str(tagged),
        output_folder=str(universal),
        num_extract_workers=1,
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,  # DeepSpeed: Megatron-DeepSpeed writes the state it wants; a plain engine does not
    )
    with contextlib.redirect_stdout(sys.stderr):
        ds_to_universal.main(args)


class ZeroEngine:
    """What a backend whose model and optimizer are a DeepSpeed engine (`self._engine`, set in `prepare`) does the
    same way however the engine was made: stage 3's gathered state, DeepSpeed's own checkpoints, the memory its
    buffers hold. A mixin before the process-group backend (the ddp one here, Accelerate's in
    accelerate_deepspeed.py)."""

    own_checkpoint = "deepspeed"  # save_checkpoint/load_checkpoint: each rank its partition (training/checkpoint.py)

    def setup(self) -> None:
        super().setup()
        # stage 3 all-gathers each layer's parameters in every forward: every rank runs as many (training/loop.py)
        self.forward_is_collective = self.zero_stage == 3
        self._engine = None
        self._grads_bytes = 0

    def engine_made(self, engine) -> None:
        """Keep the engine, and count the gradients it holds at the two points where they are most (`memory_held`),
        over the first COUNTED_STEPS optimizer steps (the same each step; later steps pay only a flag's test)."""
        self._engine = engine
        self.barrier()  # every rank has mapped every other's shared-memory segment (deepspeed.comm's initialize)
        unlink_shm_segment(self.rank)
        self._steps_to_count = COUNTED_STEPS

        def count(*_args, **_kwargs) -> None:
            if self._steps_to_count:
                self._grads_bytes = max(self._grads_bytes, held.tensor_bytes(gradients(engine), {}))

        def step_begins(*_args, **_kwargs) -> None:
            count()
            self._steps_to_count = max(0, self._steps_to_count - 1)

        # DeepSpeed: after each backward, before its own reduction there (allreduce_gradients: stages 0-1 hold every
        # gradient then, stages 2-3 their partition and what they have not reduced yet); and as its optimizer's step
        # begins (the reduced partition, before ZeRO frees it inside its step)
        engine.allreduce_gradients = _before(engine.allreduce_gradients, count)
        if isinstance(engine.optimizer, torch.optim.Optimizer):  # stage 0: the task's own, whose hooks torch keeps
            engine.optimizer.register_step_pre_hook(step_begins)
        else:  # ZeRO's optimizer, not a torch Optimizer
            engine.optimizer.step = _before(engine.optimizer.step, step_begins)

    def memory_held(self, model: nn.Module, optimizer) -> dict[str, int]:
        """What DeepSpeed holds, each byte once: the module's parameters (stages 1-2: views into one flat buffer;
        stage 3: this rank's partition, `ds_tensor`, and the small parameters it keeps whole), the most gradients it
        held (`engine_made`), and the optimizer's state with ZeRO's fp32 master copy of its partition (as in the ZeRO
        paper, optimizer state; stages 1-2 copy it, stage 3 of an fp32 model uses the partition itself). Not counted,
        as DDP's buckets are not: the buffers it communicates through (reduce_bucket_size, allgather_bucket_size),
        beyond the gradients they hold."""
        zero = self._engine.optimizer
        inner = getattr(zero, "optimizer", zero)  # the task's optimizer, wrapped by ZeRO (stage 0: itself)
        counted: dict = {}
        # stage 3: each parameter's partition, and the whole of those DeepSpeed keeps on every rank between steps
        # (at most stage3_param_persistence_threshold elements, 1e5 by default); elsewhere the parameters
        params = [
            t for p in self._engine.module.parameters() for t in (getattr(p, "ds_tensor", None), p) if t is not None
        ]
        masters = [p for group in inner.param_groups for p in group["params"]]  # stage 0: the parameters (counted)
        states = held.state_tensors(inner)
        return {
            "params_bytes": held.tensor_bytes(params, counted),
            "grads_bytes": self._grads_bytes,
            "optimizer_bytes": held.tensor_bytes([*masters, *states], counted),
        }

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module

    def model_state_dict(self, model: nn.Module) -> dict:
        module = self.unwrap(model)
        if self.zero_stage < 3:
            return module.state_dict()  # DeepSpeed: below stage 3 every rank holds the whole parameters
        # DeepSpeed: at stage 3 each rank holds a partition; gathered on every rank for the copy (a collective)
        with deepspeed_module().zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return {k: v.detach().clone() for k, v in module.state_dict().items()}

    def save_own_checkpoint(self, model: nn.Module, folder: Path, tag: str) -> str | None:
        # DeepSpeed: every rank writes its ZeRO partition of the optimizer state (and at stage 3 of the parameters)
        self._engine.save_checkpoint(str(folder), tag=tag)
        self.barrier()  # every rank's files are written before rank 0 commits checkpoint.pt
        return not_universal(self._engine, self.zero_stage)

    def load_own_checkpoint(self, model: nn.Module, folder: Path, tag: str) -> None:
        if resharded(self):  # the engine was configured to load a universal checkpoint (ds_config)
            tag = self._universal(folder, tag)
        # the scheduler is the loop's (in checkpoint.pt), not the engine's
        path, _ = self._engine.load_checkpoint(str(folder), tag=tag, load_lr_scheduler_states=False)
        if path is None:
            raise UserError(f"DeepSpeed's checkpoint {folder / tag} could not be read; use another --checkpoint-dir")

    def _universal(self, folder: Path, tag: str) -> str:
        """DeepSpeed's universal checkpoint of `tag` (each parameter's whole fp32 value and Adam state), made once by
        the main process with DeepSpeed's own converter, which any world size loads; its tag."""
        universal = f"{tag}-universal"
        if self.is_main and not (folder / universal / "zero").is_dir():
            to_universal(folder / tag, folder / universal)
        self.barrier()
        return universal

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        # DeepSpeed: at stages 0-2 the engine all-reduces each bucket of gradients through deepspeed.comm (stage 2's
        # reduce-scatter is, on this path, an all-reduce of which each rank keeps its partition:
        # stage_1_and_2.average_tensor, use_multi_rank_bucket_allreduce); in place, as there
        if self.world_size > 1:
            self._comm().all_reduce(t)

    def parameter_all_gather(self, flat: torch.Tensor, part: torch.Tensor) -> None:
        # DeepSpeed: after a ZeRO-1/2 step each rank holds its partition of the updated parameters; all_gather_dp_groups
        # gathers them into the flat buffer with one all_gather_into_tensor per parameter group (runtime/utils.py)
        if self.world_size > 1:
            self._comm().all_gather_into_tensor(flat, part)

    def gradient_reduce_scatter(self, flat: torch.Tensor, part: torch.Tensor) -> None:
        # DeepSpeed: at ZeRO-3 the gradients are reduce-scattered once backward is done (stage3's __avg_scatter_grads
        # -> reduce_scatter_coalesced -> deepspeed.comm.reduce_scatter_fn -> reduce_scatter_tensor), each rank
        # keeping its partition
        if self.world_size > 1:
            self._comm().reduce_scatter_tensor(part, flat)

    def _comm(self):
        """deepspeed.comm over this backend's process group (deepspeed.initialize starts it in a run; commbench
        makes no engine), its shared-memory segment unlinked as an engine's is (`engine_made`)."""
        comm = deepspeed_module().comm
        if not comm.is_initialized():
            comm.init_distributed(
                dist_backend=torch.distributed.get_backend(), timeout=timedelta(seconds=self.timeout_s)
            )
            self.barrier()
            unlink_shm_segment(self.rank)
        return comm


class DeepSpeedBackend(ZeroEngine, DDPBackend):
    """The ddp backend's process group and collectives; the model, optimizer and step are DeepSpeed's engine's."""

    name = "deepspeed"
    shares_a_gpu = False  # DeepSpeed: its engine puts each process on cuda:LOCAL_RANK itself

    def setup(self) -> None:
        super().setup()
        self._boundary = True  # each backward ends an optimizer step, unless `accumulation` says it does not

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        micro_batch = train_loader.batch_sampler.batch_size // self.accumulate
        engine, optimizer, _, _ = deepspeed_module().initialize(
            model=model.to(self.device), optimizer=optimizer, config=ds_config(self, micro_batch)
        )
        self.engine_made(engine)
        return engine, optimizer, train_loader

    def schedulable(self, optimizer):
        # DeepSpeed: ZeRO's optimizer is not a torch Optimizer (a scheduler refuses it); a scheduler is built over the
        # task's own, whose parameter groups ZeRO steps (deepspeed.initialize builds its users' lr_scheduler over the
        # same `basic_optimizer`); the loop steps it, not the engine
        return self._engine.basic_optimizer

    def accumulation(self, model: nn.Module, sync: bool):
        self._boundary = sync
        return contextlib.nullcontext()  # DeepSpeed: the engine counts its micro-steps (module docstring)

    def backward(self, loss: torch.Tensor) -> None:
        self._engine.backward(loss)  # DeepSpeed: divided by gradient_accumulation_steps in there
        if not self._boundary:
            self._engine.step()  # DeepSpeed: counts the micro-step; no optimizer step before the boundary

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        self._engine.step()  # clipping is the engine's (gradient_clipping, set from --max-grad-norm)

    def autocast(self):
        return contextlib.nullcontext()  # bf16: the engine's own torch_autocast (its config) wraps the forward
