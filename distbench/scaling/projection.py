"""`run.py project`: a library's step time at a planned scale, from what one machine measured (docs/projection.md).

Three measurements go in, each where it is measured best:

- the computation, from a compare sweep's `single` x1 runs: the step's phases (data, forward+backward, optimizer)
  and how much a step's time varies, at the sweep's global batch and at each batch it ran, per run (`Reference`);
- the shape of backward, from the task's own model on this machine (`Profile`): when each gradient is ready, as a
  fraction of backward, forward's share of forward+backward, and how forward+backward scales from the sweep's batch
  to a process's micro-batch;
- the link, from commbench's fit of each library's own all-reduce (`Link`): t(S) = alpha + beta S at the world size
  it was measured at, carried to other world sizes as a ring all-reduce (as is, or as its compression sends it); on
  CPU nodes also what it takes from a computing core, fitted alike; or the link's nominal rate.

Each library's step is then a timeline (`ddp_step`, `horovod_step`): gradients become ready during the last
micro-batch's backward, as late as the slowest of the ranks gets there (`expected_max_normal`), are grouped as the
library groups them (DDP's buckets, by torch's own assignment; Horovod's fusion of what is ready at each cycle) and
all-reduced one after another on the link; the step ends when both backward (on CPU nodes, lengthened by what the
all-reduces take from it) and the last all-reduce are done, then the optimizer runs. The interval comes from the
spread of every measurement it uses: the prediction is repeated on bootstrap resamples of the reference runs (their
samples/s too, for the efficiency), of commbench's repeats and of the profile's passes (`interval`).

What a projection extrapolates from and to, and each way it goes beyond what was measured, it says
(`Projection.scope`, `Projection.warnings`).
"""

from __future__ import annotations

import functools
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from distbench.errors import UserError
from distbench.launching import link
from distbench.scaling import commbench as cb
from distbench.training.reporter import read_jsonl, write_json

RESAMPLES = 200  # bootstrap resamples behind each interval
HOROVOD_CYCLE_S = 1e-3  # Horovod >= 0.21: HOROVOD_CYCLE_TIME's default (1 ms)
HOROVOD_FUSION_BYTES = 128 * 2**20  # Horovod >= 0.21: HOROVOD_FUSION_THRESHOLD's default (128 MB)
COMPRESSED_FRACTION = {"none": 1.0, "fp16": 0.5, "bf16": 0.5}  # bytes on the link per gradient byte


# ---------------------------------------------------------------------------------------------------- the inputs


NORMAL_P90 = 1.2816  # the 90th percentile of a standard normal, in standard deviations


@dataclass(frozen=True)
class Phases:
    """One step's computation, ms: data loading, forward+backward, optimizer; and how much the step time varies
    from step to step (`jitter`, a standard deviation taken from the run's median and 90th percentile)."""

    data: float
    forward_backward: float
    optimizer: float
    jitter: float = 0.0


@dataclass(frozen=True)
class Reference:
    """The sweeps' `single` x1 runs of one task: the computation of a step, run by run, at the planned global batch
    where they ran it, else at their largest (`runs`), and at every batch they ran (`by_batch`: a run at a planned
    micro-batch is that micro-batch's computation, measured rather than scaled)."""

    task: str
    batch_size: int
    threads: int
    device: str  # the reference's device type: cpu or cuda
    config: dict  # the run's options (RunConfig.to_dict), to build the same task
    runs: list[Phases]
    samples_per_sec: list[float]
    by_batch: dict[int, list[Phases]] = field(default_factory=dict)

    @classmethod
    def load(cls, sweep_dirs: list[Path], batch: int | None = None) -> Reference:
        """The reference of the compare folders; a folder of another kind, or whose records are not a compare's, is
        one line."""
        for d in sweep_dirs:
            if not (d / "results.jsonl").is_file():
                raise UserError(f"{d}: not a compare folder (no results.jsonl)")
        where = " ".join(map(str, sweep_dirs))
        try:
            return cls._of(sweep_dirs, batch, where)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            said = f"a record lacks {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            raise UserError(f"{where}: not what compare writes ({said})") from e

    @classmethod
    def _of(cls, sweep_dirs: list[Path], batch: int | None, where: str) -> Reference:
        from distbench.sweep import report

        recs = [r for r in report.load(sweep_dirs).records if _is_reference(r)]
        if not recs:
            raise UserError(
                f"{where}: no successful `single` x1 run (accumulate 1, no compression, unshaped) to take the "
                "computation from; run compare with --backends single,... --nprocs 1"
            )
        shapes = {(r["task"], r["environment"]["threads_per_process"]) for r in recs}
        if len(shapes) > 1:
            raise UserError(f"{where}: `single` x1 runs of several tasks or threads: {sorted(shapes)}")
        (task, threads) = shapes.pop()
        by_batch: dict[int, list[dict]] = {}
        for r in recs:
            by_batch.setdefault(r["global_batch_size"], []).append(r)
        batch = batch if batch in by_batch else max(by_batch)  # the planned global batch where it was run
        mine = by_batch[batch]
        device = str(mine[0]["environment"]["device"]).split(":")[0]
        phases = {b: [_phases(r) for r in rs] for b, rs in by_batch.items()}
        return cls(
            task, batch, threads, device, mine[0]["config"], phases[batch], [r["samples_per_sec"] for r in mine], phases
        )


