"""backends/held.py: the bytes a rank holds, each byte once (DeepSpeed's flat buffers hold many views)."""

import torch
from torch import nn

from distbench.backends.held import held, tensor_bytes


def test_views_into_one_buffer_count_the_bytes_they_cover_once():
    flat = torch.zeros(100)  # 400 bytes, as a library's flat buffer
    counted: dict = {}
    assert tensor_bytes([flat[:10], flat[5:20], flat[50:60]], counted) == (20 + 10) * 4  # the overlap once
    assert tensor_bytes([flat], counted) == (100 - 30) * 4  # what the views had not covered
    assert tensor_bytes([flat.view(10, 10).t()], {}) == 400  # a dense permutation: its whole buffer


def test_strided_views_empty_and_freed_tensors():
    grid = torch.zeros(10, 10)
    assert tensor_bytes([grid[:, :2]], {}) == 20 * 4  # its elements, not the gaps between them
    assert tensor_bytes([torch.zeros(0)], {}) == 0
    freed = torch.zeros(8)
    freed.untyped_storage().resize_(0)  # a library's released buffer: the tensor keeps its shape
    assert tensor_bytes([freed], {}) == 0


def test_held_counts_parameters_gradients_and_optimizer_state():
    model = nn.Linear(4, 3)  # 15 parameters
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()  # Adam: exp_avg and exp_avg_sq per parameter, and a one-element step each
    assert held(model, opt) == {"params_bytes": 60, "grads_bytes": 60, "optimizer_bytes": 2 * 60 + 2 * 4}
