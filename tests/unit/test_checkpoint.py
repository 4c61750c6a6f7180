"""Checkpoints: the generators they capture and restore (training/rng.py), and which backend resumes which form."""

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


@pytest.mark.parametrize(
    ("written", "world_size", "library", "fragment"),
    [
        (None, 2, "deepspeed", "holds whole tensors (written by --backend ddp); this backend resumes only"),
        ({"name": "deepspeed", "tag": "step10"}, 2, None, "resume it with --backend deepspeed"),
        ({"name": "deepspeed", "tag": "step10"}, 4, "deepspeed", "own checkpoint of 2 processes, each holding"),
        (
            {"name": "deepspeed", "tag": "step10", "not_reshardable": "its universal checkpoint carries Adam's"},
            4,
            "deepspeed",
            "this run has 4, and its universal checkpoint carries Adam's; run with 2",
        ),
    ],
    ids=["tensors-to-library", "library-to-tensors", "other-world-size", "not-reshardable"],
)
def test_a_backend_resumes_only_the_checkpoint_form_it_writes(written, world_size, library, fragment):
    from pathlib import Path

    from distbench.training.checkpoint import check_library

    writer = "ddp" if written is None else "deepspeed"
    state = {"config": {"backend": writer}, "library": written, "world_size": 2}
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        check_library(Path("ckpt/checkpoint.pt"), state, world_size, library)
    check_library(Path("ckpt/checkpoint.pt"), state, 2, None if written is None else "deepspeed")  # its own: fine


def test_a_library_checkpoint_it_can_reshard_resumes_at_another_world_size():
    from pathlib import Path

    from distbench.training.checkpoint import check_library

    written = {"name": "deepspeed", "tag": "step10", "not_reshardable": None}
    state = {"config": {"backend": "deepspeed"}, "library": written, "world_size": 2}
    check_library(Path("ckpt/checkpoint.pt"), state, 1, "deepspeed")  # no error