def _phases(r: dict) -> Phases:
    steps = r.get("step_time_ms") or {}
    jitter = max(0.0, steps["p90"] - steps["p50"]) / NORMAL_P90 if {"p50", "p90"} <= steps.keys() else 0.0
    return Phases(*(r["step_breakdown_ms"][k] for k in ("data_ms", "forward_backward_ms", "optimizer_ms")), jitter)


@functools.cache
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for one; 0.564 for two, 1.029 for four, 1.766 for sixteen):
    how far the slowest of n ranks is behind the mean, in standard deviations of a rank's step time."""
    if n <= 1:
        return 0.0
    dx = 1e-3
    grid = [-8 + i * dx for i in range(int(16 / dx) + 1)]
    cdf = [0.5 * (1 + math.erf(x / math.sqrt(2))) for x in grid]
    pdf = [math.exp(-x * x / 2) / math.sqrt(2 * math.pi) for x in grid]
    return sum(x * n * f * c ** (n - 1) for x, f, c in zip(grid, pdf, cdf, strict=True)) * dx


def median_phases(runs: list[Phases]) -> Phases:
    return Phases(*(statistics.median(getattr(p, f) for p in runs) for f in Phases.__dataclass_fields__))


def _is_reference(r: dict) -> bool:
    return (
        r["status"] == "ok"
        and r["backend"] == "single"
        and r["world_size"] == 1
        and r.get("accumulate", 1) == 1
        and r.get("grad_compression", "none") == "none"
        and (r.get("link_rate") or link.UNSHAPED) == link.UNSHAPED
    )


@dataclass(frozen=True)
class Profile:
    """The task's backward as measured on this machine: gradient bytes in the order they become ready, when each is
    ready (a fraction of backward), forward's share of forward+backward, and forward+backward at the micro-batch
    over forward+backward at the reference batch."""

    grad_bytes: list[int]  # per parameter, in ready order
    ready: list[float]  # per parameter, in ready order: (ready - backward start) / backward
    forward_share: float
    micro_over_reference: float
    micro_batch: int  # the batch forward+backward was measured at (against the reference's)
    # the passes the two ratios are the medians of, s: forward and backward at the micro-batch, pass by pass, and
    # forward+backward at the reference batch (a profile from before they were kept has none: its ratios are exact)
    passes: dict[str, list[float]] = field(default_factory=dict)

    PASSES = ("micro_forward_s", "micro_backward_s", "reference_s")

    @property
    def total_bytes(self) -> int:
        return sum(self.grad_bytes)

    def to_dict(self) -> dict:
        return {
            "grad_bytes": self.grad_bytes,
            "ready": self.ready,
            "forward_share": self.forward_share,
            "micro_over_reference": self.micro_over_reference,
            "micro_batch": self.micro_batch,
            **({"passes": self.passes} if self.passes else {}),
        }

    def resampled(self, rng: random.Random) -> Profile:
        """The profile of a bootstrap resample of its passes (a micro-batch pass's forward and backward together);
        itself where it kept none."""
        if not self.passes:
            return self
        fwd, bwd, full = (self.passes[k] for k in self.PASSES)
        picks = [rng.choice(range(len(fwd))) for _ in fwd]
        f, b = statistics.median(fwd[i] for i in picks), statistics.median(bwd[i] for i in picks)
        whole = statistics.median(rng.choice(full) for _ in full)
        return replace(self, forward_share=f / (f + b), micro_over_reference=(f + b) / whole)

    @classmethod
    def read(cls, path: Path) -> Profile:
        """A profile a previous `project` wrote (OUTPUT.profile.json): the same prediction without measuring."""
        try:
            d = json.loads(path.read_text())
            passes = {k: [float(v) for v in d["passes"][k]] for k in cls.PASSES} if "passes" in d else {}
            profile = cls(
                list(d["grad_bytes"]),
                list(d["ready"]),
                float(d["forward_share"]),
                float(d["micro_over_reference"]),
                int(d["micro_batch"]),
                passes,
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"--profile {path}: not a profile written by run.py project ({type(e).__name__})") from e
        if len(profile.grad_bytes) != len(profile.ready) or not profile.grad_bytes:
            raise UserError(f"--profile {path}: its gradient sizes and ready times do not match")
        if passes and (not all(passes.values()) or len(passes["micro_forward_s"]) != len(passes["micro_backward_s"])):
            raise UserError(f"--profile {path}: its passes do not match")
        return profile


