"""Each library's step as a timeline, from one process's computation, the shape of its backward and the link: when
gradients become ready during the last micro-batch's backward, as late as the slowest of the ranks gets there
(`expected_max_normal`), how the library groups them (DDP's buckets, by torch's own assignment: `ddp_step`; Horovod's
fusion of what is ready at each cycle: `horovod_step`), and their all-reduces one after another on the link. The step
ends when both backward (on CPU nodes, lengthened by what the all-reduces take from it) and the last all-reduce are
done; then the optimizer runs."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distbench.errors import UserError
from distbench.planning.links import Link
from distbench.planning.profile import Profile
from distbench.planning.reference import Phases

HOROVOD_CYCLE_S = 1e-3  # Horovod >= 0.21: HOROVOD_CYCLE_TIME's default (1 ms)
HOROVOD_FUSION_BYTES = 128 * 2**20  # Horovod >= 0.21: HOROVOD_FUSION_THRESHOLD's default (128 MB)


@dataclass(frozen=True)
class Plan:
    """The scale a projection is for."""

    nodes: int
    nprocs: int
    batch_size: int  # global
    accumulate: int
    compression: str
    cores_shared: bool = False  # CPU training: the processes' computation and their all-reduces share the cores
    zero_stage: int = 0  # DeepSpeed's ZeRO stage (the backends that take --zero-stage)

    @property
    def world(self) -> int:
        """The planned processes, all nodes together."""
        return self.nodes * self.nprocs

    @property
    def micro_batch(self) -> int:
        """One process's batch in one micro-batch."""
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


# DeepSpeed 0.19's defaults below stage 3 (deepspeed/runtime/zero/config.py, engine.py): no overlap_comm, and
# gradients reduced in buckets of 5e8 elements (reduce_bucket_size; stage 0: MEMORY_OPT_ALLREDUCE_SIZE)
ZERO_BUCKET_ELEMENTS = 500_000_000
ZERO_STAGES_MODELLED = (0, 1, 2, 3)  # stage 3: only with its engine measured on one node (engine.py)
NORM_BYTES = 4  # stages 1-2 all-reduce the gradients' norm every step: one float32 (stage_1_and_2.scaled_global_norm)
# what the first validation found of stages 1-2 with the all-gather taken as half an all-reduce and no norm
# (docs/projection.md, 2026-12-03, MNIST at 2 nodes): `project` says it where commbench did not time the all-gather
ZERO_FOUND = (
    "ZeRO-1 and 2 were predicted 35-42 % too fast on an unshaped link, 13-15 % at 1 Gbit/s and 5-6 % at 100 Mbit/s "
    "when validated with the all-gather taken as half an all-reduce (2 nodes, MNIST; docs/projection.md): this "
    "commbench did not time DeepSpeed's all-gather (a commbench of deepspeed does, since 2026-12-04)"
)

# what the validation of this model found (docs/projection.md, 2026-12-04), written after it was measured
ZERO_GATHER_FOUND = (
    "ZeRO-1 and 2 with commbench's all-gather and the norm's all-reduce were predicted 37-43 % too fast on an unshaped "
    "link, 15-22 % at 1 Gbit/s and 8 % at 100 Mbit/s when validated (2 nodes, MNIST, 6 rounds; their cost against "
    "stage 0 paired within rounds: within 19 %): about 3 ms a step of DeepSpeed's engine at two ranks is not "
    "modelled; --node-sweep and --node-commbench measure it (docs/projection.md)"
)

# what the validation of stages 0-3 with the engine and stage 0's step measured on one node and DeepSpeed's collectives
# timed under load found (docs/projection.md, 2026-12-05), written after it
ZERO_LOADED_FOUND = (
    "with the engine and stage 0's step measured on one node and DeepSpeed's collectives timed under load on CPU "
    "nodes, ZeRO stages 0-3 were predicted with a median error of 5.2 % and a largest of 16.1 % when validated "
    "(2 nodes, MNIST, 3 links, 6 rounds; the model before it, collectives timed on an idle core: 6.6 % and 26.0 % "
    "on the same sweeps); not validated on GPUs, where commbench measures no load and they take its idle time "
    "(docs/projection.md)"
)


