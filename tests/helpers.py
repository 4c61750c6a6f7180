"""Launch real commands the way users do, with a timeout, failing with their captured output."""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.harness import ROOT
from distbench.data import mnist
from distbench.launching.commands import command, usual_launcher
from distbench.launching.launch import TORCHRUN, Launcher


def child_env(tmp_path: Path | None = None, **extra: str) -> dict:
    """The benchmarks' child environment (offline, unbuffered), one thread per process, and with tmp_path a data
    cache of the test's own."""
    cache = {"DISTBENCH_CACHE": str(tmp_path / "cache")} if tmp_path is not None else {}
    env = harness.child_env(
        TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **cache, **extra
    )
    env.pop("DISTBENCH_TEST_CPU", None)  # a pytest the test starts (test_fresh_clone) records nothing of its own
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


# DeepSpeed's own launcher starts a run 5 s later than torchrun here (its runner, then its launch.py, each import
# DeepSpeed and torch before any worker starts): the tests of a launcher start deepspeed with it (test_contract, the
# ZeRO sweep and the killed run of test_deepspeed, compare everywhere); the others with torchrun, which DeepSpeed
# supports as well (README), so that the suite pays that start once per launcher test, not once per run
QUICKER_LAUNCHER = {"deepspeed": TORCHRUN}


def follows_after_resizing(rec: dict, free: dict, changed_at: int) -> None:
    """A run that went on with fewer ranks from its step `changed_at` (the global batch kept, split anew) against the
    fault-free run: the same steps before it, bit for bit; then the equivalence tolerances counted from the change, as
    between any two world sizes (fairness: float reordering only for EARLY_STEPS, amplified after; measured, Horovod
    Elastic's shrink at step 10 of MNIST: 2e-5 up to step 26, 8.4e-4 at step 27 on one AMD EPYC host, under 1e-4
    throughout on another). A batch split wrongly after the change differs from its first step by 1e-2 or more."""
    from distbench.training import fairness

    ours, theirs = rec["loss_history"], free["loss_history"]
    assert len(ours) == len(theirs) and ours[:changed_at] == theirs[:changed_at]
    diffs = [abs(a - b) for a, b in zip(ours[changed_at:], theirs[changed_at:], strict=True)]
    print(f"after the change at step {changed_at}: per-step loss differences {', '.join(f'{d:.1e}' for d in diffs)}")
    assert max(diffs[: fairness.EARLY_STEPS]) < fairness.LOSS_TOLERANCE and max(diffs) < fairness.LATE_TOLERANCE
    assert abs(rec["param_checksum"] / free["param_checksum"] - 1) < fairness.CHECKSUM_TOLERANCE


def started_by(backend: str) -> Launcher:
    """The launcher that launch() starts `backend` with: its usual one, or QUICKER_LAUNCHER's."""
    return QUICKER_LAUNCHER.get(backend) or usual_launcher(backend)


def launch(backend: str, nprocs: int, args: list[str], launcher: Launcher | None = None) -> list[str]:
    """The real launcher command for a backend at a world size: the launcher given, else started_by's."""
    return command(backend, nprocs, args, launcher or started_by(backend))


def read_record(path: Path) -> dict:
    return json.loads(path.read_text())


def run_py(args, tmp_path, timeout=120, expect_rc=None, **env):
    cmd = [sys.executable, "run.py", *args]
    return run_cmd(cmd, timeout=timeout, env=child_env(tmp_path, **env), expect_rc=expect_rc)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def write_idx(path, array: np.ndarray, magic: int, gz: bool = False):
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def make_mnist_dir(root, n_train=40, n_test=12, gz=False, layout="flat"):
    folder = {"flat": root, "torchvision": root / "MNIST" / "raw"}[layout]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(0)
    suffix = ".gz" if gz else ""
    arrays = {
        "train_images": rng.randint(0, 256, (n_train, 28, 28)),
        "train_labels": rng.randint(0, 10, n_train),
        "test_images": rng.randint(0, 256, (n_test, 28, 28)),
        "test_labels": rng.randint(0, 10, n_test),
    }
    for key, stem in mnist.FILES.items():
        magic = mnist.IMAGE_MAGIC if key.endswith("images") else mnist.LABEL_MAGIC
        write_idx(folder / (stem + suffix), arrays[key], magic, gz=gz)
    return arrays


