"""PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`), started by torchrun (or as one process by plain python).

Each of the task's shard units (`Task.shard_units`; by default none, so the root alone) and then the root are
sharded: each rank holds 1/W of every parameter, its gradient and its optimizer state, all-gathers a unit's
parameters before its forward and backward, and reduce-scatters its gradients after backward. The process group is
the ddp backend's (gloo on CPU, nccl on GPU; the same torchrun rendezvous).

# FSDP: on CPU, gloo has no reduce-scatter; torch implements FSDP's with an all-reduce of the whole gradient
# (pytorch/pytorch#118911), so each rank receives W times what NCCL's reduce-scatter would send it. Its speed on
# CPU is that of an all-reduce, not of FSDP on a GPU cluster: say so wherever its speed is shown.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from distbench.backends.base import SIXTEEN_BIT
from distbench.backends.ddp import DDPBackend

# FSDP: the calls FSDP2's own collectives make (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), the
# tensor-in/tensor-out ones of the torch releases before all_gather_single and reduce_scatter_single
ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)  # the whole tensors, on the CPU, as DDP saves them


def mixed_precision_policy(precision: str, grad_compression: str) -> MixedPrecisionPolicy:
    """--precision bf16: parameters all-gathered and computed in bf16; --grad-compression fp16/bf16: gradients
    reduced in 16 bits (otherwise in the parameters' dtype, fp32 under bf16 too)."""
    return MixedPrecisionPolicy(
        param_dtype=SIXTEEN_BIT.get(precision if precision == "bf16" else "none"),
        reduce_dtype=SIXTEEN_BIT.get(grad_compression, torch.float32 if precision == "bf16" else None),
    )


def batch_norms_in_fp32(model: nn.Module, policy: MixedPrecisionPolicy) -> None:
    """Under a bf16 policy, each BatchNorm a unit of its own that computes in fp32 (its input stays bf16).

    # FSDP: its MixedPrecisionPolicy casts every parameter of a unit to bf16, BatchNorm's weights too, while its
    # running statistics (buffers) stay fp32, and batch_norm refuses the mix ("expected scalar type BFloat16 but
    # found Float"); FSDP1 kept BatchNorm out of mixed precision by default (MixedPrecision's
    # _module_classes_to_ignore), each BatchNorm then a unit of its own: the same here, before the other units."""
    if policy.param_dtype is None:
        return
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            fully_shard(module, mp_policy=MixedPrecisionPolicy(reduce_dtype=policy.reduce_dtype))


class FullStateDicts:
    """Checkpoints of a sharded model as full state dicts (the whole tensors, on the main process's CPU), through
    torch.distributed.checkpoint.state_dict: the form every backend saves and loads, so a checkpoint written sharded
    at one world size resumes replicated or sharded at any other. Collectives: every rank calls each method."""

    def model_state_dict(self, model: nn.Module) -> dict:
        return get_model_state_dict(model, options=FULL)

    def load_model_state_dict(self, model: nn.Module, state: dict) -> None:
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def optimizer_state_dict(self, model: nn.Module, optimizer) -> dict:
        state = get_optimizer_state_dict(model, optimizer, options=FULL)
        return _by_index(state) if state else state  # whole on the main process only (cpu_offload), empty elsewhere

    def load_optimizer_state_dict(self, model: nn.Module, optimizer, state: dict) -> None:
        by_name = _by_name(state, _names_in_group_order(model, optimizer))
        set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


class FSDPBackend(FullStateDicts, DDPBackend):
    name = "fsdp"
    forward_is_collective = True  # every forward all-gathers: every rank runs the same number of them
    shares_a_gpu = False  # FSDP2's reduce-scatter of GPU tensors is NCCL's (gloo has none)

    def prepare(self, model: nn.Module, optimizer, train_loader, shard_units=()):
        model = model.to(self.device)
        before = dict(model.named_parameters())
        # FSDP: bf16 and 16-bit gradient reduction are its own MixedPrecisionPolicy, not autocast (off under fsdp)
        policy = mixed_precision_policy(self.precision, self.grad_compression)
        batch_norms_in_fp32(model, policy)
        for unit in shard_units:  # inner units first: each all-gathers and frees its own parameters
            fully_shard(unit, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        rebind_optimizer(optimizer, before, dict(model.named_parameters()))
        return model, optimizer, train_loader

    def accumulation(self, model: nn.Module, sync: bool):
        # FSDP: between micro-batches no reduce-scatter and no resharding: the unsharded gradients accumulate
        model.set_requires_gradient_sync(sync)
        model.set_reshard_after_backward(sync)
        return contextlib.nullcontext()

    def autocast(self):
        return contextlib.nullcontext()  # bf16 is the MixedPrecisionPolicy's

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model  # fully_shard changes the module's class in place; there is no wrapper

    def gradient_all_reduce(self, t: torch.Tensor) -> None:
        raise NotImplementedError(
            "fsdp reduce-scatters its gradients: commbench times its all-gather and reduce-scatter"
        )

    def parameter_all_gather(self, flat: torch.Tensor, part: torch.Tensor) -> None:
        # FSDP: each unit's parameters are all-gathered into one flat buffer before its forward, and again before its
        # backward where the unit reshards after forward (its DefaultAllGather)
        if self.world_size > 1:
            ALL_GATHER(flat, part)

    def gradient_reduce_scatter(self, flat: torch.Tensor, part: torch.Tensor) -> None:
        # FSDP: each unit's gradients are reduce-scattered from one flat buffer once its backward is done
        # (foreach_reduce -> its DefaultReduceScatter), each rank keeping its shard
        if self.world_size > 1:
            REDUCE_SCATTER(part, flat)


def rebind_optimizer(optimizer, before: dict[str, nn.Parameter], after: dict[str, nn.Parameter]) -> None:
    """Point an optimizer that has not stepped yet at the sharded parameters that replaced the ones it was built
    over: the optimizer the task built, over the sharded parameters, as if built after fully_shard."""
    new = {id(before[name]): after[name] for name in before}
    for group in optimizer.param_groups:
        group["params"] = [new[id(p)] for p in group["params"]]
    assert not optimizer.state, "the optimizer is rebound before its first step"


def _by_index(state: dict) -> dict:
    """torch.distributed.checkpoint's optimizer state (keyed by parameter name) in `optimizer.state_dict()`'s form
    (keyed by the parameter's index over the groups in order), the form every other backend saves and loads."""
    index = {name: i for i, name in enumerate(n for g in state["param_groups"] for n in g["params"])}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
    return {"state": {index[n]: s for n, s in state["state"].items()}, "param_groups": groups}


def _by_name(state: dict, names: list[str]) -> dict:
    """The other way: an index-keyed optimizer state (any backend's checkpoint) keyed by the names of `names`, the
    parameters in the optimizer's group order."""
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def _names_in_group_order(model: nn.Module, optimizer) -> list[str]:
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]
