"""A complete user task: a small MLP learning a noisy linear function, with the data made from the seed.

    python run.py --task examples/regression_task.py:NoisyLinear
    torchrun --nproc_per_node 2 run.py --backend ddp --task examples/regression_task.py:NoisyLinear
    python run.py check-task examples/regression_task.py:NoisyLinear

The class is called with the run's config (distbench.config.RunConfig: cfg.seed, cfg.lr, cfg.dropout, ...);
`defaults` fills the options the user leaves unset. Nothing here knows about distribution.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


class NoisyLinear:
    name = "noisy-linear"
    defaults = {"epochs": 2, "batch_size": 64, "lr": 1e-2}

    def __init__(self, cfg):
        self.cfg = cfg

    def build_model(self) -> nn.Module:  # weights from torch's global RNG, which the loop seeds
        p = 0.1 if self.cfg.dropout is None else self.cfg.dropout  # --dropout 0 turns it off (check-task does)
        return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(p), nn.Linear(64, 2))

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=self.cfg.lr)

    def datasets(self):  # the same on every rank: a private generator seeded from the run's seed
        g = torch.Generator().manual_seed(self.cfg.seed)
        x = torch.randn(2560, 16, generator=g)
        w = torch.randn(16, generator=g)
        y = ((x @ w + 0.3 * torch.randn(2560, generator=g)) > 0).long()
        return TensorDataset(x[:2048], y[:2048]), TensorDataset(x[2048:], y[2048:])

    def collate(self, samples):
        xs, ys = zip(*samples, strict=True)
        return torch.stack(xs), torch.stack(ys)

    def step(self, model: nn.Module, batch) -> torch.Tensor:  # the mean loss; the backend does backward
        x, y = batch
        return F.cross_entropy(model(x), y)

    def evaluate(self, model: nn.Module, batch) -> dict:  # sums over the batch, all-reduced by the loop
        x, y = batch
        logits = model(x)
        return {
            "loss_sum": F.cross_entropy(logits, y, reduction="sum"),
            "correct": (logits.argmax(1) == y).sum(),
            "count": torch.tensor(len(y)),
        }
