"""Launch real commands the way users do, with a timeout, failing with their captured output."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from backends import command

ROOT = Path(__file__).resolve().parents[1]


def child_env(tmp_path: Path | None = None, **extra: str) -> dict:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DISTBENCH_NO_DOWNLOAD="1",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if tmp_path is not None:
        env["DISTBENCH_CACHE"] = str(tmp_path / "cache")
    env.update(extra)
    return env


def run_cmd(cmd: list[str], timeout: float, env: dict | None = None, expect_rc: int | None = 0, cwd: Path = ROOT):
    """Run cmd; on timeout or an unexpected exit code, fail with the command's own output."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env or child_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-3000:]}\n{err[-3000:]}") from e
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError(
            f"exit {proc.returncode} (expected {expect_rc}): {' '.join(map(str, cmd))}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def launch(backend: str, nprocs: int, args: list[str], launcher: str | None = None) -> list[str]:
    """The real launcher command for a backend at a world size."""
    return command(backend, nprocs, args, launcher)


def read_record(path: Path) -> dict:
    return json.loads(path.read_text())
