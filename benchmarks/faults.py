"""What a killed or hung rank costs each library, started the way its users start it to continue after a failure,
into docs/faults.md.

    python -m benchmarks.faults restarts [--rounds 3] [--steps 30] [--out docs/faults.md]
    python -m benchmarks.faults straggler [--rounds 3] [--out docs/faults.md]   # run.py compare --fault none,slow:1:3
    python -m benchmarks.faults link [--rounds 2] [--out docs/faults.md]   # run.py compare --fault none,link-down:...
    python -m benchmarks.faults slurm [--rounds 2] [--out docs/faults.md]  # on the Slurm test cluster, started here
    python -m benchmarks.faults back [--rounds 1] [--out docs/faults.md]   # --fault none,kill-node:1@15:60
    python -m benchmarks.faults host-back [--rounds 1] [--out docs/faults.md]   # the same under Horovod Elastic
    python -m benchmarks.faults per-node [--rounds 2] [--out docs/faults.md]   # 2 nodes of 2 processes

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
20`); its report's Faults section. `slurm`: on the Slurm test cluster of two nodes (scripts/slurm_test_cluster.sh,
started and stopped here), `run.py compare --scheduler slurm --restarts 1` of the libraries that continue a job there
with a killed rank, a lost node and a hung rank, its report's Faults section; then ddp with a node that Slurm itself
takes down mid-run (`scontrol update NodeName=n2 State=DOWN`, in an allocation made with `--no-kill`). `back`:
`run.py compare --restarts 1` of the libraries whose agents run on every node on 2 simulated nodes, node 1 lost after
step 15 and back 60 s later, after the job continued without it; its report's Faults section. `host-back`: the same
under Horovod Elastic, its host listed again in the job's discovery (`--restarts 2`: the return is one of its resets).
`per-node`: `run.py compare --restarts 1` on 2 simulated nodes of 2 processes each, rank 1 (the second process of
rank 0's node) killed or hung and node 1 lost, under the three ways a job continues here (torchrun's agents, which
fsdp, deepspeed and fabric continue under as ddp does; accelerate launch's; Horovod Elastic's driver): what a
process's failure costs the other processes of its node, and a node's loss the job; its report's Faults section.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.harness import ROOT, child_env, machine, write_section
from distbench.launching import topology
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
SLURM = "## On a Slurm cluster"
SLURM_DIR = ROOT / "docs" / "results" / "faults" / "slurm"
SLURM_LIBRARIES = ("ddp", "accelerate", "horovod", "fsdp", "deepspeed", "fabric")
SLURM_FAULTS = "none,kill:1@15,kill-node:1@15,hang:1@15"
BACK = "## A lost node that comes back"
BACK_DIR = ROOT / "docs" / "results" / "faults" / "node-back"
BACK_LIBRARIES = ("ddp", "accelerate", "fsdp", "deepspeed", "fabric")  # an agent on every node, started again
# node 1 back 60 s after it went: after torchrun's agents continued without it (41-44 s); steps of 128 samples, enough
# of them (epochs that do not end the run first) to train on alone for a while and together again after
BACK_ARGS = "--fault none,kill-node:1@15:60 --batch-size 128 --epochs 100 --max-steps 1000 --checkpoint-every 10"
# Horovod Elastic's host back, the same lost node and return: its discovery lists the host again (sweep/node_return.py)
HOST_BACK = "## Horovod Elastic takes a lost host back"
HOST_BACK_DIR = ROOT / "docs" / "results" / "faults" / "host-back"
PER_NODE = "## Two processes per node"
PER_NODE_DIR = ROOT / "docs" / "results" / "faults" / "per-node"
# one library for each way a job continues here: torchrun's agents (fsdp, deepspeed and fabric run under the same
# agent as ddp, and recovered alike at one process per node), accelerate launch's, Horovod Elastic's driver
PER_NODE_LIBRARIES = ("ddp", "accelerate", "horovod")
PER_NODE_FAULTS = "none,kill:1@15,kill-node:1@15,hang:1@15"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
FAULTS_DOC = ROOT / "docs" / "faults.md"
SweepRounds = Annotated[int, typer.Option(help="rounds of the sweep")]
Document = Annotated[Path, typer.Option(help="the document whose section is written")]


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
    try:
        rec = run_one(
            [resolve(c) for c in launch.commands],
            out,
            timeout + 240,
            folder / f"{backend}-{fault}.log",
            {**child_env(), **launch.env},
            continues=True,
        )
    finally:
        topology.discarded(launch.env)  # Horovod Elastic's hosts file and discovery script
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
    rounds: SweepRounds = 3,
    out: Document = FAULTS_DOC,
) -> None:
    args = ["--backends", ",".join(LIBRARIES), "--nprocs", "2", "--fault", "none,slow:1:3", "--max-steps", "40"]
    args += ["--dropout", "0", "--repeats", str(rounds)]
    _compared("straggler", rounds, out, STRAGGLER, STRAGGLER_DIR, args)


@app.command()
def link(
    rounds: SweepRounds = 2,
    out: Document = FAULTS_DOC,
) -> None:
    args = ["--backends", ",".join(LIBRARIES), "--nodes", "2", "--nprocs", "1", "--link-mode", "per-node"]
    args += ["--restarts", "1", "--fault", LINK_FAULTS, "--timeout-s", str(HANG_TIMEOUT_S), "--max-steps", "30"]
    args += ["--checkpoint-every", "10", "--dropout", "0", "--repeats", str(rounds)]
    where = _swept(LINK_DIR, args)
    _faults_section(out, LINK, _link_head(rounds, " ".join([*args, "--out"]), where), LINK_DIR)


@app.command()
def back(
    rounds: SweepRounds = 1,
    out: Document = FAULTS_DOC,
) -> None:
    args = ["--backends", ",".join(BACK_LIBRARIES), "--nodes", "2", "--nprocs", "1", "--restarts", "1"]
    args += [*BACK_ARGS.split(), "--timeout-s", "60", "--dropout", "0", "--run-timeout-s", "400", "--repeats"]
    args += [str(rounds)]
    said = (
        "MNIST on 2 simulated nodes of one process, node 1 lost after step 15 (its agent and worker killed) and "
        "started again 60 s later, each library ready to continue as its users run it"
    )
    _compared("back", rounds, out, BACK, BACK_DIR, args, said)


@app.command()
def host_back(
    rounds: SweepRounds = 1,
    out: Document = FAULTS_DOC,
) -> None:
    # Horovod: a host that comes back is one of its resets (--reset-limit): the lost node's and its return's
    args = ["--backends", "horovod", "--nodes", "2", "--nprocs", "1", "--restarts", "2", *BACK_ARGS.split()]
    args += ["--timeout-s", "60", "--dropout", "0", "--run-timeout-s", "400", "--repeats", str(rounds)]
    said = (
        "the section above's runs under Horovod Elastic: node 1's worker killed after step 15 and its host dropped "
        "from the job's discovery, listed again 60 s later (horovodrun given a blacklist cool-down; `--restarts 2`, "
        "since the host's return is one of Horovod's resets)"
    )
    _compared("host-back", rounds, out, HOST_BACK, HOST_BACK_DIR, args, said)


@app.command()
def per_node(
    rounds: SweepRounds = 2,
    out: Document = FAULTS_DOC,
) -> None:
    args = ["--backends", ",".join(PER_NODE_LIBRARIES), "--nodes", "2", "--nprocs", "2", "--restarts", "1"]
    args += ["--fault", PER_NODE_FAULTS, "--timeout-s", "60", "--max-steps", "30", "--checkpoint-every", "10"]
    args += ["--dropout", "0", "--repeats", str(rounds)]
    said = (
        "MNIST on 2 simulated nodes of 2 processes each (ranks 0-1 on one, 2-3 on the other), rank 1 killed (the "
        "second process of rank 0's node) or hung, or node 1 lost (its agent and both its workers) after step 15, "
        "each library ready to continue as its users run it"
    )
    _compared("per-node", rounds, out, PER_NODE, PER_NODE_DIR, args, said)


def _compared(name: str, rounds: int, out: Path, header: str, sweep: Path, args: list[str], said: str = "") -> None:
    """`run.py compare ARGS --out SWEEP` (unless SWEEP holds its results), then the section `header` of `out`: the
    command that produced it, what it ran (`said`) and its report's Faults section."""
    where = _swept(sweep, args)
    head = (
        f"Produced by `python -m benchmarks.faults {name} --rounds {rounds}` on {machine()}: `run.py compare "
        f"{' '.join(args)} --out {where}` (its report: {where}/report.md){': ' + said if said else ''}; the Faults "
        "section of its report:"
    )
    _faults_section(out, header, head, sweep)


