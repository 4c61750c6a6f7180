"""The backend contract on every rank, under each backend's own launcher (tests/scripts/contract.py), and under
torchrun where a backend's users start it so too (deepspeed: every other test starts it under torchrun,
tests/helpers.QUICKER_LAUNCHER, and test_equivalence checks what it found)."""

import pytest

from distbench.launching.commands import usual_launcher
from distbench.launching.launch import TORCHRUN, local_argv, resolve
from tests.helpers import run_in


@pytest.mark.multiproc
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "backend,launcher",
    [
        ("ddp", None),
        ("accelerate", None),
        ("accelerate", TORCHRUN),
        ("horovod", None),
        ("fsdp", None),
        ("accelerate-fsdp", None),
        ("deepspeed", None),
        ("accelerate-deepspeed", None),
        ("fabric", None),
    ],
    ids=[
        "ddp-torchrun",
        "accelerate-launch",
        "accelerate-torchrun",
        "horovod-horovodrun",
        "fsdp-torchrun",
        "accelerate-fsdp-launch",
        "deepspeed-launcher",
        "accelerate-deepspeed-launch",
        "fabric-run",
    ],
)
def test_contract_holds_on_every_rank(tmp_path, backend, launcher):
    launcher = launcher or usual_launcher(backend)
    cmd = resolve(local_argv(launcher, ["-m", "tests.scripts.contract", "--backend", backend], 2))
    proc = run_in(tmp_path, cmd, timeout=150)
    assert f"contract ok: {backend} x2 under {launcher.name}" in proc.stdout
