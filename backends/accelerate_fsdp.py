"""HuggingFace Accelerate driving FSDP2 (`--backend accelerate-fsdp`): the accelerate backend with
`FullyShardedDataParallelPlugin(fsdp_version=2)`. A module of its own so that the plain accelerate backend does not
import torch.distributed.checkpoint and FSDP at start-up (0.6 s here).
"""

from __future__ import annotations

import contextlib

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from torch import nn
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from distbench.backends.accelerate_backend import AccelerateBackend
from distbench.backends.fsdp import FullStateDicts, batch_norms_in_fp32, mixed_precision_policy, rebind_optimizer
from distbench.process import PYTHON, world_of_one


class AccelerateFSDPBackend(FullStateDicts, AccelerateBackend):
    """Accelerate driving FSDP2: `FullyShardedDataParallelPlugin(fsdp_version=2)`; its prepare() calls fully_shard
    on the units its auto-wrap policy names and on the root, and its accumulate() and backward() follow FSDP's rules.
    What it adds on top of the native API (backends/fsdp.py) is what this configuration measures."""

    name = "accelerate-fsdp"
    forward_is_collective = True

    def plugins(self) -> dict:
        self._fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            state_dict_type="FULL_STATE_DICT",
            # bf16 parameters and 16-bit gradient reduction: the plugin's MixedPrecisionPolicy, set as fsdp's is
            mixed_precision_policy=mixed_precision_policy(self.precision, self.grad_compression),
        )
        return {"fsdp_plugin": self._fsdp_plugin}

    def before_accelerator(self) -> None:
        if self.launch.launcher == PYTHON:
            # Accelerate: FSDP only in a distributed state; `accelerate launch --use_fsdp` gives even one process
            # torchrun's variables (its multi_gpu_launcher), plain python none, and one process would then run
            # without FSDP and without the plugin's bf16 (DistributedType.NO ignores the plugin): a world of one
            world_of_one()

    def after_accelerator(self) -> None:
        state = self.accelerator.state
        if state.distributed_type is DistributedType.MULTI_CPU:
            # Accelerate: its CPU mode (cpu=True, a gloo group) ignores the FSDP plugin (accelerate/state.py enters
            # FSDP only from a GPU-like distributed type); set what AcceleratorState sets on a GPU, in both of its
            # shared states (every later AcceleratorState() copies PartialState's type over its own)
            state.distributed_type, state.fsdp_plugin = DistributedType.FSDP, self._fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        # Accelerate: names its shard units by class (transformer_cls_names_to_wrap), not by module: the classes of the
        # task's units. Where such a class also names other submodules (ResNet's downsample Sequentials), those are
        # units too. It also makes the input embeddings and a final norm units of their own where the model has them.
        names = sorted({type(unit).__name__ for unit in shard_units})
        # (the policy function itself: the plugin turns its string names into functions only when it is made)
        self._fsdp_plugin.auto_wrap_policy = transformer_auto_wrap_policy if names else None
        self._fsdp_plugin.transformer_cls_names_to_wrap = names or None
        model, before = model.to(self.device), dict(model.named_parameters())
        batch_norms_in_fp32(model, self._fsdp_plugin.mixed_precision_policy)  # units before Accelerate makes its own
        rebind_optimizer(optimizer, before, dict(model.named_parameters()))  # Accelerate maps the parameters it shards
        return self.accelerator.prepare(model, optimizer, train_loader)  # Accelerate: rebinds the optimizer itself

    def autocast(self):
        return contextlib.nullcontext()  # bf16 is the plugin's MixedPrecisionPolicy, as under fsdp

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model  # fully_shard changes the module's class in place

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        raise NotImplementedError("accelerate-fsdp reduce-scatters its gradients")
