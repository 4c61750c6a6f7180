"""`run.py commbench`: each library's own all-reduce over message sizes, under its launcher, on simulated nodes and
shaped links (or a Slurm allocation), with nccl-tests' bandwidths and a latency-bandwidth fit (bandwidth.py).

`run(request)` is the command: its options checked, every backend launched once per round (`measure`: the worker,
worker.py, in each), the records appended to DIR/commbench.jsonl (one per backend x size x repeat, with the machine's
load around its launch), and the report written (commbench_report.py: summary.csv, fit.json, commbench.md,
busbw.png).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from distbench.backends import ALL_REDUCING, REGISTRY
from distbench.config import checked
from distbench.errors import UserError
from distbench.launching import link
from distbench.launching.affinity import load_average
from distbench.launching.placement import Placement
from distbench.planning import commbench_report
from distbench.planning.bandwidth import algbw, busbw
from distbench.planning.commbench_report import RECORDS
from distbench.records import append_line, to_json
from distbench.sweep import executor as executors
from distbench.sweep.configuration import AXES, SweepConfig, positive_ints

DEFAULT_SIZES = tuple(4096 * 4**i for i in range(8))  # 4 KiB to 64 MiB


# what commbench may time and project predict: the all-reducing libraries (its default), DeepSpeed's and FSDP2
# (its all-gathers and reduce-scatters; Accelerate's FSDP plugin shards other units and has no model in project)
SHARDED_TIMED = ("fsdp",)
TIMED = (*ALL_REDUCING, *(name for name, spec in REGISTRY.items() if spec.zero_stages), *SHARDED_TIMED)


def backend_names(backends: str) -> list[str]:
    """--backends (commbench's and project's): the comma-separated backends, each one whose exchange commbench times
    and project models (the replicating libraries, DeepSpeed's engine, FSDP2)."""
    names = [b.strip() for b in backends.split(",") if b.strip()]
    bad = [b for b in names if b not in TIMED]
    if bad or not names:
        raise UserError(
            f"--backends: the backends commbench times and project models ({', '.join(TIMED)}), got {backends!r}"
        )
    return names


@dataclass(frozen=True)
class CommbenchRequest:
    """What `commbench` was given, as typed (each list comma-separated)."""

    out: Path
    backends: str
    placement: Placement  # nodes, processes per node, the link and the scheduler, each checked as declared
    repeats: int
    rounds: int
    sizes: str  # "": DEFAULT_SIZES
    grad_compression: str
    run_timeout_s: int
    command_line: str  # as the report says it was built
    dilation: float = 1.0  # the link shaped K times slower, every time divided back by K (an emulated cluster's)


@dataclass(frozen=True)
class Outcome:
    """How a commbench ended: its planned launches, how many failed, whether Ctrl-C stopped it, and where the launches'
    logs are."""

    runs: int
    failed: int
    interrupted: bool
    logs: Path


@dataclass(frozen=True)
class Bench:
    """What a commbench times: the backends and their compressions, the message sizes, the topology and link, and
    how often."""

    backends: list[str]
    sizes: list[int]
    nodes: int
    nprocs: int  # processes per node
    link_rate: str
    link_mode: str
    repeats: int  # timed all-reduces per size, in one launch
    rounds: int  # launches of each backend
    timeout_s: float
    compressions: tuple[str, ...] = ("none",)  # how the gradients travel: as is, or in 16 bits
    dilation: float = 1.0  # --dilation: the link shaped at its rate / K, every time divided back by K

    def configs(self) -> list[SweepConfig]:
        """One configuration per backend and compression (uncompressed alone for a library that has none), each
        launched once per round."""
        configs = [
            SweepConfig(
                task="commbench",
                backend=b,
                world_size=self.nodes * self.nprocs,
                threads=1,
                grad_compression=c,
                nodes=self.nodes,
                link_rate=self.link_rate,
                link_mode=self.link_mode,
            )
            for b in self.backends
            for c in self.compressions
        ]
        return list(dict.fromkeys(c.as_run() for c in configs))

    def program(self, config: SweepConfig, out_json: Path) -> list[str]:
        """What the launcher starts in each process (after python): the worker, writing its result to out_json."""
        return [
            "-m",
            "distbench.planning.worker",
            "--backend",
            config.backend,
            "--grad-compression",
            config.grad_compression,
            "--sizes",
            ",".join(map(str, self.sizes)),
            "--repeats",
            str(self.repeats),
            "--dilation",
            str(self.dilation),
            "--output",
            str(out_json),
        ]


def run(request: CommbenchRequest) -> Outcome:
    """The command: check what it was given (bad input is one UserError before anything is launched or written),
    measure every backend once per round, write the report and print it."""
    bench = _bench(request)
    out = request.out
    executor = executors.executor_for(
        request.placement.scheduler
    )  # `measure` creates the folder once it has checked the plan
    try:
        recs = measure(executor, bench, out)
    except KeyboardInterrupt:
        print(f"interrupted: the current launch was stopped; records so far are in {out / RECORDS}", file=sys.stderr)
        return Outcome(0, 0, True, out / "runs")
    if recs:
        print(commbench_report.write(recs, out, request.command_line))
    launched = len({(r["backend"], r["grad_compression"], r["round"]) for r in recs})
    planned = len(bench.configs()) * bench.rounds
    return Outcome(planned, planned - launched, False, out / "runs")


def _bench(request: CommbenchRequest) -> Bench:
    """The request's options checked and read, each bad one a UserError naming its flag."""
    names = backend_names(request.backends)
    r, p = request, request.placement
    if min(r.repeats, r.rounds) <= 0 or p.world_size < 2:
        raise UserError("--repeats and --rounds must be positive, with at least 2 processes (--nodes x --nprocs)")
    sizes = positive_ints(r.sizes, "--sizes") if r.sizes else list(DEFAULT_SIZES)
    compressions = tuple(AXES["grad_compression"].metadata["parse"](r.grad_compression, "--grad-compression"))
    if set(compressions) != {"none"} and set(names) & set(SHARDED_TIMED):
        # its all-gathers and reduce-scatters are timed uncompressed; project takes the reduce-scatter at its size
        raise UserError(
            f"--grad-compression {r.grad_compression}: commbench times FSDP2's collectives uncompressed; use none"
        )
    if (r.out / RECORDS).exists():
        raise UserError(f"{r.out} already holds a commbench ({RECORDS}); choose another --out")
    dilation = checked("dilation", r.dilation)
    if dilation != 1.0 and link.parse_rate(p.link_rate) is None:
        # the times are divided back by K: only a link shaped K times slower makes them the emulated link's
        raise UserError(f"--dilation {dilation:g} shapes the link {dilation:g} times slower: give its --link-rate")
    return Bench(
        names,
        sizes,
        p.nodes,
        p.nprocs,
        p.link_rate,
        p.link_mode,
        r.repeats,
        r.rounds,
        r.run_timeout_s,
        compressions,
        dilation,
    )


def records(result: dict, config: SweepConfig, rnd: int, load: dict | None = None) -> list[dict]:
    """The worker's measurements as one record per size and repeat, each with the machine's load around its launch
    (`load`: avg_1m_before, avg_1m_after, cores; as a training record's machine_load)."""
    n = result["world_size"]
    fields = {
        "backend": config.backend,
        "grad_compression": config.grad_compression,
        "world_size": n,
        "nodes": result["nodes"],  # as the worker found them (checked against the plan: `measure`)
        "nprocs": n // result["nodes"],
        "link_rate": result["link_rate"],
        "link_mode": result["link_mode"],
        "launcher": result["launcher"],
        "dilation": result.get("dilation", 1.0),  # the link shaped K times slower, the times divided back
        **{k: result[k] for k in ("link_rate_shaped",) if k in result},  # a dilated link's rate as shaped
        "round": rnd,
        **({"machine_load": load} if load is not None else {}),
    }
    out = []
    for collective, by_size in result["measured"].items():
        for size, measured in by_size.items():
            for i, t in enumerate(measured["time_s"]):
                rec = {**fields, "collective": collective, "size_bytes": int(size), "repeat": i + 1}
                rec |= {k: measured[k][i] for k in commbench_report.MEASURES if k in measured}
                bw = {"algbw_Bps": algbw(int(size), t), "busbw_Bps": busbw(int(size), t, n, collective)}
                out.append(rec | bw)
    return out


def found_by(result: dict, config: SweepConfig) -> SweepConfig:
    """The configuration a worker found itself in: its world, nodes and link as its processes saw them."""
    seen = {k: result[k] for k in ("world_size", "nodes", "link_rate", "link_mode")}
    return replace(config, **seen, grad_compression=result["grad_compression"])


def measure(executor, bench: Bench, out: Path) -> list[dict]:
    """Every backend once per round (the order alternating by round); returns the records, also appended to
    DIR/commbench.jsonl. A launch that fails is one FAILED line with its cause (whole in its log) and no records."""
    configs = bench.configs()
    # it computes nothing: its simulated nodes may share cores, as emulated ones; under --dilation its links are shaped
    # K times slower, as an emulated run's
    executor.check(configs, emulated=True, dilation=bench.dilation)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    found = []
    for rnd in range(1, bench.rounds + 1):
        for config in configs if rnd % 2 else configs[::-1]:
            name = "-".join(
                [config.backend, *([config.grad_compression] if len(bench.compressions) > 1 else []), f"r{rnd}"]
            )
            out_json = out / "runs" / f"{name}.json"
            print(f"commbench: {config.name()} round {rnd}: running", file=sys.stderr, flush=True)
            program = bench.program(config, out_json)
            before = load_average()
            result = executor.run(config, [], out_json, out / "runs" / f"{name}.log", bench.timeout_s, program)
            load = {"avg_1m_before": before, "avg_1m_after": load_average(), "cores": os.cpu_count()}
            if result["status"] == "ok" and (differences := config.differences(found_by(result, config))):
                result = {"status": "failed", "error": "the launch did not run as planned: " + "; ".join(differences)}
            if result["status"] != "ok":  # the others go on; the command then says how many failed, and exits 1
                last = (result.get("error") or "no output").splitlines()[-1]
                print(f"commbench: {config.name()} round {rnd}: FAILED: {last}", file=sys.stderr, flush=True)
                continue
            for rec in records(result, config, rnd, load):
                append_line(out / RECORDS, to_json(rec, sort_keys=True))
                found.append(rec)
    return found
