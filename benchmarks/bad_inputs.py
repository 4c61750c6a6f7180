"""Run every bad input we guard against and print a markdown table of what the user sees.

python -m benchmarks.bad_inputs > docs/bad-inputs.md
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import ROOT

MR = ROOT.parent / "shared" / "data" / "rt-polarity"


def cases(tmp: Path) -> list[tuple[str, list[str], dict]]:
    (tmp / "empty").mkdir()
    (tmp / "corrupt").mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (tmp / "corrupt" / name).write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 20)
    (tmp / "mr-missing").mkdir()
    (tmp / "mr-missing" / "rt-polarity.pos").write_text("good\n")
    (tmp / "mr-empty").mkdir()
    (tmp / "mr-empty" / "rt-polarity.pos").write_text("good\n")
    (tmp / "mr-empty" / "rt-polarity.neg").write_text("")
    (tmp / "exists.json").write_text("{}")
    (tmp / "ckpt").mkdir()
    (tmp / "ckpt" / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    (tmp / "not-a-tarball.tar.gz").write_bytes(b"<html>a captive portal</html>")
    (tmp / "cache").mkdir()
    subprocess.run(
        [
            sys.executable,
            *"run.py --max-steps 4 --checkpoint-every 4 --no-progress --checkpoint-dir".split(),
            str(tmp / "done"),
            "--output",
            str(tmp / "done.json"),
        ],
        cwd=ROOT,
        env={**os.environ, "DISTBENCH_NO_DOWNLOAD": "1"},
        check=True,
        capture_output=True,
    )
    bad_mirror = dict(
        DISTBENCH_NO_DOWNLOAD="0",
        DISTBENCH_CACHE=str(tmp / "cache"),
        DISTBENCH_MR_URL=(tmp / "not-a-tarball.tar.gz").as_uri(),
    )
    torchrun = dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x")
    bert = ["--task", "bert-sentiment", "--data-dir", str(MR)]
    return [
        ("unknown backend", ["--backend", "mpi"], {}),
        ("unknown task", ["--task", "imagenet"], {}),
        ("a task file that does not exist", ["--task", "no/such/task.py:Task"], {}),
        ("a task class that lacks part of the interface", ["--task", "distbench.config:RunConfig"], {}),
        ("non-positive batch size", ["--batch-size", "0"], {}),
        ("non-positive learning rate", ["--lr", "-0.1"], {}),
        ("non-positive epochs", ["--epochs", "0"], {}),
        ("not a number", ["--epochs", "two"], {}),
        (
            "batch not divisible by world size (torchrun, 3 processes)",
            ["--backend", "ddp", "--batch-size", "64"],
            dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"),
        ),
        ("--data-dir does not exist", ["--data-dir", "/nope"], {}),
        ("--data-dir without MNIST files", ["--data-dir", str(tmp / "empty")], {}),
        ("corrupt MNIST IDX files", ["--data-dir", str(tmp / "corrupt")], {}),
        ("MR data dir missing a file", ["--task", "bert-sentiment", "--data-dir", str(tmp / "mr-missing")], {}),
        ("MR file with no lines", ["--task", "bert-sentiment", "--data-dir", str(tmp / "mr-empty")], {}),
        ("unknown BERT model id, offline", [*bert, "--model", "no-such/model"], {"HF_HUB_OFFLINE": "1"}),
        ("--max-length out of range", [*bert, "--max-length", "4096"], {}),
        ("non-positive --head-lr", [*bert, "--head-lr", "0"], {}),
        ("--output .json exists (no --force)", ["--output", str(tmp / "exists.json")], {}),
        ("--output with another suffix", ["--output", "results.csv"], {}),
        ("--output where nothing can be written", ["--output", "/proc/nope/run.json"], {}),
        ("MR download that is not the archive", ["--task", "bert-sentiment", "--model", "tiny-random"], bad_mirror),
        ("corrupt checkpoint", ["--checkpoint-dir", str(tmp / "ckpt")], {}),
        ("checkpoint past --max-steps", ["--checkpoint-dir", str(tmp / "done"), "--max-steps", "2"], {}),
        ("--backend horovod under torchrun", ["--backend", "horovod"], torchrun),
        ("--backend single with 2 processes", ["--backend", "single"], torchrun),
        ("--backend ddp under horovodrun", ["--backend", "ddp"], dict(HOROVOD_RANK="0", HOROVOD_SIZE="2")),
        (
            "--accumulate that does not split the batch (torchrun, 2 processes)",
            ["--backend", "ddp", "--batch-size", "64", "--accumulate", "3"],
            dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"),
        ),
        ("--grad-compression for the single backend", ["--grad-compression", "fp16"], {}),
        (
            "--grad-compression bf16 under horovod",
            ["--backend", "horovod", "--grad-compression", "bf16"],
            dict(HOROVOD_RANK="0", HOROVOD_SIZE="1", HOROVOD_LOCAL_RANK="0", HOROVOD_LOCAL_SIZE="1"),
        ),
        ("compare: unknown backend", ["compare", "--backends", "ddp,mpi", "--out", str(tmp / "c")], {}),
        ("compare: no rounds", ["compare", "--repeats", "0", "--out", str(tmp / "c")], {}),
        ("compare: a link rate tc cannot read", ["compare", "--link-rate", "100mb", "--out", str(tmp / "c")], {}),
        ("compare: more simulated nodes than cores", ["compare", "--nodes", "64", "--out", str(tmp / "c")], {}),
        ("simulate: a one-process backend", ["simulate", "--backend", "single"], {}),
        (
            "simulate: more horovodrun nodes than local host names",
            ["simulate", "--backend", "horovod", "--nodes", "3"],
            {},
        ),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("| bad input | command | exit | what the user sees (stderr) |")
        print("|---|---|---|---|")
        for what, args, env in cases(tmp):
            full_env = {**os.environ, "DISTBENCH_NO_DOWNLOAD": "1", **env}
            proc = subprocess.run(
                [sys.executable, "run.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
            )
            seen = " / ".join(line for line in proc.stderr.strip().splitlines()).replace(str(tmp), "$TMP")
            shown = " ".join(shlex.quote(a) for a in args).replace(str(tmp), "$TMP").replace(str(MR), "$MR")
            env_txt = " ".join(f"{k}={v}" for k, v in env.items() if k != "HF_HUB_OFFLINE").replace(str(tmp), "$TMP")
            print(
                f"| {what} | `{(env_txt + ' ') if env_txt else ''}python run.py {shown}` | {proc.returncode} | "
                f"{seen.replace('|', '/')} |"
            )


if __name__ == "__main__":
    main()
