"""MNIST classification with the classic DDP-tutorial ConvNet and Adadelta."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from distbench.config import RunConfig
from distbench.data.mnist import load_mnist
from distbench.models.convnet import ConvNet
from distbench.tasks import TensorClassification


class MnistTask(TensorClassification):
    name = "mnist"
    defaults = {"epochs": 5, "batch_size": 64, "lr": 0.5, "schedule": False}
    criterion = staticmethod(F.nll_loss)  # the ConvNet returns log-probabilities

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def build_model(self) -> nn.Module:
        return ConvNet(dropout=self.cfg.dropout)

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return [model.conv1, model.conv2, model.fc1, model.fc2]  # its layers

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adadelta(model.parameters(), lr=self.cfg.lr)

    def build_scheduler(self, optimizer, total_steps: int, steps_per_epoch: int):
        # Constant lr, measured best here: per-epoch decay (gamma 0.7-0.9) lowered 5-epoch accuracy on
        # the 4,500 bundled digits (docs/accuracy.md).
        return None

    def datasets(self):
        train, test, info = load_mnist(self.cfg.data_dir)
        return train, test, dataclasses.asdict(info)
