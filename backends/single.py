"""One process, no process group: the reference every other backend is compared against."""

from __future__ import annotations

import torch

from distbench.backends.base import Backend


class SingleBackend(Backend):
    name = "single"

    def setup(self) -> None:
        if torch.cuda.is_available():
            self.device = torch.device("cuda", 0)