# ---- the report on synthetic sweeps ----------------------------------------------------------------
def synthetic_record(backend: str, world: int, threads: int, rnd: int, sps: float, status: str = "ok") -> dict:
    rec = {
        "task": "mnist",
        "backend": backend,
        "world_size": world,
        "threads_per_process": threads,
        "link_rate": "none",  # unshaped, as schema version 2 writes it (distbench/records.py)
        "round": rnd,
        "status": status,
        "command": f"run {backend} x{world}",
    }
    if status != "ok":
        return {**rec, "error": "boom\nerror: it broke"}
    return {
        **rec,
        "samples_per_sec": sps,
        "step_time_ms": {"p50": 10.0, "p90": 12.0},
        "step_breakdown_ms": {"data_ms": 1.0, "forward_backward_ms": 7.0, "optimizer_ms": 2.0},
        "startup_s": 3.0,
        "launch_to_first_step_s": 5.0,
        "peak_rss_mb": 900.0,
        "final_loss": 0.1,
        "eval_accuracy": 0.95,
        "eval_count": 500,
        "steps": 60,
        "warmup_steps": 5,
        "epochs": 1.0,
        "loss_history": [1.0, 0.5, 0.1],
        "environment": {"torch": "x"},
    }


def synthetic_sweep(noise: float, drift: list[float], horovod_ratio: float = 0.8, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    truth = (
        ("single", 1, 1, 1000.0),
        ("single", 1, 2, 1600.0),
        ("ddp", 2, 1, 1600.0),
        ("horovod", 2, 1, 1600.0 * horovod_ratio),
    )
    records = []
    for rnd, d in enumerate(drift, 1):
        for backend, world, threads, true in truth:
            records.append(synthetic_record(backend, world, threads, rnd, true * d * (1 + rng.normal(0, noise))))
    return records


def cut_short(records: list[dict]) -> bytes:
    """The records as results.jsonl lines, the last one cut short halfway, without its newline."""
    lines = [json.dumps(r, sort_keys=True).encode() for r in records]
    return b"".join(line + b"\n" for line in lines[:-1]) + lines[-1][: len(lines[-1]) // 2]


def py(args: str, *more) -> list[str]:
    """`python ARGS MORE...` with this interpreter: `py("run.py compare --nprocs 2 --out", out)`."""
    return [sys.executable, *args.split(), *map(str, more)]


def run_in(tmp_path: Path, cmd: list[str], timeout: float, expect_rc: int | None = 0):
    """run_cmd with the test's own child environment (its data cache in tmp_path)."""
    return run_cmd(cmd, timeout=timeout, env=child_env(tmp_path), expect_rc=expect_rc)


def run_here(args, tmp_path: Path, expect_rc: int | None = None, **env: str) -> subprocess.CompletedProcess:
    """`python run.py ARGS` in this process, as benchmarks/bad_inputs.py runs its cases: the launch environment read
    afresh, the process's state (threads, signal handlers, working directory) put back after. For input refused
    before anything starts, and commands that launch nothing (`project`): milliseconds instead of a fresh
    interpreter's seconds. What only a fresh process shows (a library's import-time output on stderr) is what the
    tests that run run.py as a process keep checking. With `expect_rc`, another exit code fails with its stderr."""
    from benchmarks.bad_inputs import command, this_process_kept

    out = io.StringIO()
    with this_process_kept():
        code, err = command([str(a) for a in args], {"DISTBENCH_CACHE": str(tmp_path / "cache"), **env}, out)
    if expect_rc is not None and code != expect_rc:
        raise AssertionError(f"exit {code} (expected {expect_rc}): run.py {' '.join(map(str, args))}\n{err[-4000:]}")
    return subprocess.CompletedProcess(["run.py", *map(str, args)], code, out.getvalue(), err)


def assert_one_process_per_node_on_its_cores(rec: dict) -> None:
    """A record of 2 simulated nodes x 1 process: each rank ran on its node's cores, the nodes' cores disjoint, as
    many threads as its node's cores."""
    topo = rec["topology"]
    assert (topo["nodes"], topo["local_world_size"], topo["simulated"], topo["rank_nodes"]) == (2, 1, True, [0, 1])
    assert topo["rank_cores"] == topo["node_cores"] and not set(topo["rank_cores"][0]) & set(topo["rank_cores"][1])
    assert rec["environment"]["threads_per_process"] == len(topo["node_cores"][0])  # threads from the share


# what a commbench worker found itself in (planning/worker.py), as a test's stand-in executor returns it: x2 on one
# node, unshaped
FOUND = {"world_size": 2, "nodes": 1, "link_rate": "none", "link_mode": "shared", "grad_compression": "none"}
