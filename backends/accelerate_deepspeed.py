"""HuggingFace Accelerate driving DeepSpeed ZeRO (`--backend accelerate-deepspeed`): the accelerate backend with a
`DeepSpeedPlugin` whose config is the deepspeed backend's (`ds_config`: stage from --zero-stage, accumulation, bf16,
clipping, 16-bit communication), started by `accelerate launch` or torchrun. What Accelerate adds on top of the
engine (backends/deepspeed_backend.py) is what this configuration measures: its prepare() calls deepspeed.initialize,
and its backward() marks the accumulation boundary and steps the engine at it alone.

# Accelerate: its DeepSpeed plugin does not run on a CPU as shipped: `accelerate launch --cpu --use_deepspeed` is
# refused, Accelerator(cpu=True) ignores the plugin, and with cpu=False and no GPU every rank believes it is alone
# (DeepSpeed then aborts on train_batch_size). Made here first, PartialState(backend="gloo") gives the ranks their
# group, and the Accelerator made after it (cpu=False) takes the plugin (`before_accelerator`, `cpu_mode`).
"""

from __future__ import annotations

import contextlib

import torch
from accelerate import PartialState
from accelerate.utils import DeepSpeedPlugin
from torch import nn

from distbench.backends.accelerate_backend import AccelerateBackend
from distbench.backends.deepspeed_backend import ZeroEngine, deepspeed_module, ds_config
from distbench.process import PYTHON, world_of_one


class AccelerateDeepSpeedBackend(ZeroEngine, AccelerateBackend):
    """Accelerate's DeepSpeedPlugin: prepare() makes the engine; backward() and the optimizer step are Accelerate's
    wrappers around it."""

    name = "accelerate-deepspeed"

    def cpu_mode(self) -> bool:
        return False  # Accelerate: cpu=True would drop the plugin (module docstring)

    def before_accelerator(self) -> None:
        deepspeed_module()  # DeepSpeed: its accelerator is chosen at its first import (DS_ACCELERATOR on a CPU)
        if self.launch.launcher == PYTHON:
            world_of_one()  # DeepSpeed: its engine needs a process group even for one process
        if not torch.cuda.is_available():
            PartialState(backend="gloo")  # Accelerate: the ranks' group on a CPU (module docstring)

    def plugins(self) -> dict:
        # the micro-batch is known in prepare(), from the loader; filled in there
        self._ds_plugin = DeepSpeedPlugin(hf_ds_config=ds_config(self, micro_batch=1))
        return {"deepspeed_plugin": self._ds_plugin}

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        # Accelerate: the loader's batch is the global batch (split_batches); each rank's micro-batch is its share
        micro_batch = train_loader.batch_sampler.batch_size // self.world_size // self.accumulate
        self._ds_plugin.deepspeed_config.update(ds_config(self, micro_batch))
        model, optimizer, train_loader = self.accelerator.prepare(model, optimizer, train_loader)
        self.engine_made(model)  # Accelerate: prepare() returns the DeepSpeedEngine as the model
        return model, optimizer, train_loader

    def optimizer_step(self, model: nn.Module, optimizer, max_grad_norm: float | None) -> None:
        # Accelerate: backward() stepped the engine at the boundary (clipping is its config's); this step is its
        # optimizer wrapper's, a no-op under DeepSpeed, called as its users call it
        optimizer.step()

    def autocast(self):
        return contextlib.nullcontext()  # bf16: the engine's own torch_autocast (its config) wraps the forward
