"""`project` validated beyond 2 nodes against emulated clusters (docs/projection.md): predict, then measure.

    python -m benchmarks.emulated_projection commbench   # each library's all-reduce on N per-node links (N nodes)
    python -m benchmarks.emulated_projection reference   # `single` x1 emulated from the profile: the computation
    python -m benchmarks.emulated_projection predict     # `run.py project` for every case, nothing measured yet
    python -m benchmarks.emulated_projection measure     # the same cases emulated with `run.py compare`
    python -m benchmarks.emulated_projection table       # predicted against measured, into docs/projection.md
    python -m benchmarks.emulated_projection from-profile   # every variant's cases again, project --from-profile
    python -m benchmarks.emulated_projection profile-table  # those against the same sweeps, into docs/projection.md

The computation is the MNIST profile measured on this machine's CPU (docs/profiles/mnist-b32-cpu.json, micro-batch
32, one thread): the reference is `single` x1 emulated from it, and every measured run replays it on N simulated
nodes x 1 process that share this machine's 2 cores (an emulated node computes nothing). The nodes' links are
per-node at one rate; commbench times each library's all-reduce on the same N nodes and links. Everything goes
under docs/results/projection/emulated/; each step is the commands a user types.

    python -m benchmarks.emulated_projection --variant held-out commbench   # and predict, measure, table

Each variant (VARIANTS) is a set of cases and the commbench its predictions take: `main` (above), `held-out` (the rule
found after main's 8- and 16-node sweeps, a commbench at 4 nodes carried, on cases it had not seen), `dilated` (main's
and held-out's sweeps at 8 and 16 nodes predicted again from a commbench on the same nodes at the sweep's dilation: new
inputs, sweeps measured before), `held-out-400` (the dilated commbench on new cases, predicted before they were
measured), `resnet18` and `minilm` (two more models at 2 and 4 nodes; `resnet18-large` and `minilm-large` beyond,
`resnet18-4gbit` and `resnet18-250mbit` at a second and third rate, `minilm-rates` at a second and third), `libraries`
and `libraries-dilated` (Accelerate and Fabric, which wrap the model in DDP, on MNIST's cases at 2-16 nodes, from main's
and dilated's commbenches), `fsdp` and `fsdp-dilated` (FSDP2 on the same cases, from commbenches of its own all-gather
and reduce-scatter), `fsdp-resnet18` (FSDP2 on ResNet-18 at 2 and 4 nodes), `fsdp-resnet18-250mbit` (at a third
rate) and `fsdp-minilm` (on the MiniLM at 2); `libraries-resnet18` (Accelerate and Fabric on ResNet-18 at 250 Mbit/s).
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

import typer

from benchmarks.harness import ROOT, machine, write_section
from benchmarks.projection import LOADED_SIZES, case_cells, cases_summary, run

OUT = ROOT / "docs" / "results" / "projection" / "emulated"
BACKENDS = ("ddp", "deepspeed")  # a variant's libraries unless it names its own


@dataclass(frozen=True)
class Case:
    """One emulated cluster: N nodes x 1 process on per-node links of `rate`, run at dilation K (the smallest that
    keeps the emulated runs under the host-busy limit here: docs/emulation.md, "The largest emulated cluster")."""

    rate: str
    nodes: int
    dilation: int = 1
    commbench_dilation: int = 0  # a dilated variant's commbench at another dilation than the sweep's (0: the same)

    def placed(self) -> list[str]:
        return ["--nodes", str(self.nodes), "--nprocs", "1", "--link-mode", "per-node", "--link-rate", self.rate]


@dataclass(frozen=True)
class Computation:
    """The task a variant emulates: its profile (this machine's CPU at one thread), micro-batch, the task's options,
    and its reference (`single` x1 emulated from the profile)."""

    profile: str
    micro: int
    task: tuple[str, ...]
    reference: Path
    said: str  # the table's name for it
    steps: int = 40  # each emulated run's


MNIST = Computation(
    "docs/profiles/mnist-b32-cpu.json",
    32,
    ("--task", "mnist", "--threads", "1", "--dropout", "0"),
    OUT / "reference",
    "MNIST's ConvNet",
)
# ResNet-18 on 64-pixel synthetic images, 47 MB of gradients: a step about as long as a 2.3 Gbit/s link's all-reduce
RESNET18 = Computation(
    "docs/profiles/synthetic-resnet18-b8-cpu.json",
    8,
    ("--task", "synthetic-resnet", "--model", "resnet18", "--image-size", "64", "--threads", "1"),
    OUT / "resnet18" / "reference",
    "ResNet-18 (synthetic 64-pixel images)",
    steps=16,
)
# the bundled MiniLM-L6 on MR polarity, 91 MB of gradients (its 30,522-token embedding's among them): a step about as
# long as a 1 Gbit/s link's all-reduce at 2 nodes; an emulated step takes 10-30 s here (dilation 8-16), so fewer of them
MINILM = Computation(
    "docs/profiles/bert-minilm-b16-cpu.json",
    16,
    ("--task", "bert-sentiment", "--data-dir", "../shared/data/rt-polarity", "--threads", "1"),
    OUT / "minilm" / "reference",
    "The bundled MiniLM-L6 (MR polarity, 128 tokens)",
    steps=12,
)


@dataclass(frozen=True)
class Variant:
    """A validation: its cases, where their predictions and commbenches go (`out`), where each rate's sweeps are,
    and the commbench each prediction takes: at the case's node count (carried_from 0) or at carried_from nodes,
    carried by the ring's arithmetic; at dilation 1 or (`dilated`) at the case's dilation."""

    out: Path
    cases: tuple[Case, ...]
    sweeps: dict[str, Path]  # rate: the folder of its measured-nN(-kK) sweeps
    section: str
    carried_from: int = 0
    dilated: bool = False
    computation: Computation = MNIST
    sizes: str = ",".join(str(4096 * 4**i) for i in range(5))  # a dilated commbench's: 4 KiB to 1 MiB (MNIST's 1.2 MB)
    backends: tuple[str, ...] = BACKENDS
    commbench_from: Path | None = None  # the folder whose commbench/ it takes (another variant's), else `out`
    # predicted again from the module profile (`from-profile`, `profile-table`): not FSDP2's, which needs the profile
    # to name the shard units (the example profiles predate it: docs/emulation.md)
    profiled: bool = True

    def commbench(self, case: Case) -> Path:
        """The commbench the case's prediction takes: nN at dilation 1 (a variant of one rate), RATE-nN-kK dilated."""
        n, folder = self.carried_from or case.nodes, (self.commbench_from or self.out) / "commbench"
        if not self.dilated or case.dilation == 1:
            return folder / f"n{n}"
        return folder / f"{case.rate}-n{n}-k{case.commbench_dilation or case.dilation}"

    def prediction(self, case: Case) -> Path:
        return self.out / "predictions" / f"{case.rate}-n{case.nodes}.json"

    def sweep(self, case: Case) -> Path:
        k = case.dilation
        return self.sweeps[case.rate] / f"measured-n{case.nodes}{f'-k{k}' if k > 1 else ''}"

    def commbench_said(self) -> str:
        where = (
            f"at {self.carried_from} nodes on the same links, carried to N"
            if self.carried_from
            else "on the same N nodes and links"
        )
        if not self.dilated:
            return where
        other = ", ".join(f"{c.commbench_dilation} for the sweep's {c.dilation} at {c.nodes} nodes" for c in self.cases)
        if any(c.commbench_dilation for c in self.cases):
            return where + f", at dilation {other} (times divided back)"
        return where + ", at the sweep's dilation (times divided back)"


HELD_OUT = OUT / "heldout-200mbit"
WRAPPING_DDP = ("accelerate", "fabric")  # each under its own launcher (accelerate launch, fabric run)
HELD_OUT_400 = OUT / "heldout-400mbit"
VARIANTS = {
    # the 8-node sweep at dilation 1 (measured-n8, 2026-12-04, before the host limit) is kept, not tabled
    "main": Variant(
        OUT,
        (Case("100mbit", 2), Case("100mbit", 4), Case("100mbit", 8, 4), Case("100mbit", 16, 8)),
        {"100mbit": OUT},
        "## Validation at 2, 4, 8 and 16 nodes against emulated clusters: predicted before measuring",
    ),
    # the rule main's sweeps found after the fact (a commbench at 4 nodes, where the host carries it) on cases it
    # had not seen: twice the rate, twice the dilation
    "held-out": Variant(
        HELD_OUT,
        (Case("200mbit", 8, 8), Case("200mbit", 16, 16)),
        {"200mbit": HELD_OUT},
        "## Held out: 8 and 16 nodes at 200 Mbit/s from a 4-node commbench, predicted before measuring",
        carried_from=4,
    ),
    # a commbench on the sweep's own nodes and dilation (commbench --dilation): new inputs for sweeps already measured
    "dilated": Variant(
        OUT / "dilated",
        (Case("100mbit", 8, 4), Case("100mbit", 16, 8), Case("200mbit", 8, 8), Case("200mbit", 16, 16)),
        {"100mbit": OUT, "200mbit": HELD_OUT},
        "## 8 and 16 nodes from a commbench at the sweeps' dilation: new inputs, the sweeps measured before",
        dilated=True,
    ),
    # the same rule on cases it has not seen, predicted before they were measured: twice the rate again
    "held-out-400": Variant(
        HELD_OUT_400,
        (Case("400mbit", 8, 16), Case("400mbit", 16, 32)),
        {"400mbit": HELD_OUT_400},
        "## Held out: 8 and 16 nodes at 400 Mbit/s from a commbench at the sweeps' dilation, predicted before "
        "measuring",
        dilated=True,
    ),
    # a second model, compute and communication of the same order (1 Gbit/s), predicted before it was measured
    "resnet18": Variant(
        OUT / "resnet18",
        (Case("1gbit", 2, 8), Case("1gbit", 4, 16)),
        {"1gbit": OUT / "resnet18"},
        "## ResNet-18 at 2 and 4 nodes, 1 Gbit/s, from a commbench at the sweeps' dilation, predicted before measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,  # 4 KiB to 16 MiB: DDP's 25 MB buckets and DeepSpeed's 47 MB, the line carried to them
    ),
    # the second model beyond 4 nodes: a ring's bytes per rank nearly constant in N, its latency steps 2(N-1);
    # dilations that keep every link's rate / K, added up, at 500 Mbit/s (4 nodes at 16: 250 Mbit/s, 2-3 % busy)
    "resnet18-large": Variant(
        OUT / "resnet18",
        (Case("1gbit", 8, 16), Case("1gbit", 16, 32)),
        {"1gbit": OUT / "resnet18"},
        "## ResNet-18 at 8 and 16 nodes, 1 Gbit/s, from a commbench at the sweeps' dilation, predicted before "
        "measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
    ),
    # ResNet-18 at a second rate, 4 Gbit/s: its all-reduce (94 ms at 2 nodes) shorter than its backward, so that DDP's
    # overlap hides most of it and the step is the computation's (1 Gbit/s: about twice the computation); the same
    # 500 Mbit/s of rate / K added up as resnet18-large's
    "resnet18-4gbit": Variant(
        OUT / "resnet18",
        (Case("4gbit", 2, 16), Case("4gbit", 4, 32)),
        {"4gbit": OUT / "resnet18" / "4gbit"},
        "## ResNet-18 at 2 and 4 nodes, 4 Gbit/s, from a commbench at the sweeps' dilation, predicted before measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
    ),
    # ResNet-18 at a third rate, 250 Mbit/s: its all-reduce (1.5 s at 2 nodes) ten times its computation, the step
    # the link's; 2 to 8 nodes, every link's rate / K added up to 250 Mbit/s at 2 nodes and 500 Mbit/s beyond (an
    # 8-node step of 11 s here at dilation 4)
    "resnet18-250mbit": Variant(
        OUT / "resnet18",
        (Case("250mbit", 2, 2), Case("250mbit", 4, 2), Case("250mbit", 8, 4)),
        {"250mbit": OUT / "resnet18" / "250mbit"},
        "## ResNet-18 at 2, 4 and 8 nodes, 250 Mbit/s, from a commbench at the sweeps' dilation, predicted before "
        "measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
    ),
    # a third model, a transformer of twice ResNet-18's bytes, predicted before it was measured
    "minilm": Variant(
        OUT / "minilm",
        (Case("1gbit", 2, 8), Case("1gbit", 4, 16)),
        {"1gbit": OUT / "minilm"},
        "## The MiniLM at 2 and 4 nodes, 1 Gbit/s, from a commbench at the sweeps' dilation, predicted before "
        "measuring",
        dilated=True,
        computation=MINILM,
        sizes=LOADED_SIZES,
    ),
    # the third model beyond 4 nodes, at ResNet-18's 8-node dilation (every link's rate / K, added up: 500 Mbit/s); an
    # emulated step of 25-30 s here, so 8 nodes only (16 would take an hour and a half a round)
    "minilm-large": Variant(
        OUT / "minilm",
        (Case("1gbit", 8, 16),),
        {"1gbit": OUT / "minilm"},
        "## The MiniLM at 8 nodes, 1 Gbit/s, from a commbench at the sweep's dilation, predicted before measuring",
        dilated=True,
        computation=MINILM,
        sizes=LOADED_SIZES,
    ),
    # the third model at two more rates, predicted before measuring: 250 Mbit/s, where the all-reduce (2.9 s at 2
    # nodes) is four times the computation, and 4 Gbit/s, where DDP's overlap hides most of it (ResNet-18's second
    # rate); the 250 Mbit/s links at rate / K added up to 250 Mbit/s, the 4 Gbit/s ones to 500 Mbit/s, as before
    "minilm-rates": Variant(
        OUT / "minilm",
        (Case("250mbit", 2, 2), Case("250mbit", 4, 4), Case("4gbit", 2, 16)),
        {"250mbit": OUT / "minilm" / "250mbit", "4gbit": OUT / "minilm" / "4gbit"},
        "## The MiniLM at 250 Mbit/s (2 and 4 nodes) and 4 Gbit/s (2 nodes), from a commbench at the sweeps' "
        "dilation, predicted before measuring",
        dilated=True,
        computation=MINILM,
        sizes=LOADED_SIZES,
    ),
    # the libraries that wrap the model in DDP, on MNIST's cases where ddp was validated: the same commbenches (their
    # gradients go through DDP's all-reduce), predicted before measuring
    "libraries": Variant(
        OUT / "libraries",
        (Case("100mbit", 2), Case("100mbit", 4)),
        {"100mbit": OUT / "libraries"},
        "## Accelerate and Fabric at 2 and 4 nodes, 100 Mbit/s: predicted before measuring",
        backends=WRAPPING_DDP,
        commbench_from=OUT,
    ),
    "libraries-dilated": Variant(
        OUT / "libraries",
        (Case("100mbit", 8, 4), Case("100mbit", 16, 8)),
        {"100mbit": OUT / "libraries"},
        "## Accelerate and Fabric at 8 and 16 nodes, 100 Mbit/s, from a commbench at the sweeps' dilation: predicted "
        "before measuring",
        dilated=True,
        backends=WRAPPING_DDP,
        commbench_from=OUT / "dilated",
    ),
    # the libraries that wrap DDP on a second model at a second rate: ResNet-18's 250 Mbit/s cases at 2 and 4 nodes,
    # from the commbenches ddp's predictions there took (resnet18-250mbit's), predicted before measuring
    "libraries-resnet18": Variant(
        OUT / "libraries" / "resnet18",
        (Case("250mbit", 2, 2), Case("250mbit", 4, 2)),
        {"250mbit": OUT / "libraries" / "resnet18" / "250mbit"},
        "## Accelerate and Fabric on ResNet-18 at 2 and 4 nodes, 250 Mbit/s, from a commbench at the sweeps' "
        "dilation: predicted before measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
        backends=WRAPPING_DDP,
        commbench_from=OUT / "resnet18",
    ),
    # FSDP2, the library project modelled last (timeline.fsdp_step), on MNIST's cases where ddp was validated: its own
    # commbench (its all-gather and reduce-scatter), predicted before measuring; its host work (the reduce-scatter an
    # all-reduce on gloo, the copies in and out of its flat buffers) needs twice ddp's dilation to stay under the
    # host-busy limit (at 4 nodes x1: 20 % busy, at 8 x4: 17 %, first sweeps of 2026-12-06)
    "fsdp": Variant(
        OUT / "fsdp",
        (Case("100mbit", 2, 2), Case("100mbit", 4, 4)),
        {"100mbit": OUT / "fsdp"},
        "## FSDP2 at 2 and 4 nodes, 100 Mbit/s: predicted before measuring",
        backends=("fsdp",),
        profiled=False,
    ),
    "fsdp-dilated": Variant(
        OUT / "fsdp",
        (Case("100mbit", 8, 8, commbench_dilation=4), Case("100mbit", 16, 16, commbench_dilation=8)),
        {"100mbit": OUT / "fsdp"},
        "## FSDP2 at 8 and 16 nodes, 100 Mbit/s, from a commbench at half the sweeps' dilation: predicted before "
        "measuring",
        dilated=True,
        backends=("fsdp",),
        profiled=False,
    ),
    # FSDP2 on a second model, its four stages the units (47 MB of gradients): the commbench at twice the resnet18
    # variant's dilation, the sweeps at its dilation (a ResNet-18 step is long beside FSDP2's host work)
    "fsdp-resnet18": Variant(
        OUT / "fsdp" / "resnet18",
        (Case("1gbit", 2, 8, commbench_dilation=16), Case("1gbit", 4, 16, commbench_dilation=32)),
        {"1gbit": OUT / "fsdp" / "resnet18"},
        "## FSDP2 on ResNet-18 at 2 and 4 nodes, 1 Gbit/s, from a commbench at twice the sweeps' dilation: predicted "
        "before measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
        backends=("fsdp",),
        profiled=False,
    ),
    # FSDP2 at a third rate, 250 Mbit/s on ResNet-18 (MNIST's 100 Mbit/s and ResNet-18's 1 Gbit/s before): every
    # link's rate / K added up to 250 Mbit/s as in fsdp-resnet18, the commbench at twice the sweep's dilation
    "fsdp-resnet18-250mbit": Variant(
        OUT / "fsdp" / "resnet18",
        (Case("250mbit", 2, 2, commbench_dilation=4), Case("250mbit", 4, 4, commbench_dilation=8)),
        {"250mbit": OUT / "fsdp" / "resnet18" / "250mbit"},
        "## FSDP2 on ResNet-18 at 2 and 4 nodes, 250 Mbit/s, from a commbench at twice the sweeps' dilation: "
        "predicted before measuring",
        dilated=True,
        computation=RESNET18,
        sizes=LOADED_SIZES,
        backends=("fsdp",),
        profiled=False,
    ),
    # and on a third, the MiniLM: its six encoder layers the units, the root its 47 MB embedding and the head
    "fsdp-minilm": Variant(
        OUT / "fsdp" / "minilm",
        (Case("1gbit", 2, 8),),
        {"1gbit": OUT / "fsdp" / "minilm"},
        "## FSDP2 on the MiniLM at 2 nodes, 1 Gbit/s, from a commbench at the sweep's dilation: predicted before "
        "measuring",
        dilated=True,
        computation=MINILM,
        sizes=LOADED_SIZES,
        backends=("fsdp",),
        profiled=False,
    ),
}
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
CHOSEN = {"variant": VARIANTS["main"]}


@app.callback()
def variant(name: str = typer.Option("main", "--variant", help=f"one of {', '.join(VARIANTS)}")) -> None:
    if name not in VARIANTS:
        raise typer.BadParameter(f"--variant: one of {', '.join(VARIANTS)}")
    CHOSEN["variant"] = VARIANTS[name]


@app.command()
def commbench(repeats: int = 5, rounds: int = 2) -> None:
    v = CHOSEN["variant"]
    for case in v.cases:
        out = v.commbench(case)
        if (out / "fit.json").exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        n = v.carried_from or case.nodes
        at = Case(case.rate, n, (case.commbench_dilation or case.dilation) if v.dilated else 1)
        sizes = v.sizes if v.dilated else LOADED_SIZES
        args = ["--backends", ",".join(v.backends), *at.placed(), "--sizes", sizes, "--repeats", str(repeats)]
        args += ["--dilation", str(at.dilation)] if at.dilation > 1 else []
        run(["run.py", "commbench", *args, "--rounds", str(rounds), "--out", str(out)])


@app.command()
def reference(repeats: int = 5, steps: int = 60) -> None:
    c = CHOSEN["variant"].computation
    out = c.reference
    if (out / "report.md").exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    args = [*c.task, "--batch-size", str(c.micro), "--backends", "single", "--nprocs", "1", "--emulate", c.profile]
    run(["run.py", "compare", *args, "--max-steps", str(steps), "--repeats", str(repeats), "--out", str(out)])


@app.command()
def predict() -> None:
    """Every case of the variant from one backward measured on this CPU: the first case's (`project` writes it beside
    its output), passed to the others as `--profile`, so that the cases differ in N and the links only (a backward
    measured anew for each moved ResNet-18's ddp predictions by up to 2 points: docs/projection.md, "Why ddp's
    ResNet-18 error grows with the nodes"; the variants predicted before 2026-12-07 measured one per case)."""
    v = CHOSEN["variant"]
    shape: list[str] = []
    for case in v.cases:
        path = v.prediction(case)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            n, c = case.nodes, v.computation
            plan = ["--nodes", str(n), "--nprocs", "1", "--batch-size", str(c.micro * n)]
            plan += ["--backends", ",".join(v.backends)]
            commbench = ["--commbench", str(v.commbench(case))]
            run(["run.py", "project", str(c.reference), *commbench, *plan, *shape, "--output", str(path)])
        shape = shape or ["--profile", str(path.with_suffix(".profile.json"))]


@app.command()
def measure(repeats: int = 3) -> None:
    """The emulated sweeps (refused before the predictions)."""
    v = CHOSEN["variant"]
    missing = [f"{c.rate} n{c.nodes}" for c in v.cases if not v.prediction(c).exists()]
    if missing:
        raise SystemExit(f"predict first (python -m benchmarks.emulated_projection predict): {', '.join(missing)}")
    for case in v.cases:
        out = v.sweep(case)
        if (out / "report.md").exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        n, c = case.nodes, v.computation
        args = [*c.task, "--batch-size", str(c.micro * n), "--backends", ",".join(v.backends), *case.placed()]
        args += ["--emulate", c.profile, "--dilation", str(case.dilation), "--max-steps", str(c.steps)]
        args += ["--repeats", str(repeats)]
        run(["run.py", "compare", *args, "--out", str(out)])


def rows(v: Variant | None = None) -> list[dict]:
    """Each case and library of the variant (the chosen one by default): predicted, measured, the error."""
    from distbench.sweep import grouping

    v = v or CHOSEN["variant"]
    out = []
    for case in v.cases:
        predicted = {p["backend"]: p for p in json.loads(v.prediction(case).read_text())}
        sweep = v.sweep(case)
        recs = grouping.load([sweep]).records if (sweep / "results.jsonl").exists() else []
        for backend in v.backends:
            runs = [r["samples_per_sec"] for r in recs if r["status"] == "ok" and r["backend"] == backend]
            failed = sum(r["status"] != "ok" for r in recs if r["backend"] == backend)
            m = statistics.median(runs) if runs else None
            p = predicted[backend]
            err = (p["samples_per_sec"] - m) / m if m else None
            row = {"case": case, "nodes": case.nodes, "backend": backend, "p": p, "runs": runs, "failed": failed}
            out.append(row | {"measured": m, "error": err})
    return out


@app.command()
def table(out: Path = ROOT / "docs" / "projection.md") -> None:
    v = CHOSEN["variant"]
    c = v.computation
    data = rows()
    name = next(k for k, x in VARIANTS.items() if x is v)
    flags = "" if name == "main" else f" --variant {name}"
    folders = ", ".join(f"{p.relative_to(ROOT)}/measured-nN" for p in dict.fromkeys(v.sweeps.values()))
    rates = " and ".join(dict.fromkeys(case.rate for case in v.cases))
    lines = [
        v.section,
        "",
        f"Produced by `python -m benchmarks.emulated_projection{flags} table` on {machine()}, from the predictions in "
        f"{v.out.relative_to(ROOT)}/predictions/ (written by `... predict`, from the commbenches in "
        f"{(v.commbench_from or v.out).relative_to(ROOT)}/commbench/) and the sweeps {folders} (-kK: at dilation K, "
        "every wait K times longer and the links K times slower, the times divided back: docs/emulation.md). "
        f"{c.said} emulated from `{c.profile}` (this machine's CPU at one thread, micro-batch {c.micro}): N "
        f"simulated nodes x 1 process on per-node links of {rates}, sharing 2 cores (an emulated node computes "
        f"nothing; docs/emulation.md); global batch {c.micro} x N. Reference: `single` x1 emulated from the same "
        f"profile; commbench {v.commbench_said()}. Error = (predicted - measured) / measured, measured = the median "
        "samples/s over the rounds (min-max beside it).",
        "",
        cases_summary(data),
        "",
        "| link | nodes | dilation | library | predicted samples/s (interval) | measured (min-max, runs) | error |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['case'].rate} | {r['nodes']} | {r['case'].dilation} | {r['backend']} | {case_cells(r)} |" for r in data
    ]
    write_section(out, v.section, [*lines, ""])
    print("\n".join(lines))


def profile_prediction(v: Variant, case: Case) -> Path:
    """The case predicted from the module profile the sweeps replayed (`from-profile`)."""
    return v.out / "predictions-from-profile" / f"{case.rate}-n{case.nodes}.json"


@app.command("from-profile")
def from_profile() -> None:
    """Every variant's cases predicted again by `project --from-profile`: the module profile the emulated runs
    replayed as the computation (in place of the emulated reference's runs and a backward measured on this CPU), the
    commbench the case's prediction took; after the sweeps, nothing fitted to them."""
    for v in PROFILED.values():
        for case in v.cases:
            path = profile_prediction(v, case)
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            plan = ["--nodes", str(case.nodes), "--nprocs", "1", "--backends", ",".join(v.backends)]
            inputs = ["--from-profile", v.computation.profile, "--commbench", str(v.commbench(case))]
            run(["run.py", "project", *inputs, *plan, "--output", str(path)])


PROFILED = {name: v for name, v in VARIANTS.items() if v.profiled}
PROFILE_SECTION = "## Every case again from the module profile (`project --from-profile`), after the sweeps"


def _profile_rows() -> list[tuple[str, dict, float]]:
    """(variant, its row as `table` has it, the error of the prediction from the profile) for every measured case."""
    out = []
    for name, v in PROFILED.items():
        for r in [r for r in rows(v) if r["measured"]]:
            predicted = {p["backend"]: p for p in json.loads(profile_prediction(v, r["case"]).read_text())}
            out.append((name, r, predicted[r["backend"]]["samples_per_sec"] / r["measured"] - 1))
    return out


def _spread(errors: list[float]) -> str:
    return f"median {statistics.median(map(abs, errors)):.1%}, largest {max(map(abs, errors)):.1%}"


def _superseded(name: str, case: Case) -> bool:
    """A case predicted again from a commbench at the sweep's dilation (a `dilated` variant's, the input the
    validation settled on): its first prediction's commbench was at dilation 1 or carried from 4 nodes."""
    again = {(c.rate, c.nodes) for v in VARIANTS.values() if v.dilated for c in v.cases}
    return not VARIANTS[name].dilated and (case.rate, case.nodes) in again


def _summary(data: list[tuple[str, dict, float]]) -> list[str]:
    """The spread of both errors over the settled cases, all models and each model."""
    settled = [(n, r, e) for n, r, e in data if not _superseded(n, r["case"])]
    lines = []
    for model in dict.fromkeys(VARIANTS[n].computation.said for n, _, _ in settled):
        of = [(r["error"], e) for n, r, e in settled if VARIANTS[n].computation.said == model]
        lines.append(
            f"- {model}: {len(of)} cases, as tabled above {_spread([b for b, _ in of])}; from the profile "
            f"{_spread([a for _, a in of])}"
        )
    head = (
        f"**{len(settled)} cases with the commbench the validation settled on (at the sweep's dilation where one was "
        f"measured): as tabled above {_spread([r['error'] for _, r, _ in settled])}; from the profile "
        f"{_spread([e for _, _, e in settled])}.** The other {len(data) - len(settled)} rows (main's 8 and 16 nodes, "
        "held-out's) keep their commbench at dilation 1 or carried from 4 nodes, whose error the profile does not "
        "change: it is the link's."
    )
    return [head, "", *lines, "", *_by_nodes(settled)]


def _by_nodes(settled: list[tuple[str, dict, float]]) -> list[str]:
    """The settled cases' error by node count and library (issue 38's table): cases, median and largest |error|,
    as tabled above / from the profile."""
    said = "cases: median / largest as tabled; from the profile"
    backends = list(dict.fromkeys(r["backend"] for _, r, _ in settled))
    lines = [
        "| nodes | " + " | ".join(f"{b} ({said})" for b in backends) + " |",
        "|---|" + "---|" * len(backends),
    ]
    for n in sorted({r["nodes"] for _, r, _ in settled}):
        cells = []
        for b in backends:
            of = [(r["error"], e) for _, r, e in settled if (r["nodes"], r["backend"]) == (n, b)]
            before, after = [abs(x) for x, _ in of], [abs(y) for _, y in of]
            cells.append(
                f"{len(of)}: {statistics.median(before):.1%} / {max(before):.1%}; "
                f"{statistics.median(after):.1%} / {max(after):.1%}"
            )
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


@app.command("profile-table")
def profile_table(out: Path = ROOT / "docs" / "projection.md") -> None:
    data = _profile_rows()
    lines = [
        PROFILE_SECTION,
        "",
        f"Produced by `python -m benchmarks.emulated_projection from-profile` then `... profile-table` on {machine()}: "
        "each variant's cases above predicted again by `run.py project --from-profile PROFILE` with the same "
        "commbench, the computation and the backward's shape taken from the module profile the emulated runs "
        "replayed, in place of the emulated `single` x1 reference's runs and a backward measured on this CPU; "
        "predictions in each variant's predictions-from-profile/, written after the sweeps (nothing in them fitted "
        "to the sweeps: the model is the same, only its input). The variants main, held-out, dilated, "
        "held-out-400, libraries and libraries-dilated are MNIST's ConvNet; the others the model their name holds "
        "(resnet18, minilm). "
        "Error = (predicted - measured) / measured, against the median of the same sweeps.",
        "",
        *_summary(data),
        "",
        "| variant | link | nodes | dilation | library | measured samples/s | error as tabled above "
        "| error from the profile |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {r['case'].rate} | {r['nodes']} | {r['case'].dilation} | {r['backend']} | {r['measured']:.2f} "
        f"| {r['error']:+.1%} | {e:+.1%} |"
        for name, r, e in data
    ]
    write_section(out, PROFILE_SECTION, [*lines, ""])
    print("\n".join(lines))


if __name__ == "__main__":
    app()