def _swept(sweep: Path, args: list[str]) -> Path:
    """`run.py compare ARGS --out SWEEP`, unless SWEEP holds its results already: SWEEP, relative to the repository."""
    if not (sweep / "results.jsonl").is_file():
        cmd = [sys.executable, "run.py", "compare", *args, "--out", str(sweep)]
        subprocess.run(cmd, cwd=ROOT, env=child_env(), check=False)
    return sweep.relative_to(ROOT)


def _faults_section(out: Path, header: str, head: str, sweep: Path) -> None:
    """The section `header` of `out`: what produced it, then the Faults section's table of the sweep's report."""
    lines = [header, "", head, "", _faults_table(sweep), ""]
    write_section(out, header, lines)
    print("\n".join(lines))


def _link_head(rounds: int, args: str, where: Path) -> str:
    return (
        f"Produced by `python -m benchmarks.faults link --rounds {rounds}` on {machine()}: `run.py compare {args} "
        f"{where}` (its report: {where}/report.md): MNIST on 2 simulated nodes of one process, each node in its own "
        "network namespace behind a link of its own (unshaped), node 1's switch port taken down after step 15 and up "
        "again 5 s or 30 s later, each library ready to continue as its users run it; the Faults section of its report:"
    )


@app.command()
def slurm(
    rounds: SweepRounds = 2,
    out: Document = FAULTS_DOC,
) -> None:
    sweep = SLURM_DIR
    args = ["--scheduler", "slurm", "--backends", ",".join(SLURM_LIBRARIES), "--nodes", "2", "--nprocs", "1"]
    args += ["--restarts", "1", "--fault", SLURM_FAULTS, "--timeout-s", str(HANG_TIMEOUT_S), "--max-steps", "30"]
    args += ["--checkpoint-every", "10", "--dropout", "0", "--repeats", str(rounds), "--out"]
    down = sweep / "node-down"
    with test_cluster() as env:
        if not (sweep / "results.jsonl").is_file():
            cmd = ["salloc", "--nodes", "2", "--quiet", sys.executable, "run.py", "compare", *args, str(sweep)]
            subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        if not (down / "results.jsonl").is_file():
            taken_down(down, env)
    where = sweep.relative_to(ROOT)
    head = (
        f"Produced by `python -m benchmarks.faults slurm --rounds {rounds}` on {machine()}, on the Slurm test cluster "
        f"(two nodes on this machine, one core each): `salloc --nodes 2 run.py compare {' '.join(args)} {where}` (its "
        f"report: {where}/report.md), the Faults section of its report:"
    )
    lines = [SLURM, "", head, "", _faults_table(sweep), "", *_down_lines(down), ""]
    write_section(out, SLURM, lines)
    print("\n".join(lines))


