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


def command(backend: str, nprocs: int, args: list[str], launcher: str | None = None) -> list[str]:
    """`run.py --backend BACKEND ARGS` started by the backend's launcher with nprocs processes."""
    return launch_argv(launcher or DEFAULT_LAUNCHER[backend], nprocs, ["run.py", "--backend", backend, *args])


def launch_argv(launcher: str, nprocs: int, argv: list[str]) -> list[str]:
    """A Python script with its arguments (argv) under a launcher; rendezvous on loopback with a free port."""
    if launcher == "python":
        if nprocs != 1:
            raise ValueError(f"plain python runs one process, not {nprocs}")
        return [sys.executable, *argv]
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), "--nproc_per_node", str(nprocs), "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), *argv]  # fmt: skip
    if launcher == "accelerate":
        if nprocs == 1:
            return [sys.executable, *argv]  # accelerate launch with one process is plain python
        return [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nprocs),
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), *argv]  # fmt: skip
    if launcher == "horovodrun":
        return [str(BIN / "horovodrun"), "-np", str(nprocs), "-H", f"localhost:{nprocs}", sys.executable, *argv]
    raise ValueError(f"unknown launcher {launcher!r}")
