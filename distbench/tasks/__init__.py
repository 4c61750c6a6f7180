"""Tasks: a model, its data and its step, knowing nothing about distribution.

The Task protocol (see docs/architecture.md): build_model, build_optimizer, build_scheduler,
datasets, collate, step, evaluate. A task must be deterministic given the seed, so that every rank
and every backend starts from the same weights and sees the same data.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from torch.utils.data import Dataset

from distbench.config import RunConfig
from distbench.errors import UserError


class Task(Protocol):
    name: str

    def build_model(self) -> nn.Module: ...
    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer: ...
    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int, steps_per_epoch: int): ...
    # train, test (the same on every rank) and what they are: {name, source, n_train, n_test, notice?}
    def datasets(self) -> tuple[Dataset, Dataset, dict]: ...
    def collate(self, samples): ...
    def step(self, model: nn.Module, batch) -> torch.Tensor: ...  # the mean loss; no backward here
    def evaluate(self, model: nn.Module, batch) -> dict[str, torch.Tensor]: ...  # sums: correct, count, loss_sum


TASKS = {"mnist": "distbench.tasks.mnist:MnistTask", "bert-sentiment": "distbench.tasks.bert:BertSentimentTask"}
DEFAULTS = {
    "mnist": {"epochs": 5, "batch_size": 64, "lr": 0.5, "schedule": False},
    # the recipe measured best for the bundled MiniLM-L6 on MR in one epoch (docs/bert.md): AdamW at 1e-4 for the
    # encoder and 1e-3 for the new head, no dropout, linear warm-up (10 %) and decay, gradient clipping at 1.0
    "bert-sentiment": {
        "epochs": 1,
        "batch_size": 32,
        "lr": 1e-4,
        "head_lr": 1e-3,
        "dropout": 0.0,
        "schedule": True,
        "max_grad_norm": 1.0,
    },
}


def with_defaults(cfg: RunConfig) -> RunConfig:
    if cfg.task not in DEFAULTS:
        raise UserError(f"unknown task {cfg.task!r}; choose one of {', '.join(TASKS)}")
    return cfg.with_task_defaults(**DEFAULTS[cfg.task])


def load_datasets(task: Task) -> tuple[Dataset, Dataset, dict]:
    """The task's datasets; any failure of the data path (a bad download, an unreadable file) is one line."""
    try:
        return task.datasets()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a data source raises, the user gets one line
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        raise UserError(f"the {task.name} data could not be loaded: {type(e).__name__}: {detail}") from e


def build_task(cfg: RunConfig) -> Task:
    import importlib

    if cfg.task not in TASKS:
        raise UserError(f"unknown task {cfg.task!r}; choose one of {', '.join(TASKS)}")
    module, cls = TASKS[cfg.task].split(":")
    return getattr(importlib.import_module(module), cls)(with_defaults(cfg))
