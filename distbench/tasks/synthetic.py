"""synthetic-resnet: torchvision's ResNet on random images, throughput only.

The workload of Horovod's `examples/pytorch/pytorch_synthetic_benchmark.py` (ResNet-50 by default, SGD at 0.01,
cross-entropy over 1,000 classes, 224 x 224 images), so that distbench's numbers can be set beside the numbers
users know from it. The images and labels are random (data/synthetic.py): the accuracy is not meaningful, and
the record says so (`accuracy_meaningful`: false). The model has no dropout; --dropout changes nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from distbench.config import RunConfig
from distbench.data.synthetic import SyntheticImages
from distbench.models.resnet import RESNETS, build_resnet
from distbench.tasks import TensorClassification

NUM_CLASSES = 1000
N_TRAIN, N_TEST = 6400, 64  # steps are what matters; the test set is only a check that evaluation runs


class SyntheticResnetTask(TensorClassification):
    name = "synthetic-resnet"
    defaults = {"epochs": 1, "batch_size": 32, "lr": 0.01, "schedule": False}
    accuracy_meaningful = False

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.arch = cfg.model or "resnet50"
        if self.arch not in RESNETS:
            from distbench.errors import UserError

            raise UserError(f"--model {self.arch!r}: synthetic-resnet runs one of {', '.join(RESNETS)}")

    def build_model(self) -> nn.Module:
        return build_resnet(self.arch, NUM_CLASSES)

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return [model.layer1, model.layer2, model.layer3, model.layer4]  # its stages

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.cfg.lr)  # as Horovod's benchmark (there: x world size)

    def datasets(self):
        size, seed = self.cfg.image_size, self.cfg.seed
        train = SyntheticImages(N_TRAIN, size, NUM_CLASSES, seed)
        test = SyntheticImages(N_TEST, size, NUM_CLASSES, seed + 1)
        info = {
            "name": f"synthetic {size}x{size} images, {NUM_CLASSES} classes",
            "source": "random, from the seed",
            "model": self.arch,
            "image_size": size,
        }
        return train, test, info