def zero_step(comp: Computation, profile: Profile, link_: Link, plan: Plan, engine_s: float | None = None) -> float:
    """DeepSpeed's engine at ZeRO stages 0-3: at the accumulation boundary, after the last backward, stages 0-2
    all-reduce the gradients in buckets of ZERO_BUCKET_ELEMENTS (one for any model under 2 GB), through deepspeed.comm,
    not overlapped with backward (stage 2's reduce-scatter is, on this path, an all-reduce of each bucket of which each
    rank keeps its partition: stage_1_and_2.average_tensor); its all-reduces' computation comes after backward's, not
    during it. Stage 0 then steps the whole optimizer. Stages 1-2 all-reduce the gradients' norm (one float, every
    step, whether or not it clips: a latency on which the ranks wait for each other), step their 1/W partition of the
    optimizer and all-gather the updated fp32 parameters (all_gather_dp_groups): commbench's fit of DeepSpeed's own
    all_gather_into_tensor where it timed it (`link_.gather`), else half a ring all-reduce of as many bytes (its
    arithmetic; the first validation found it too fast: ZERO_FOUND). Where the engine was measured on one node
    (`engine_s`: its step at stage K beyond stage 0's, less its collectives there beyond stage 0's; engine.py), stage K
    is stage 0's timeline, that measured work, and what stage K exchanges beyond stage 0 on the planned link
    (`zero_exchanges_s`); else (stages 1-2 only) the engine's own work is the optimizer's partition alone
    (ZERO_GATHER_FOUND: about 3 ms a step short at two ranks). On CPU nodes `link_` holds commbench's times under
    load (TIMED_UNDER_LOAD)."""
    total = profile.total_bytes
    clock = comp.backward_start + comp.backward + zero_allreduce_s(link_, total, plan.world)
    if plan.zero_stage == 0:
        return clock + comp.optimizer
    if engine_s is not None:
        return clock + comp.optimizer + engine_s + zero_exchanges_s(link_, profile, plan.zero_stage, plan.world)
    gather = _gather_s(link_, total, plan.world)
    if link_.gather is None:
        return clock + comp.optimizer / plan.world + gather
    return clock + link_.allreduce_s(NORM_BYTES, plan.world) + comp.optimizer / plan.world + gather


def zero_allreduce_s(link_: Link, total: float, world: int) -> float:
    """Stages 0-2's all-reduce of `total` bytes of gradients, one bucket of ZERO_BUCKET_ELEMENTS after another."""
    bucket = ZERO_BUCKET_ELEMENTS * 4  # float32 gradients
    return sum(
        link_.allreduce_s(link_.wire_fraction * min(bucket, total - start), world)
        for start in range(0, int(total), bucket)
    )


def zero_exchanges_s(link_: Link, profile: Profile, stage: int, world: int) -> float:
    """What a ZeRO-`stage` step exchanges beyond a stage-0 step, s, on `link_`. Stages 1-2: the gradients' norm
    all-reduced and the updated parameters all-gathered. Stage 3 (DeepSpeed 0.19's defaults, as its comms logger saw
    them at 2 ranks, docs/projection.md): the norm, each parameter all-gathered once per step as forward fetches it
    (one all_gather_into_tensor per parameter: `profile.grad_bytes`; with the default live-parameter and reuse limits a
    model that fits keeps them through backward), and the gradients reduce-scattered once backward is done, in place
    of stage 0's all-reduce. The all-gather and reduce-scatter are commbench's fits where it timed them, else half a
    ring all-reduce (their arithmetic)."""
    norm = link_.allreduce_s(NORM_BYTES, world)
    total = profile.total_bytes
    if stage in (1, 2):
        return norm + _gather_s(link_, total, world)
    gathers = sum(_gather_s(link_, b, world) for b in profile.grad_bytes)
    scatter = link_.scatter.allgather_s(total, world) if link_.scatter else link_.allreduce_s(total, world) / 2
    return norm + gathers + scatter - zero_allreduce_s(link_, total, world)


def _gather_s(link_: Link, nbytes: float, world: int) -> float:
    return link_.gather.allgather_s(nbytes, world) if link_.gather else link_.allreduce_s(nbytes, world) / 2


def fsdp_step(comp: Computation, profile: Profile, link_: Link, plan: Plan) -> float:
    """FSDP2 (fully_shard on each of the task's shard units, then on the root), whose collectives block the host where
    it computes (its unshard_async_op is False by default, and on CPU it has no streams to run them on): before each
    unit's forward its parameters are all-gathered, and again before its backward for every unit but the root, which
    keeps them from forward to backward (FSDPState._lazy_init); once a unit's backward is done its gradients are
    reduce-scattered; each rank's optimizer steps its 1/W shard. Commbench's fits of FSDP2's own all-gather
    (`link_.gather`) and reduce-scatter (`link_.scatter`) where it timed them, else half a ring all-reduce each. Not
    overlapped with the computation, so the order does not matter: a sum. On GPUs FSDP2 overlaps them on streams of
    their own: not modelled, and this is then an upper bound."""
    units = profile.shard_units
    if units is None:
        raise UserError(FSDP_UNITS_UNKNOWN)
    check_fsdp_accumulate(plan.accumulate)
    root, world = profile.total_bytes - sum(units), plan.world
    gathers = sum(2 * _gather_s(link_, b, world) for b in units if b) + (_gather_s(link_, root, world) if root else 0.0)
    scatters = sum(_scatter_s(link_, link_.wire_fraction * b, world) for b in [*units, root] if b)
    return comp.backward_start + comp.backward + gathers + scatters + comp.optimizer / world