def profile_path(output: Path) -> Path:
    """Where `project` keeps the profile it measured, beside its output."""
    return output.with_name(output.stem + ".profile.json")


@dataclass(frozen=True)
class Link:
    """One library's all-reduce on the link: t(S) = alpha + beta S at `world` ranks (commbench), or at the link's
    nominal rate with no latency."""

    alpha_s: float
    beta_s_per_byte: float
    world: int
    source: str
    # the computation an all-reduce takes from a rank whose core computes (commbench under load; else its CPU time
    # on an idle core; 0: not measured), fitted alike
    cpu_alpha_s: float = 0.0
    cpu_beta_s_per_byte: float = 0.0
    wire_fraction: float = 1.0  # the bytes the fit is taken at per gradient byte (0.5: halved by a compression)
    # why commbench's fit of the time, and of the computation taken, is not a latency and a bandwidth (None: it is;
    # cb.unphysical); the projection then takes it held at alpha, beta >= 0, and says so
    time_why: str | None = None
    cpu_why: str | None = None

    def allreduce_s(self, nbytes: float, world: int) -> float:
        """A ring all-reduce of nbytes at `world` ranks: 2(W-1) latency steps and 2(W-1)/W of the bytes on each
        link, scaled from the world size the fit was measured at."""
        return _ring(self.alpha_s, self.beta_s_per_byte, self.world, nbytes, world)

    def cpu_s(self, nbytes: float, world: int) -> float:
        """The CPU time the same all-reduce costs each rank (its share of the copies and the reduction: the same
        ring scaling)."""
        return _ring(self.cpu_alpha_s, self.cpu_beta_s_per_byte, self.world, nbytes, world)

    @classmethod
    def nominal(cls, rate: str, compression: str = "none") -> Link:
        bits = link.parse_rate(rate)
        if bits is None:
            raise UserError("--link-rate none has no nominal rate: give --commbench DIR measured on that link")
        # a ring moves 2(n-1)/n S over each link: beta is the time per message byte at n = 2 (one byte per byte)
        said = f"nominal {rate}, no latency (no --commbench)"
        return cls(0.0, 8 / bits, 2, said, wire_fraction=COMPRESSED_FRACTION[compression])


def _ring(alpha: float, beta: float, measured_world: int, nbytes: float, world: int) -> float:
    if world <= 1:
        return 0.0
    measured = 2 * (measured_world - 1) / measured_world
    return alpha * (world - 1) / max(1, measured_world - 1) + beta * nbytes * (2 * (world - 1) / world) / measured


# what `project` needs of each commbench record, and of what type
COMMBENCH_FIELDS = {"backend": str, "size_bytes": int, "time_s": int | float, "world_size": int}


def load_links(commbench_dir: Path, rate: str | None) -> tuple[str, dict[str, list[dict]]]:
    """The link commbench measured and its records per backend, checked against the planned link; a folder that is
    not a commbench's, or whose records are not, is one line."""
    path = commbench_dir / cb.RECORDS
    if not path.is_file():
        raise UserError(f"--commbench {commbench_dir}: no {cb.RECORDS} (a `run.py commbench --out` folder)")
    lines = read_jsonl(path)
    recs = lines.records
    if not recs:
        said = f" ({lines.skipped[0]}{' ...' if len(lines.skipped) > 1 else ''})" if lines.skipped else ""
        raise UserError(f"--commbench {commbench_dir}: {cb.RECORDS} holds no record{said}")
    for number, r in enumerate(recs, 1):
        wrong = [k for k, kind in COMMBENCH_FIELDS.items() if not isinstance(r.get(k), kind)]
        if wrong or not r["time_s"] > 0 or r["size_bytes"] <= 0:
            raise UserError(
                f"--commbench {commbench_dir}: record {number} of {cb.RECORDS} is not a commbench record "
                f"({', '.join(wrong) or 'time_s and size_bytes'} missing or not a positive number)"
            )
    measured = {r.get("link_rate") or link.UNSHAPED for r in recs}
    if len(measured) > 1 or (rate is not None and measured != {rate}):
        said = "/".join(sorted(map(str, measured)))
        raise UserError(f"--commbench {commbench_dir} holds {said}, not one link{f' of {rate}' if rate else ''}")
    out: dict[str, list[dict]] = {}
    for r in recs:
        out.setdefault(r["backend"], []).append(r)
    return measured.pop(), out


