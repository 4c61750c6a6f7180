"""MNIST classification with the classic DDP-tutorial ConvNet and Adadelta."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from data.arrays import collate_tensor_batch
from data.mnist import load_mnist
from distbench.config import RunConfig
from distbench.tasks import classification_sums
from models.convnet import ConvNet


class MnistTask:
    name = "mnist"
    defaults = {"epochs": 5, "batch_size": 64, "lr": 0.5, "schedule": False}

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def build_model(self) -> nn.Module:
        return ConvNet(dropout=self.cfg.dropout)

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adadelta(model.parameters(), lr=self.cfg.lr)

    def build_scheduler(self, optimizer, total_steps: int, steps_per_epoch: int):
        # Constant lr, measured best here: per-epoch decay (gamma 0.7-0.9) lowered 5-epoch accuracy on
        # the 4,500 bundled digits (docs/accuracy.md).
        return None

    def datasets(self):
        train, test, info = load_mnist(self.cfg.data_dir)
        return train, test, dataclasses.asdict(info)

    collate = staticmethod(collate_tensor_batch)

    def step(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(model(x), y)

    def evaluate(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        x, y = batch
        return classification_sums(model(x), y, F.nll_loss)  # the ConvNet returns log-probabilities
