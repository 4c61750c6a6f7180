"""The generators a checkpoint captures and restores (distbench/training/rng.py)."""

import pytest
import torch

from distbench.errors import UserError
from distbench.training import rng


def _fake_cuda(monkeypatch):
    """A CUDA generator that this CPU machine does not have: its state, and what was set."""
    was_set = {}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.full((8,), 7, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: was_set.update(state=state, device=device))
    return was_set


def test_every_generator_is_captured_and_restored(monkeypatch):
    was_set = _fake_cuda(monkeypatch)
    cuda = torch.device("cuda", 0)
    states = rng.capture(cuda)
    assert set(states) == {"cpu", "cuda"} and states["cuda"].tolist() == [7] * 8
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    states = rng.capture(cuda)
    torch.rand(50)
    rng.restore(states, cuda)
    assert torch.equal(torch.rand(3), expected)
    assert was_set["state"].tolist() == [7] * 8 and was_set["device"] == cuda
    assert set(rng.capture(torch.device("cpu"))) == {"cpu"}
    with pytest.raises(UserError, match="no cuda generator state"):
        rng.restore({"cpu": states["cpu"]}, cuda)
