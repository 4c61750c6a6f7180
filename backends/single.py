"""One process, no process group: the reference every other backend is compared against."""

from __future__ import annotations

import os

import torch

from backends.base import Backend, env_world_size
from distbench.errors import UserError


class SingleBackend(Backend):
    name = "single"
    launchers = ("python",)

    @classmethod
    def check_launcher(cls, env=os.environ) -> None:
        if env_world_size(env) > 1:
            raise UserError(
                f"--backend single runs one process but was started with {env_world_size(env)}; "
                "use --backend ddp, accelerate or horovod under a launcher"
            )

    def setup(self) -> None:
        if torch.cuda.is_available():
            self.device = torch.device("cuda", 0)
