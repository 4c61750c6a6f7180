"""The random generators a run draws from (dropout masks): captured and restored per rank by checkpoints.

Each process draws from torch's CPU generator and, on an accelerator, from that device's own generator
(dropout on CUDA draws there, not from the CPU one). A resumed run restores both, so that it continues
the uninterrupted run's masks exactly.
"""

from __future__ import annotations

import torch

from distbench.errors import UserError


def _device_module(device: torch.device):
    """torch.cuda (or torch.xpu, ...) for an accelerator device; None for the CPU."""
    return None if device.type == "cpu" else getattr(torch, device.type)


def capture(device: torch.device) -> dict[str, torch.Tensor]:
    """{"cpu": state} plus {device.type: state} of this process's device generator, as byte tensors."""
    states = {"cpu": torch.get_rng_state()}
    module = _device_module(device)
    if module is not None:
        states[device.type] = module.get_rng_state(device)
    return states


def restore(states: dict[str, torch.Tensor], device: torch.device) -> None:
    """Set the generators that `capture` saved; a device generator the checkpoint lacks is an error."""
    # .clone(): a row of a stacked tensor is a view with a storage offset, which torch misreads as a state
    torch.set_rng_state(states["cpu"].clone())
    module = _device_module(device)
    if module is not None:
        if device.type not in states:
            raise UserError(f"the checkpoint holds no {device.type} generator state (it was written without one)")
        module.set_rng_state(states[device.type].clone(), device)


def gather(all_gather, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's states, stacked in rank order: a collective (`all_gather` is the backend's)."""
    return {kind: all_gather(state.to(device)).cpu() for kind, state in capture(device).items()}


def restore_rank(gathered: dict[str, torch.Tensor], rank: int, device: torch.device) -> None:
    """Restore this rank's row of what `gather` returned."""
    restore({kind: states[rank] for kind, states in gathered.items()}, device)
