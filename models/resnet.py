"""torchvision's ResNets, as Horovod's synthetic benchmark builds them (`getattr(torchvision.models, name)()`)."""

from __future__ import annotations

from torch import nn

RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")


def build_resnet(name: str = "resnet50", num_classes: int = 1000) -> nn.Module:
    """An untrained torchvision ResNet, its weights drawn from torch's global RNG (seeded by the caller)."""
    import torchvision.models

    if name not in RESNETS:
        raise ValueError(f"unknown ResNet {name!r}; choose one of {', '.join(RESNETS)}")
    return getattr(torchvision.models, name)(num_classes=num_classes)