@contextlib.contextmanager
def test_cluster():
    """The Slurm test cluster of two nodes (scripts/slurm_test_cluster.sh), stopped whatever happens: yields the
    environment that uses it."""
    folder = tempfile.mkdtemp(prefix="distbench-slurm-")
    script = str(ROOT / "scripts" / "slurm_test_cluster.sh")
    try:
        conf = subprocess.run(["bash", script, "start", folder], capture_output=True, text=True, check=True).stdout
        yield {**child_env(), "SLURM_CONF": conf.strip()}
    finally:
        subprocess.run(["bash", script, "stop", folder], capture_output=True, check=False)


DOWN_COMMAND = (
    "run.py compare --scheduler slurm --backends ddp --nodes 2 --nprocs 1 --restarts 1 --max-steps 300 "
    "--checkpoint-every 10 --dropout 0 --timeout-s 60 --out"
)


def taken_down(out: Path, env: dict[str, str]) -> str:
    """ddp's run of DOWN_COMMAND in an allocation made with --no-kill (without it Slurm would end the whole job), n2
    taken down by Slurm 2 s after the run's first step, then back in service: the sweep's output (also kept next to
    the sweep's folder, in OUT.log)."""
    log = out.with_name(out.name + ".log")
    with log.open("wb") as said:
        proc = subprocess.Popen(
            [
                "salloc",
                "--nodes",
                "2",
                f"--immediate={DOWN_WAIT_S}",
                "--no-kill",
                sys.executable,
                *DOWN_COMMAND.split(),
                str(out),
            ],
            cwd=ROOT,
            env=env,
            stdout=said,
            stderr=subprocess.STDOUT,
        )
        try:
            _down_when_training(out, proc, log, env)
            proc.wait(timeout=DOWN_WAIT_S)
        finally:
            proc.kill()
            back_in_service(env)
    return log.read_text()


