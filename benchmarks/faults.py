"""What a killed or hung rank costs each library, started the way its users start it to continue after a failure,
into docs/faults.md.

    python -m benchmarks.faults restarts [--rounds 3] [--steps 30] [--out docs/faults.md]
    python -m benchmarks.faults straggler [--rounds 3] [--out docs/faults.md]   # run.py compare --fault none,slow:1:3
    python -m benchmarks.faults link [--rounds 2] [--out docs/faults.md]   # run.py compare --fault none,link-down:...

`restarts`: MNIST on 2 simulated nodes of one process each, a checkpoint (and Horovod Elastic's commit) every 10
steps, rank 1 (node 1's) killed (`--fault kill:1@15`), node 1 lost (`--fault kill-node:1@15`: its agent too) or rank 1
hung (`--fault hang:1@15`, `--timeout-s 20`) after step 15,
and the same run without a fault, the libraries alternating within each round. Each library under the launcher its
users continue a job with, started as `compare --restarts 1 --nodes 2` starts it (sweep/executor.launch_config,
launching/commands.restarting_launcher): torchrun's agents with `--max-restarts 1` and a c10d rendezvous (ddp, fsdp,
deepspeed, fabric: DeepSpeed's and Fabric's own launchers restart nothing), `accelerate launch --max_restarts 1`
(accelerate), horovodrun's elastic form (horovod: Horovod Elastic, the survivor continues alone). The record's
`fault` (training/faults.py) gives what a continued run paid; a run that ended gives how long that took.
`straggler`: `run.py compare` of every library at x2 with and without rank 1 computing 3 times as long; its
report's Faults section. `link`: `run.py compare --restarts 1` of every library on 2 simulated nodes behind per-node
links, node 1's link down after step 15 for less than the collective timeout (5 s) and for more (30 s, `--timeout-s
20`); its report's Faults section.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section
from distbench.launching.commands import restarting_launcher
from distbench.launching.launch import resolve
from distbench.sweep.executor import launch_config, run_one
from distbench.training.fairness import LOSS_TOLERANCE

LIBRARIES = ("ddp", "accelerate", "fsdp", "deepspeed", "fabric", "horovod")
FAULTS = ("none", "kill:1@15", "kill-node:1@15", "hang:1@15")
HANG_TIMEOUT_S = 20
SECTION = "## What a killed or hung rank costs each library"
STRAGGLER = "## A straggler"
STRAGGLER_DIR = ROOT / "docs" / "results" / "faults" / "straggler"
LINK = "## A link that goes down"
LINK_DIR = ROOT / "docs" / "results" / "faults" / "link-down"
LINK_FAULTS = "none,link-down:1@15:5,link-down:1@15:30"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


LAUNCHERS = {
    "torchrun": "torchrun --max-restarts 1 (c10d)",
    "accelerate launch": "accelerate launch --max_restarts 1",
    "horovodrun": "horovodrun --min-np 1 --max-np 2 (Horovod Elastic)",
}


def one_run(backend: str, fault: str, steps: int, folder: Path) -> dict:
    """One run on 2 simulated nodes under the launcher that continues it: its record (or how long until its job
    ended, failed), with the launcher in words."""
    out, ckpt = folder / f"{backend}-{fault}.json", folder / f"{backend}-{fault}-ckpt"
    timeout = HANG_TIMEOUT_S if fault.startswith("hang") else 60
    args = ["--max-steps", str(steps), "--threads", "1", "--dropout", "0", "--no-progress", "--timeout-s", str(timeout)]
    args += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--fault", fault, "--output", str(out)]
    launch = launch_config(backend, 2, 2, args, restarts=1)
    launcher = LAUNCHERS[restarting_launcher(backend, 1).name]
    rec = run_one(
        [resolve(c) for c in launch.commands],
        out,
        timeout + 240,
        folder / f"{backend}-{fault}.log",
        {**child_env(), **launch.env},
        continues=True,
    )
    run = {"backend": backend, "fault": fault, "launcher": launcher, "ok": rec["status"] == "ok"}
    return {**run, "ended_s": rec["elapsed_s"], **({"record": rec} if run["ok"] else {})}


@app.command()
def restarts(
    rounds: Annotated[int, typer.Option(help="rounds; the libraries and faults alternate within each")] = 3,
    steps: Annotated[int, typer.Option(help="steps of each run")] = 30,
    libraries: Annotated[str, typer.Option(help="comma-separated")] = ",".join(LIBRARIES),
    out: Annotated[Path, typer.Option(help="the document whose section is written")] = ROOT / "docs" / "faults.md",
) -> None:
    runs: list[dict] = []
    chosen = libraries.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, rounds + 1):
            order = [(b, f) for b in chosen for f in FAULTS]
            for backend, fault in order if rnd % 2 else order[::-1]:
                folder = Path(tmp) / f"r{rnd}"
                folder.mkdir(exist_ok=True)
                run = {**one_run(backend, fault, steps, folder), "round": rnd}
                print(f"round {rnd} {backend} {fault}: {_said(run)}", flush=True)
                runs.append(run)
    lines = restart_table(runs, rounds, steps, chosen)
    write_section(out, SECTION, lines)
    print("\n".join(lines))


def _said(run: dict) -> str:
    if not run["ok"]:
        return f"ended, failed, after {run['ended_s']:.1f} s"
    cost = run["record"].get("fault") or {}
    return f"ok after {run['ended_s']:.1f} s; {cost}"


def restart_table(runs: list[dict], rounds: int, steps: int, libraries: list[str]) -> list[str]:
    head = (
        f"Produced by `python -m benchmarks.faults restarts --rounds {rounds} --steps {steps}"
        + (f" --libraries {','.join(libraries)}" if tuple(libraries) != LIBRARIES else "")
        + f"` on {machine()}: "
        "MNIST on 2 simulated nodes of one process each (one thread, dropout off), a checkpoint (Horovod Elastic: a "
        "commit) every 10 steps, after step 15 rank 1 killed, node 1 lost (its launcher's agent killed too) or rank 1 "
        f"hung (hung: `--timeout-s {HANG_TIMEOUT_S}`; else 60); "
        "medians over the rounds (min-max), from the fault. Goodput: useful samples per second of the whole run, "
        "over the same library's run without a fault in the same round. Same run: the faulted run's loss history "
        "and final parameters equal the fault-free run's (bit for bit, or within float tolerance: every step's loss "
        f"within {LOSS_TOLERANCE:g}, the parameters' checksum within 1e-5 of it, where the job continued with fewer "
        "ranks, the same global batch split over them)."
    )
    lines = [SECTION, "", head, ""]
    lines += [
        "| library | launcher | fault | continued | job ended after (s) | first noticed (s) | restarted (s) "
        "| recovered (s) | steps redone | goodput vs no fault | same run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend in libraries:
        free = {r["round"]: r for r in runs if (r["backend"], r["fault"], r["ok"]) == (backend, "none", True)}
        for fault in FAULTS[1:]:
            mine = [r for r in runs if (r["backend"], r["fault"]) == (backend, fault)]
            if mine:
                lines.append(_row(backend, fault, mine, free))
    return [*lines, ""]


def _row(backend: str, fault: str, mine: list[dict], free: dict[int, dict]) -> str:
    ok = [r for r in mine if r["ok"]]
    costs = [r["record"]["fault"] for r in ok]
    ended = [r["ended_s"] for r in mine if not r["ok"]]
    goodput = [
        r["record"]["fault"]["goodput_samples_per_sec"] / _goodput(free[r["round"]]["record"])
        for r in ok
        if r["round"] in free
    ]
    same = [_same(r["record"], free[r["round"]]["record"]) for r in ok if r["round"] in free]
    how = " (bit for bit)" if same and all(s == "bit" for s in same) else ""
    cells = [
        backend,
        mine[0]["launcher"] if mine else "—",
        f"`{fault}`",
        f"{len(ok)} of {len(mine)}",
        _spread(ended),
        *(_spread([c[k] for c in costs if c.get(k) is not None], spec) for k, spec in _COSTS.items()),
        _spread(goodput, ".2f"),
        f"{sum(bool(s) for s in same)} of {len(same)}{how}" if same else "—",
    ]
    return "| " + " | ".join(cells) + " |"


_COSTS = {"first_noticed_s": ".2f", "restarted_s": ".2f", "recovered_s": ".1f", "steps_redone": ".0f"}


def _goodput(rec: dict) -> float:
    return rec["steps"] * rec["global_batch_size"] / rec["wall_time_s"]


def _same(a: dict, b: dict) -> str:
    """ "bit" (the same run bit for bit), "close" (within float tolerance) or "" (not the same run)."""
    if a["param_checksum"] == b["param_checksum"] and a["loss_history"] == b["loss_history"]:
        return "bit"
    steps = len(a["loss_history"]) == len(b["loss_history"])
    losses = (
        steps and max(abs(x - y) for x, y in zip(a["loss_history"], b["loss_history"], strict=True)) < LOSS_TOLERANCE
    )
    return "close" if losses and abs(a["param_checksum"] / b["param_checksum"] - 1) < 1e-5 else ""


def _spread(values: list[float], spec: str = ".1f") -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return format(med, spec)
    return f"{med:{spec}} ({min(values):{spec}}-{max(values):{spec}})"


@app.command()
def straggler(
    rounds: Annotated[int, typer.Option(help="rounds of the sweep")] = 3,
    out: Annotated[Path, typer.Option(help="the document whose section is written")] = ROOT / "docs" / "faults.md",
) -> None:
    sweep = STRAGGLER_DIR
    if not (sweep / "results.jsonl").is_file():
        cmd = ["run.py", "compare", "--backends", ",".join(LIBRARIES), "--nprocs", "2", "--fault", "none,slow:1:3"]
        cmd += ["--max-steps", "40", "--dropout", "0", "--repeats", str(rounds), "--out", str(sweep)]
        subprocess.run([sys.executable, *cmd], cwd=ROOT, env=child_env(), check=False)
    table = _faults_table(sweep)
    where = sweep.relative_to(ROOT)
    head = (
        f"Produced by `python -m benchmarks.faults straggler --rounds {rounds}` on {machine()}: `run.py compare "
        f"--backends {','.join(LIBRARIES)} --nprocs 2 --fault none,slow:1:3 --max-steps 40 --dropout 0 --repeats "
        f"{rounds} --out {where}` (its report: {where}/report.md), the Faults section of its report:"
    )
    lines = [STRAGGLER, "", head, "", table, ""]
    write_section(out, STRAGGLER, lines)
    print("\n".join(lines))


@app.command()
def link(
    rounds: Annotated[int, typer.Option(help="rounds of the sweep")] = 2,
    out: Annotated[Path, typer.Option(help="the document whose section is written")] = ROOT / "docs" / "faults.md",
) -> None:
    sweep = LINK_DIR
    args = ["--backends", ",".join(LIBRARIES), "--nodes", "2", "--nprocs", "1", "--link-mode", "per-node"]
    args += ["--restarts", "1", "--fault", LINK_FAULTS, "--timeout-s", str(HANG_TIMEOUT_S), "--max-steps", "30"]
    args += ["--checkpoint-every", "10", "--dropout", "0", "--repeats", str(rounds), "--out"]
    if not (sweep / "results.jsonl").is_file():
        subprocess.run([sys.executable, "run.py", "compare", *args, str(sweep)], cwd=ROOT, env=child_env(), check=False)
    lines = [LINK, "", _link_head(rounds, " ".join(args), sweep.relative_to(ROOT)), "", _faults_table(sweep), ""]
    write_section(out, LINK, lines)
    print("\n".join(lines))


def _link_head(rounds: int, args: str, where: Path) -> str:
    return (
        f"Produced by `python -m benchmarks.faults link --rounds {rounds}` on {machine()}: `run.py compare {args} "
        f"{where}` (its report: {where}/report.md): MNIST on 2 simulated nodes of one process, each node in its own "
        "network namespace behind a link of its own (unshaped), node 1's switch port taken down after step 15 and up "
        "again 5 s or 30 s later, each library ready to continue as its users run it; the Faults section of its report:"
    )


def _faults_table(sweep: Path) -> str:
    """The Faults section's table of a sweep's report, whole."""
    section = (sweep / "report.md").read_text().split("## Faults\n", 1)[1].split("\n\n")
    return next(part for part in section if part.startswith("| configuration |"))


if __name__ == "__main__":
    app()