def fit_link(recs: list[dict], source: str, wire_fraction: float = 1.0) -> Link:
    """The fit of one library's records: per size, the median time (as commbench's summary), and the median
    computation an all-reduce takes under load (else its CPU time on an idle core, from a commbench that did not
    measure under load); each held at alpha, beta >= 0, with why it is not physical where it is not."""
    sizes = sorted({r["size_bytes"] for r in recs})

    def medians(key: str) -> list[float]:
        return [statistics.median(r[key] for r in recs if r["size_bytes"] == s) for s in sizes]

    def fitted(values: list[float]) -> cb.Fit:
        return cb.fit(sizes, [max(1e-9, v) for v in values])

    times = medians("time_s")
    f, time_why = fitted(times), cb.unphysical(sizes, times)
    world = recs[0]["world_size"]
    cpu_key = next((k for k in ("loaded_cpu_s", "cpu_s") if all(r.get(k) is not None for r in recs)), None)
    if cpu_key is None:  # a commbench from before CPU time was recorded
        return Link(f.alpha_s, f.beta_s_per_byte, world, source, wire_fraction=wire_fraction, time_why=time_why)
    cpu = medians(cpu_key)
    c = fitted(cpu)
    said = f"{source}{'' if cpu_key == 'loaded_cpu_s' else ' (CPU time on an idle core: not measured under load)'}"
    cpu_why = cb.unphysical(sizes, cpu, cb.SAID[cpu_key])
    return Link(
        f.alpha_s, f.beta_s_per_byte, world, said, c.alpha_s, c.beta_s_per_byte, wire_fraction, time_why, cpu_why
    )


# ------------------------------------------------------------------------------------------------ measuring backward


def measure_profile(ref: Reference, micro_batch: int, repeats: int = 5) -> Profile:
    """Forward and backward of the task's model at the micro-batch and at the reference batch, on this machine with
    the reference's threads: when each gradient is ready (post-accumulate-grad hooks) and how long each part takes."""
    import torch

    from distbench.config import RunConfig
    from distbench.tasks import build_task, load_datasets

    torch.set_num_threads(ref.threads)
    cfg = RunConfig.from_dict(ref.config)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model()
    train = load_datasets(task)[0]
    params = [p for p in model.parameters() if p.requires_grad]

    def batch(n: int):
        return task.collate([train[i % len(train)] for i in range(n)])

    def one_pass(b) -> tuple[float, float, list[float]]:
        ready = [0.0] * len(params)
        hooks = [
            p.register_post_accumulate_grad_hook(lambda _p, i=i: ready.__setitem__(i, time.perf_counter()))
            for i, p in enumerate(params)
        ]
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = task.step(model, b)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        for h in hooks:
            h.remove()
        return t1 - t0, t2 - t1, [(r - t1) / (t2 - t1) for r in ready]

    model.train()
    micro, full = batch(micro_batch), batch(ref.batch_size)
    for b in (micro, full):  # warm-up
        one_pass(b)
    passes = [one_pass(micro) for _ in range(repeats)]
    full_passes = [sum(one_pass(full)[:2]) for _ in range(repeats)]
    full_s = statistics.median(full_passes)
    fwd, bwd = statistics.median(p[0] for p in passes), statistics.median(p[1] for p in passes)
    ready = [statistics.median(p[2][i] for p in passes) for i in range(len(params))]
    order = sorted(range(len(params)), key=lambda i: ready[i])
    return Profile(
        grad_bytes=[params[i].numel() * params[i].element_size() for i in order],
        ready=[min(1.0, max(0.0, ready[i])) for i in order],
        forward_share=fwd / (fwd + bwd),
        micro_over_reference=(fwd + bwd) / full_s,
        micro_batch=micro_batch,
        passes={
            "micro_forward_s": [p[0] for p in passes],
            "micro_backward_s": [p[1] for p in passes],
            "reference_s": full_passes,
        },
    )