DOWN_WAIT_S = 420  # for the allocation, the single-process reference and ddp's first step; then for the rest


def _down_when_training(out: Path, proc: subprocess.Popen, log: Path, env: dict[str, str]) -> None:
    """n2 taken down by Slurm (`scontrol update NodeName=n2 State=DOWN`) 2 s after the run's first training step;
    the sweep's own output and Slurm's view of the job if it ends or stalls before that step."""
    deadline = time.monotonic() + DOWN_WAIT_S
    while not any("first_step" in f.read_text() for f in out.glob("runs/*ddp*.ckpt/events.jsonl")):
        if proc.poll() is not None or time.monotonic() > deadline:
            queue = subprocess.run(["squeue", "--steps"], env=env, capture_output=True, text=True).stdout
            nodes = subprocess.run(["sinfo", "-N"], env=env, capture_output=True, text=True).stdout
            ended = "ended" if proc.poll() is not None else f"had not started after {DOWN_WAIT_S} s"
            raise RuntimeError(
                f"ddp's run in {out} {ended} before its first step; salloc said:\n{log.read_text()[-3000:]}\n"
                f"squeue --steps:\n{queue}\nsinfo -N:\n{nodes}"
            )
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=distbench-test"], env=env, check=True)


def back_in_service(env: dict[str, str]) -> None:
    """n2 resumed (the test cluster returns a DOWN node that answers by itself, ReturnToService=2: then Slurm refuses
    the resume as not down) and idle."""
    subprocess.run(["scontrol", "update", "NodeName=n2", "State=RESUME"], env=env, capture_output=True)
    deadline = time.monotonic() + 60
    sinfo = ["sinfo", "-h", "-n", "n2", "-o", "%T"]
    while "idle" not in subprocess.run(sinfo, env=env, capture_output=True, text=True).stdout:
        if time.monotonic() > deadline:
            raise RuntimeError("n2 did not come back into service")
        time.sleep(1)


def _down_lines(down: Path) -> list[str]:
    rec = next(json.loads(line) for line in (down / "results.jsonl").open() if '"backend": "ddp"' in line)
    if rec["status"] != "ok":
        return [f"A node that Slurm takes down (`{DOWN_COMMAND} ...` under `salloc --no-kill`): failed: {rec['error']}"]
    cost = rec["fault"]
    return [
        f"A node that Slurm takes down: ddp, `salloc --nodes 2 --no-kill run.py {DOWN_COMMAND.removeprefix('run.py ')} "
        f"{down.relative_to(ROOT)}`, n2 taken down by `scontrol update NodeName=n2 State=DOWN` 2 s after the first "
        f"step: Slurm killed n2's tasks and took n2 out of the job; the first survivor's collective failed "
        f"({cost['first_noticed_by']}), torchrun's agent on n1 restarted its worker alone {cost['restarted_s']:.1f} s "
        f"later, from step {rec['resumed_from_step']}, its next step {cost['recovered_s']:.1f} s after the failure; "
        f"the run ended {rec['status']} with {rec['steps']} steps at world size {cost['world_size_after']} "
        f"(launched at {rec['world_size']}; the record's fault: unplanned, none was asked for)."
    ]


def _faults_table(sweep: Path) -> str:
    """The Faults section's table of a sweep's report, whole."""
    section = (sweep / "report.md").read_text().split("## Faults\n", 1)[1].split("\n\n")
    return next(part for part in section if part.startswith("| configuration |"))


if __name__ == "__main__":
    app()
