"""The small MNIST ConvNet of the classic PyTorch DDP / examples tutorials."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvNet(nn.Module):
    """conv 1->16->32 (3x3), max-pool, dropout, fc 4608->64->10, log-softmax.

    `dropout` overrides both dropout probabilities (0.10 after pooling, 0.25 after fc1) when given;
    0 turns dropout off, which makes runs deterministic enough to compare backends step by step.
    """

    def __init__(self, dropout: float | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.dropout1 = nn.Dropout(0.10 if dropout is None else dropout)
        self.dropout2 = nn.Dropout(0.25 if dropout is None else dropout)
        self.fc1 = nn.Linear(4608, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)