# ------------------------------------------------------------------------------------------------------ the models


@dataclass(frozen=True)
class Plan:
    """The scale a projection is for."""

    nodes: int
    nprocs: int
    batch_size: int  # global
    accumulate: int
    compression: str
    cores_shared: bool = False  # CPU training: the processes' computation and their all-reduces share the cores

    @property
    def world(self) -> int:
        return self.nodes * self.nprocs

    @property
    def micro_batch(self) -> int:
        return self.batch_size // (self.world * self.accumulate)


@dataclass(frozen=True)
class Computation:
    """One process's step without communication, s: `accumulate` micro-batches of data and forward+backward, one
    optimizer step; backward of the last micro-batch starts at `backward_start` and lasts `backward`. `lockstep`:
    how much later than the mean the slowest rank gets there (every exchange waits for it)."""

    data: float
    forward: float
    backward: float
    optimizer: float
    accumulate: int
    lockstep: float = 0.0

    @classmethod
    def of(
        cls, phases: Phases, profile: Profile, ref_batch: int, plan: Plan, micro: Phases | None = None
    ) -> Computation:
        """`phases` at the reference batch scaled to the plan's micro-batch by the profile; or, where the sweep ran
        the micro-batch itself (`micro`), its data, forward+backward and step-time jitter as measured. The slowest of
        W ranks is late by the expected maximum of W draws of a step's jitter (K micro-batches: sqrt(K) times one's)."""
        if micro is not None:
            fb, data, jitter = micro.forward_backward / 1e3, micro.data / 1e3, micro.jitter / 1e3
        else:
            fb = phases.forward_backward / 1e3 * profile.micro_over_reference
            data = phases.data / 1e3 * plan.micro_batch / ref_batch
            jitter = phases.jitter / 1e3 * profile.micro_over_reference
        lockstep = jitter * math.sqrt(plan.accumulate) * expected_max_normal(plan.world)
        forward, backward = fb * profile.forward_share, fb * (1 - profile.forward_share)
        return cls(data, forward, backward, phases.optimizer / 1e3, plan.accumulate, lockstep)

    @property
    def backward_start(self) -> float:
        """From the step's start: every micro-batch's data, the first K-1 forward+backward, the last forward, and the
        wait for the slowest rank."""
        return (
            self.accumulate * self.data
            + (self.accumulate - 1) * (self.forward + self.backward)
            + self.forward
            + self.lockstep
        )

    def step_s(self, communication_end: float, communication_cpu: float = 0.0) -> float:
        """The step: until backward and the last all-reduce are both done, then the optimizer. On a node whose cores
        all compute (CPU training), the CPU time of the all-reduces (`communication_cpu`) is taken from backward's:
        backward cannot end before its own time plus theirs."""
        backward_end = self.backward_start + self.backward + communication_cpu
        return max(backward_end, communication_end) + self.optimizer


def serial(ready_and_bytes: list[tuple[float, float]], link_: Link, world: int, start_cost: float = 0.0) -> float:
    """All-reduces on one link, one after another, each starting when its data is ready and the link is free (plus
    `start_cost` each): when the last one ends."""
    free = 0.0
    for ready, nbytes in ready_and_bytes:
        free = max(free, ready) + start_cost + link_.allreduce_s(nbytes, world)
    return free