# what every FSDP2 prediction rests on, in its warnings: validated where the collectives block the host
FSDP_SERIAL_SAID = (
    "FSDP2's all-gathers and reduce-scatters are taken one after another, none overlapped with the computation, as "
    "where they block the host (CPU nodes; validated on emulated ones within 6 %, docs/projection.md); on GPUs FSDP2 "
    "overlaps them on streams of its own, not modelled: there this step is an upper bound"
)


def check_fsdp_accumulate(accumulate: int) -> None:
    """FSDP2's accumulation (no reduce-scatter and no resharding between micro-batches) is not modelled: one line."""
    if accumulate > 1:
        raise UserError(
            f"--accumulate {accumulate}: project has no model of FSDP2's gradient accumulation (without resharding "
            "between micro-batches); plan fsdp at --accumulate 1"
        )


FSDP_UNITS_UNKNOWN = (
    "the profile does not say which gradients each of the task's FSDP units holds (one written before it did): "
    "profile the task again (run.py profile, or project without --profile)"
)


def _scatter_s(link_: Link, nbytes: float, world: int) -> float:
    return link_.scatter.allgather_s(nbytes, world) if link_.scatter else link_.allreduce_s(nbytes, world) / 2


# the timeline each library follows (Accelerate and Fabric wrap the model in DDP; DeepSpeed's engine: zero_step;
# FSDP2: fsdp_step)
MODELS = {
    "ddp": "ddp",
    "accelerate": "ddp",
    "fabric": "ddp",
    "horovod": "horovod",
    "deepspeed": "zero",
    "accelerate-deepspeed": "zero",
    "fsdp": "fsdp",
}
# whose all-reduce carries each library's gradients: Accelerate's and Fabric's go through the DDP they wrap the model
# in (torch.distributed.all_reduce), not through accelerator.reduce or fabric.all_reduce, which commbench also times;
# Accelerate's DeepSpeed plugin through DeepSpeed's engine
GRADIENT_ALLREDUCE = {
    "ddp": "ddp",
    "accelerate": "ddp",
    "fabric": "ddp",
    "horovod": "horovod",
    "deepspeed": "deepspeed",
    "accelerate-deepspeed": "deepspeed",
    "fsdp": "fsdp",  # its reduce-scatter (commbench's `fsdp reduce-scatter`)
}


# the timelines whose collectives take, on CPU nodes, commbench's time under load (a computation on the rank's core)
# rather than on an idle core: DeepSpeed's engine, whose collectives come after backward yet were measured as long as
# commbench's loaded time between two CPU nodes (docs/projection.md, "What the stages 0-3 validation says"); DDP's and
# Horovod's take the idle time and what their all-reduces take from backward's computation (ddp_step, horovod_step)
TIMED_UNDER_LOAD = ("zero",)


def timed_under_load(backend: str, plan: Plan) -> bool:
    """Whether `backend`'s collectives are fitted to commbench's time under load for this plan (TIMED_UNDER_LOAD, on
    CPU nodes: `cores_shared`)."""
    return plan.cores_shared and MODELS.get(backend) in TIMED_UNDER_LOAD


def step_s(
    backend: str, comp: Computation, profile: Profile, link_: Link, plan: Plan, cap_mb: float, engine_s=None
) -> float:
    """One step of `backend`, s: the timeline its library follows (MODELS); `engine_s`: zero_step's."""
    if MODELS[backend] == "horovod":
        return horovod_step(comp, profile, link_, plan)
    if MODELS[backend] == "zero":
        return zero_step(comp, profile, link_, plan, engine_s)
    if MODELS[backend] == "fsdp":
        return fsdp_step(comp, profile, link_, plan)
    return ddp_step(comp, profile, link_, plan, cap_mb)


def largest_message(backend: str, profile: Profile, cap_mb: float) -> tuple[float, str]:
    """The largest message `backend`'s step sends with its gradients, bytes before any compression, and what it is:
    where it is larger than any size the commbench timed, the prediction carries the fitted line past what was
    measured (Projection.warnings). FSDP2's largest unit (or the root) is also its largest all-gather."""
    grads = profile.grad_bytes
    if MODELS[backend] == "horovod":  # the largest fusion: every gradient ready within one cycle
        return max(_fusion_chunks(grads)), "Horovod's largest fused all-reduce"
    if MODELS[backend] == "zero":
        return min(ZERO_BUCKET_ELEMENTS * 4, profile.total_bytes), "DeepSpeed's all-reduce of the gradients"
    if MODELS[backend] == "fsdp":
        units = profile.shard_units or []
        return max([*units, profile.total_bytes - sum(units)]), "FSDP2's largest unit"
    return max(sum(grads[i] for i in b) for b in ddp_buckets(profile, cap_mb)), "DDP's largest bucket"
