"""docs/reliability.md's table of bad inputs, made from the messages themselves: every case is run in this process,
through the command line's own entry point (`distbench.cli.main`), and what it writes on stderr goes into the table.

python -m benchmarks.bad_inputs            # rewrite the table in docs/reliability.md
python -m benchmarks.bad_inputs --check    # exit 1 if the table there is not what the messages are now

tests/cli/test_bad_input_table.py runs the check, so that the table cannot go stale. Every case is refused before
any process group starts, which is what makes it fast enough to run in-process (seconds, no launch). The machine is
taken to be a 4-core one (its affinity mask), so that a message that counts cores reads the same everywhere.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from benchmarks.harness import ROOT, replace_section

DOC = ROOT / "docs" / "reliability.md"
SECTION = "## Bad input: what the user sees"
CORES = {0, 1, 2, 3}  # the affinity mask the cases run with
TORCHRUN_2 = dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x")


@dataclass(frozen=True)
class Case:
    what: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def write_files(tmp: Path) -> None:
    """The bad folders and files the cases point at."""
    for folder in ("empty", "corrupt", "mr-missing", "mr-empty", "mr", "ckpt", "cache"):
        (tmp / folder).mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (tmp / "corrupt" / name).write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 20)
    (tmp / "mr-missing" / "rt-polarity.pos").write_text("good\n")
    (tmp / "mr-empty" / "rt-polarity.pos").write_text("good\n")
    (tmp / "mr-empty" / "rt-polarity.neg").write_text("")
    for name, line in (("rt-polarity.pos", "a fine film"), ("rt-polarity.neg", "a dull film")):
        (tmp / "mr" / name).write_text(f"{line}\n" * 20)  # well-formed: the options are what is wrong
    (tmp / "exists.json").write_text("{}")
    (tmp / "ckpt" / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    (tmp / "not-a-tarball.tar.gz").write_bytes(b"<html>a captive portal</html>")


def cases(tmp: Path) -> list[Case]:
    bad_mirror = dict(
        DISTBENCH_NO_DOWNLOAD="0",
        DISTBENCH_CACHE=str(tmp / "cache"),
        DISTBENCH_MR_URL=(tmp / "not-a-tarball.tar.gz").as_uri(),
    )
    bert = ["--task", "bert-sentiment", "--data-dir", str(tmp / "mr")]
    horovod_1 = dict(HOROVOD_RANK="0", HOROVOD_SIZE="1", HOROVOD_LOCAL_RANK="0", HOROVOD_LOCAL_SIZE="1")
    c = tmp / "c"
    return [
        Case("unknown backend", ["--backend", "mpi"]),
        Case("unknown task", ["--task", "imagenet"]),
        Case("a task file that does not exist", ["--task", "no/such/task.py:Task"]),
        Case("a task class that lacks part of the interface", ["--task", "distbench.config:RunConfig"]),
        Case("non-positive batch size", ["--batch-size", "0"]),
        Case("non-positive learning rate", ["--lr", "-0.1"]),
        Case("non-positive epochs", ["--epochs", "0"]),
        Case("not a number", ["--epochs", "two"]),
        Case(
            "batch not divisible by world size (torchrun, 3 processes)",
            ["--backend", "ddp", "--batch-size", "64"],
            dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"),
        ),
        Case("--data-dir does not exist", ["--data-dir", "/nope"]),
        Case("--data-dir without MNIST files", ["--data-dir", str(tmp / "empty")]),
        Case("corrupt MNIST IDX files", ["--data-dir", str(tmp / "corrupt")]),
        Case("MR data dir missing a file", ["--task", "bert-sentiment", "--data-dir", str(tmp / "mr-missing")]),
        Case("MR file with no lines", ["--task", "bert-sentiment", "--data-dir", str(tmp / "mr-empty")]),
        Case("unknown BERT model id, offline", [*bert, "--model", "no-such/model"]),
        Case("--max-length out of range", [*bert, "--max-length", "4096"]),
        Case("non-positive --head-lr", [*bert, "--head-lr", "0"]),
        Case("--output .json exists (no --force)", ["--output", str(tmp / "exists.json")]),
        Case("--output with another suffix", ["--output", "results.csv"]),
        Case("--output where nothing can be written", ["--output", "/proc/nope/run.json"]),
        Case("MR download that is not the archive", ["--task", "bert-sentiment", "--model", "tiny-random"], bad_mirror),
        Case("corrupt checkpoint", ["--checkpoint-dir", str(tmp / "ckpt")]),
        Case("checkpoint past --max-steps", ["--checkpoint-dir", str(tmp / "done"), "--max-steps", "2"]),
        Case("--backend horovod under torchrun", ["--backend", "horovod"], TORCHRUN_2),
        Case("--backend single with 2 processes", ["--backend", "single"], TORCHRUN_2),
        Case("--backend ddp under horovodrun", ["--backend", "ddp"], dict(HOROVOD_RANK="0", HOROVOD_SIZE="2")),
        Case(
            "--accumulate that does not split the batch (torchrun, 2 processes)",
            ["--backend", "ddp", "--batch-size", "64", "--accumulate", "3"],
            TORCHRUN_2,
        ),
        Case("--grad-compression for the single backend", ["--grad-compression", "fp16"]),
        Case(
            "--grad-compression bf16 under horovod", ["--backend", "horovod", "--grad-compression", "bf16"], horovod_1
        ),
        Case("--zero-stage for a backend without ZeRO stages", ["--zero-stage", "2"]),
        Case("--zero-stage out of range", ["--backend", "deepspeed", "--zero-stage", "4"]),
        Case("--fault of no form", ["--fault", "kill:1"]),
        Case(
            "--fault on a rank the job does not have (torchrun, 2 processes)",
            ["--backend", "ddp", "--fault", "kill:2@5"],
            TORCHRUN_2,
        ),
        Case(
            "compare --restarts with horovod on one node (Horovod Elastic needs another host)",
            ["compare", "--backends", "horovod", "--restarts", "1", "--out", str(c)],
        ),
        Case("an unknown command", ["comapre", "--backends", "ddp"]),
        Case("compare: unknown backend", ["compare", "--backends", "ddp,mpi", "--out", str(c)]),
        Case(
            "compare: a configuration that cannot run (batch 64 over 3 processes), before any launch",
            ["compare", "--backends", "ddp", "--nprocs", "3", "--out", str(c)],
        ),
        Case(
            "compare: a per-node link with one node",
            ["compare", "--backends", "ddp", "--link-mode", "per-node", "--link-rate", "1gbit", "--out", str(c)],
        ),
        Case(
            "compare: a link taken down where the nodes have no link of their own",
            ["compare", "--backends", "ddp", "--nodes", "2", "--fault", "link-down:1@5:3", "--out", str(c)],
        ),
        Case(
            "run: a link taken down outside a per-node network",
            ["--fault", "link-down:0@5:3", "--output", str(tmp / "r.json")],
        ),
        Case(
            "compare: a lost node that comes back, to a job that does not continue",
            ["compare", "--backends", "ddp", "--nodes", "2", "--fault", "kill-node:1@5:30", "--out", str(c)],
        ),
        Case(
            "compare: a host that comes back to Horovod Elastic, without a reset for its return",
            ["compare", "--backends", "horovod", "--nodes", "2", "--restarts", "1", "--fault", "kill-node:1@5:30"]
            + ["--out", str(c)],
        ),
        Case(
            "run: a lost node that comes back, in a launch of its own",
            ["--fault", "kill-node:0@5:30", "--output", str(tmp / "r.json")],
        ),
        Case("compare: --extra setting what the sweep sets", ["compare", "--extra", "--backend ddp", "--out", str(c)]),
        Case("compare: no rounds", ["compare", "--repeats", "0", "--out", str(c)]),
        Case("compare: a link rate tc cannot read", ["compare", "--link-rate", "100mb", "--out", str(c)]),
        Case("compare: more simulated nodes than cores", ["compare", "--nodes", "8", "--nprocs", "1", "--out", str(c)]),
        Case("simulate: a one-process backend", ["simulate", "--backend", "single"]),
        Case("profile: an output that is not a .json file", ["profile", "--output", str(tmp / "p.txt")]),
        Case("profile: no step to measure", ["profile", "--output", str(tmp / "p.json"), "--steps", "0"]),
        Case(
            "run: a profile measured at another micro-batch",
            ["--emulate", "docs/profiles/mnist-b32-cpu.json", "--batch-size", "64", "--output", str(tmp / "r.json")],
        ),
        Case(
            "compare: emulated at a micro-batch the profile was not measured at",
            [
                "compare",
                "--backends",
                "ddp",
                "--nprocs",
                "4",
                "--emulate",
                "docs/profiles/mnist-b32-cpu.json",
                "--out",
                str(c),
            ],
        ),
        Case("atlas: neither runs nor a profile to take the computation from", ["atlas", "--output", str(c)]),
        Case(
            "atlas: a link rate that is no rate",
            ["atlas", "--from-profile", "docs/profiles/mnist-b32-cpu.json", "--link-rates", "fast", "--output", str(c)],
        ),
        Case("slurm-script: a time limit out of Slurm's forms", ["slurm-script", "--time", "25:99:99", "--out", "r"]),
        Case(
            "slurm-script: --nprocs beside another --gpus-per-node",
            ["slurm-script", "--nprocs", "2", "--gpus-per-node", "4", "--out", "r"],
        ),
        Case(
            "project: a folder that no compare wrote",
            ["project", str(tmp / "empty"), "--link-rate", "1gbit", "--output", str(tmp / "p.json")],
        ),
    ]


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """os.environ with `env` set, as a child process started with it would see it (the launch environment read
    afresh); restored after."""
    from distbench import process

    before = dict(os.environ)
    os.environ.update(env)
    process.current.cache_clear()  # read once per process: this "process" starts here
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
        process.current.cache_clear()


@contextlib.contextmanager
def this_process_kept() -> Iterator[None]:
    """What a command changes in the process that runs it (torch's threads, the SIGTERM handler a sweep installs,
    the working directory), put back after; Python warnings silenced (a process prints each once, so they would
    appear or not depending on what ran before)."""
    import torch

    threads, sigterm, cwd = torch.get_num_threads(), signal.getsignal(signal.SIGTERM), os.getcwd()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            os.chdir(ROOT)
            yield
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGTERM, sigterm)
        os.chdir(cwd)


def reached_training(trainer) -> None:
    """In place of Trainer.train while the cases run: a case that is not refused stops where training would start,
    loudly, instead of training to its end."""
    raise RuntimeError("a bad input of the table was not refused: it reached training")


def finished_checkpoint(folder: Path) -> None:
    """A run of 4 steps that checkpoints at its last: what "checkpoint past --max-steps" resumes."""
    args = ["--max-steps", "4", "--checkpoint-every", "4", "--no-progress", "--threads", "1"]
    code, err = command([*args, "--checkpoint-dir", str(folder), "--output", str(folder / "r.json")])
    if code != 0:
        raise RuntimeError(f"the run that writes the finished checkpoint failed: {err}")


def command(args: list[str], env: dict[str, str] | None = None, out: io.StringIO | None = None) -> tuple[int, str]:
    """`python run.py ARGS` with `env`, run in this process: its exit code and what it wrote on stderr (its stdout
    into `out`, if given)."""
    from distbench.cli import main

    err, out = io.StringIO(), out or io.StringIO()
    with environment(env or {}), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, err.getvalue()


def row(case: Case, code: int, stderr: str, tmp: Path) -> str:
    seen = " / ".join(stderr.strip().splitlines()).replace(str(tmp), "$TMP")
    shown = " ".join(shlex.quote(a) for a in case.args).replace(str(tmp), "$TMP")
    env = " ".join(f"{k}={v}" for k, v in case.env.items()).replace(str(tmp), "$TMP")
    return f"| {case.what} | `{env + ' ' if env else ''}python run.py {shown}` | {code} | {seen.replace('|', '/')} |"


def table() -> list[str]:
    """The section: what each bad input makes the command say, now."""
    rows = []
    with tempfile.TemporaryDirectory() as d, environment({"HF_HUB_OFFLINE": "1", "DISTBENCH_NO_DOWNLOAD": "1"}):
        tmp = Path(d)
        write_files(tmp)
        with this_process_kept():
            from distbench.training.loop import Trainer

            finished_checkpoint(tmp / "done")
            # as on a machine of CORES (a message that counts cores reads the same everywhere)
            with (
                mock.patch.object(Trainer, "train", reached_training),
                mock.patch("os.sched_getaffinity", lambda pid: set(CORES)),
            ):
                for case in cases(tmp):
                    try:
                        rows.append(row(case, *command(case.args, case.env), tmp))
                    except RuntimeError as e:
                        raise RuntimeError(f"{case.what}: {e}") from e
    return [
        SECTION,
        "",
        *textwrap.wrap(
            "Every case is refused before any process group starts, with one line and exit code 2. The table is made "
            "from the messages themselves: `python -m benchmarks.bad_inputs` rewrites it, and "
            "`tests/cli/test_bad_input_table.py` fails when it differs from them. Each case runs as on a "
            f"{len(CORES)}-core machine; $TMP is a scratch folder.",
            width=115,
        ),
        "",
        "| bad input | command | exit | what the user sees (stderr) |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def regenerated() -> str:
    """docs/reliability.md with its table of bad inputs made anew."""
    return replace_section(DOC.read_text(), SECTION, table()).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    now = regenerated()
    if "--check" in argv:
        if now != DOC.read_text():
            print(f"{DOC}: the table of bad inputs is stale; run python -m benchmarks.bad_inputs", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(now)
    print(f"written: {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