def ddp_buckets(profile: Profile, cap_mb: float) -> list[list[int]]:
    """DDP's rebuilt buckets (after the first step, in the order gradients became ready): torch's own assignment,
    the first bucket capped at 1 MB, the others at bucket_cap_mb."""
    import torch
    import torch.distributed as dist

    fake = [torch.empty(n // 4) for n in profile.grad_bytes]  # float32 gradients: the sizes are what matter
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(cap_mb * 2**20)]
    return dist._compute_bucket_assignment_by_size(fake, limits, [False] * len(fake))[0]


def ddp_step(comp: Computation, profile: Profile, link_: Link, plan: Plan, cap_mb: float) -> float:
    """DDP (and Accelerate, which is DDP underneath): under no_sync the first K-1 micro-batches only accumulate; in
    the last one's backward each bucket is all-reduced as soon as its last gradient is ready (DDP's reducer), in
    bucket order; a comm hook's compression sends fewer bytes."""
    shrink = link_.wire_fraction
    jobs = []
    for bucket in ddp_buckets(profile, cap_mb):
        ready = comp.backward_start + comp.backward * max(profile.ready[i] for i in bucket)
        jobs.append((ready, shrink * sum(profile.grad_bytes[i] for i in bucket)))
    cpu = sum(link_.cpu_s(nbytes, plan.world) for _, nbytes in jobs) if plan.cores_shared else 0.0
    return comp.step_s(serial(jobs, link_, plan.world), cpu)


def horovod_step(comp: Computation, profile: Profile, link_: Link, plan: Plan) -> float:
    """Horovod: with backward_passes_per_step=K the hooks all-reduce after the K-th backward only; its background
    thread wakes every cycle and all-reduces what is ready by then, fused, up to the fusion threshold per all-reduce.
    Each fused all-reduce takes commbench's time of Horovod's all-reduce: commbench times it from the hook's enqueue
    to its end, so its latency already holds the wait for the cycle and the negotiation."""
    shrink = link_.wire_fraction
    ready = [comp.backward_start + comp.backward * r for r in profile.ready]
    clock, cpu, i, n = 0.0, 0.0, 0, len(ready)
    while i < n:
        clock = max(clock, ready[i])
        cycle = HOROVOD_CYCLE_S * math.ceil(clock / HOROVOD_CYCLE_S)  # the wake-up that takes it, and what is ready
        fused = []
        while i < n and ready[i] <= cycle:
            fused.append(shrink * profile.grad_bytes[i])
            i += 1
        for chunk in _fusion_chunks(fused):
            clock += link_.allreduce_s(chunk, plan.world)
            cpu += link_.cpu_s(chunk, plan.world)
    return comp.step_s(clock, cpu if plan.cores_shared else 0.0)


def _fusion_chunks(sizes: list[float]) -> list[float]:
    chunks, current = [], 0.0
    for s in sizes:
        if current and current + s > HOROVOD_FUSION_BYTES:
            chunks.append(current)
            current = 0.0
        current += s
    return [*chunks, current] if current else chunks


MODELS = {"ddp": "ddp", "accelerate": "ddp", "horovod": "horovod"}  # the timeline each library follows
# whose all-reduce carries each library's gradients: Accelerate's go through the DDP it wraps the model in
# (torch.distributed.all_reduce), not through accelerator.reduce, which commbench also times
GRADIENT_ALLREDUCE = {"ddp": "ddp", "accelerate": "ddp", "horovod": "horovod"}


def step_s(backend: str, comp: Computation, profile: Profile, link_: Link, plan: Plan, cap_mb: float) -> float:
    if MODELS[backend] == "horovod":
        return horovod_step(comp, profile, link_, plan)
    return ddp_step(comp, profile, link_, plan, cap_mb)


# ------------------------------------------------------------------------------------------------ the prediction


def interval(point: float, resamples: list[float]) -> tuple[float | None, float | None, str | None]:
    """The 95 % interval of a prediction from its bootstrap resamples: their 2.5-97.5 % range, an end that falls on
    the point or inside it (resamples tied with the point: an input without spread, a fit held at 0) moved out to the
    nearest resample beyond the point, so that the point lies strictly inside. Where no resample lies beyond the
    point on a side, there is no interval: (None, None, why)."""
    ordered = sorted(resamples)
    below = [v for v in ordered if v < point]
    above = [v for v in ordered if v > point]
    if not below or not above:
        why = (
            "its inputs do not vary" if not below and not above else f"no resample {'below' if not below else 'above'}"
        )
        return None, None, why
    n = len(ordered)
    return min(ordered[int(0.025 * n)], below[-1]), max(ordered[int(0.975 * n) - 1], above[0]), None


@dataclass(frozen=True)
class Projection:
    ref: Reference
    profile: Profile
    plan: Plan
    links: dict[str, list[dict]] | None  # commbench's records per backend; None: the nominal link
    rate: str | None
    cap_mb: float

    def measured_as(self, backend: str) -> str:
        """The commbench backend whose all-reduce carries this library's gradients (its own if that is missing)."""
        carrier = GRADIENT_ALLREDUCE[backend]
        return carrier if self.links is not None and carrier in self.links else backend

    def carried(self, backend: str) -> tuple[list[dict], float, str]:
        """The carrier's commbench records for the plan's compression, the bytes its fit is taken at per gradient
        byte, and what they are: the compression as the library sends it where commbench timed it, else the
        uncompressed all-reduce at the compressed size."""
        carrier, compression = self.measured_as(backend), self.plan.compression
        recs = self.links[carrier]
        timed = [r for r in recs if cb.series(r)[1] == compression]
        if timed:
            return timed, 1.0, f"commbench fit of {cb.label(carrier, compression)}"
        plain = [r for r in recs if cb.series(r)[1] == "none"]
        if not plain:
            raise UserError(f"the commbench timed {carrier} neither with {compression} nor uncompressed")
        return plain, COMPRESSED_FRACTION[compression], f"commbench fit of {carrier} at {compression}'s size"

    def link_for(self, backend: str, recs: list[dict] | None = None) -> Link:
        if self.links is None:
            return Link.nominal(self.rate, self.plan.compression)
        carried, fraction, said = self.carried(backend)
        return fit_link(recs if recs is not None else carried, said, fraction)

    @property
    def micro_runs(self) -> list[Phases] | None:
        """The sweep's runs at the plan's micro-batch, if it ran it (None: scale the reference's by the profile)."""
        return self.ref.by_batch.get(self.plan.micro_batch)

    @property
    def measured(self) -> dict | None:
        """The scale and link the commbench measured at (None: no commbench, the nominal link)."""
        if self.links is None:
            return None
        recs = [r for rs in self.links.values() for r in rs]
        nodes = max(r.get("nodes") or 1 for r in recs)
        world = max(r["world_size"] for r in recs)
        mode = recs[0].get("link_mode") or "shared"
        return {"world_size": world, "nodes": nodes, "nprocs": world // nodes, "link_mode": mode}

    def scope(self, sweep_dirs: list[Path]) -> list[str]:
        """What the projection extrapolates from, and to what: two lines to print before its table."""
        ref, plan, m = self.ref, self.plan, self.measured
        link_from = (
            f"the link's nominal rate {self.rate} (no commbench)"
            if m is None
            else f"a commbench of {m['nodes']} node(s) x {m['nprocs']} process(es) ({m['world_size']} ranks), link "
            f"{self.rate} ({m['link_mode']})"
        )
        return [
            f"From: {len(ref.runs)} `single` x1 run(s) of {ref.task} in {' '.join(map(str, sweep_dirs))} at global "
            f"batch {ref.batch_size}, {ref.threads} thread(s) per process ({ref.device}); {link_from}.",
            f"To: {plan.nodes} node(s) x {plan.nprocs} process(es) ({plan.world} ranks), global batch "
            f"{plan.batch_size} (micro-batch {plan.micro_batch} x {plan.accumulate}), link {self.rate}, one per node.",
        ]

    def warnings(self) -> list[str]:
        """Each way the plan goes beyond what was measured (the fits' own: `link_warnings`)."""
        plan, m, out = self.plan, self.measured, []
        if m is None:
            out.append(
                f"the link {self.rate} was not measured: it is taken at its nominal rate, with no latency and no CPU "
                "cost (give --commbench DIR, measured on it)"
            )
        else:
            if plan.world > m["world_size"]:
                out.append(
                    f"{plan.world} ranks, beyond the {m['world_size']} the commbench measured: the all-reduce at "
                    f"{plan.world} ranks is its fit at {m['world_size']} carried by a ring's arithmetic, not measured"
                )
            if plan.nodes > m["nodes"]:
                alone = (
                    " (one node: its ranks talked over its loopback, no link between nodes)" if m["nodes"] == 1 else ""
                )
                out.append(f"{plan.nodes} nodes, beyond the {m['nodes']} the commbench measured{alone}")
        if not self.micro_runs and plan.micro_batch != self.ref.batch_size:
            out.append(
                f"forward+backward at micro-batch {plan.micro_batch} is batch {self.ref.batch_size}'s scaled by the "
                f"profile, not measured (`single` x1 runs at batch {plan.micro_batch}, given as a second folder, "
                "measure it; docs/projection.md)"
            )
        return out

    def link_warnings(self, link_: Link) -> list[str]:
        """A fit that is not physical, as the prediction takes it (held at alpha, beta >= 0)."""
        whys = {"": link_.time_why, " (the computation it takes)": self.plan.cores_shared and link_.cpu_why}
        return [
            f"{link_.source}{what}: not physical ({why}); the prediction takes its alpha and beta held at 0 or above"
            for what, why in whys.items()
            if why and (not what or why != link_.time_why)  # the same reason for both: said once
        ]

    def one(self, backend: str, phases: Phases, link_: Link, micro: Phases | None = None, profile=None) -> float:
        profile = profile or self.profile
        comp = Computation.of(phases, profile, self.ref.batch_size, self.plan, micro)
        return step_s(backend, comp, profile, link_, self.plan, self.cap_mb)

    def predict(self, backend: str, seed: int = 0) -> dict:
        micro, plan = self.micro_runs, self.plan
        link_ = self.link_for(backend)
        step = self.one(backend, median_phases(self.ref.runs), link_, micro and median_phases(micro))
        single = statistics.median(self.ref.samples_per_sec)
        sps = plan.batch_size / step
        rng = random.Random(seed)
        boot_sps, boot_eff = [], []
        for _ in range(RESAMPLES):
            picks = self._picks(rng, self.ref.runs)
            b_step = self.one(
                backend,
                median_phases([self.ref.runs[i] for i in picks]),
                self._resampled_link(backend, rng),
                micro and median_phases([micro[i] for i in self._picks(rng, micro)]),
                self.profile.resampled(rng),
            )
            boot_sps.append(plan.batch_size / b_step)
            # the efficiency's reference resampled with the same runs
            boot_eff.append(boot_sps[-1] / (plan.world * statistics.median(self.ref.samples_per_sec[i] for i in picks)))
        eff = sps / (plan.world * single)
        sps_lo, sps_hi, sps_why = interval(sps, boot_sps)
        eff_lo, eff_hi, _ = interval(eff, boot_eff)
        return {
            "backend": backend,
            "nodes": plan.nodes,
            "nprocs": plan.nprocs,
            "world_size": plan.world,
            "global_batch_size": plan.batch_size,
            "micro_batch_size": plan.micro_batch,
            "accumulate": plan.accumulate,
            "grad_compression": plan.compression,
            "link_rate": self.rate,
            "link": link_.source,
            "computation": f"measured at micro-batch {plan.micro_batch}"
            if micro
            else f"batch {self.ref.batch_size} scaled to micro-batch {plan.micro_batch} by the profile",
            "step_ms": step * 1e3,
            "samples_per_sec": sps,
            "samples_per_sec_lo": sps_lo,
            "samples_per_sec_hi": sps_hi,
            "no_interval": sps_why,  # why samples/s has none (None: it has one)
            # strong scaling: the same global batch on one process (the reference) and on world_size processes
            "scaling_efficiency": eff,
            "scaling_efficiency_lo": eff_lo,
            "scaling_efficiency_hi": eff_hi,
            "reference_samples_per_sec": single,
            "commbench": self.measured,
            "warnings": [*self.warnings(), *self.link_warnings(link_)],
        }

    @staticmethod
    def _picks(rng: random.Random, runs: list) -> list[int]:
        """A bootstrap resample of the runs, as their indices."""
        return [rng.choice(range(len(runs))) for _ in runs]

    def _resampled_link(self, backend: str, rng: random.Random) -> Link:
        if self.links is None:
            return Link.nominal(self.rate, self.plan.compression)
        by_size: dict[int, list[dict]] = {}
        for r in self.carried(backend)[0]:
            by_size.setdefault(r["size_bytes"], []).append(r)
        recs = [rng.choice(group) for group in by_size.values() for _ in group]
        return self.link_for(backend, recs)


def write(rows: list[dict], profile: Profile, output: Path) -> None:
    """The prediction (one object per backend) and the profile it used, as valid JSON."""
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json(output, rows, indent=2, sort_keys=True)
    write_json(profile_path(output), profile.to_dict())


def with_interval(point: float, lo: float | None, hi: float | None) -> str:
    """`point (lo-hi)` with as many decimals (one at least) as it takes for each end to read apart from the point."""
    if lo is None or hi is None:
        return f"{point:.1f}"
    digits = next((d for d in range(1, 7) if f"{lo:.{d}f}" != f"{point:.{d}f}" != f"{hi:.{d}f}"), 6)
    return f"{point:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def table(rows: list[dict]) -> str:
    head = "| backend | nodes x procs | link | step ms | samples/s (95 % interval) | scaling efficiency |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        sps = with_interval(r["samples_per_sec"], r["samples_per_sec_lo"], r["samples_per_sec_hi"])
        if r.get("no_interval"):
            sps += f" (no interval: {r['no_interval']})"
        lines.append(
            f"| {r['backend']} | {r['nodes']} x {r['nprocs']} | {r['link']} | {r['step_ms']:.1f} | {sps} | "
            f"{r['scaling_efficiency']:#.2g} |"
        )
    return "\n".join(lines)


def with_plan(projection: Projection, **changes) -> Projection:
    return replace(projection, plan=replace(projection.plan, **changes))
