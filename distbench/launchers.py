"""Command lines that start a backend with N processes on this machine, with its users' launcher."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
DEFAULT_LAUNCHER = {"single": "python", "ddp": "torchrun", "accelerate": "accelerate", "horovod": "horovodrun"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(backend: str, nprocs: int, args: list[str], launcher: str | None = None, script: str = "run.py") -> list[str]:
    """The launch command; rendezvous on loopback with a free port so that runs never collide."""
    launcher = launcher or DEFAULT_LAUNCHER[backend]
    tail = [script, "--backend", backend, *args]
    if launcher == "python":
        if nprocs != 1:
            raise ValueError(f"--backend {backend} under plain python runs one process, not {nprocs}")
        return [sys.executable, *tail]
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), "--nproc_per_node", str(nprocs), "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), *tail]  # fmt: skip
    if launcher == "accelerate":
        if nprocs == 1:
            return [sys.executable, *tail]  # accelerate launch with one process is plain python
        return [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nprocs),
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), *tail]  # fmt: skip
    if launcher == "horovodrun":
        return [str(BIN / "horovodrun"), "-np", str(nprocs), "-H", f"localhost:{nprocs}", sys.executable, *tail]
    raise ValueError(f"unknown launcher {launcher!r}")
