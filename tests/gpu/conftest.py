import pytest
import torch

NOT_RUN = "not run: no CUDA device here (the GPU tier runs where one is: `make test-gpu`, scripts/gpu_check.sh)"


def pytest_itemcollected(item):
    """Every test here needs a CUDA device: marked `gpu`; where there is none, each is reported as not run, by name
    (`-rs` lists them), never as passed."""
    item.add_marker(pytest.mark.gpu)
    if not torch.cuda.is_available():
        item.add_marker(pytest.mark.skip(reason=NOT_RUN))
