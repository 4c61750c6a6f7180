"""The results record: one JSON object per run, a stable contract (fields listed in docs/architecture.md).

Built on every rank (its collectives need all of them); only the main process writes it.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass, field
from importlib import metadata

import torch
from torch import nn

from distbench.backends.base import Backend, ReduceOp
from distbench.config import RunConfig
from distbench.launching import link, topology
from distbench.launching.affinity import current_cores, load_average
from distbench.machine import available_cpus
from distbench.records import SCHEMA_VERSION
from distbench.training import flops
from distbench.training.timer import StartupClock, StepTimer


@dataclass
class Facts:
    """What the record says about this process beyond training: its start-up, when it started, its cores."""

    startup: StartupClock  # from the process's start to its first training step
    started_at: str
    cores: list[int] | None = None  # the cores this process is pinned to; None: not pinned
    # the machine's 1-minute load average when these facts are gathered: after the imports, before training
    load_before: float | None = field(default_factory=load_average)
    # as training starts, the most threads of one process that found no core free of other processes' computing
    # threads (training/loop.py busy_machine); None: not looked at (GPU, or ranks sharing their cores)
    short_threads: int | None = None


@dataclass(frozen=True)
class RunResult:
    """What a process's training left for its record (Trainer.result): the run's backend and options, and what it
    trained, to what loss and in how many steps. The record reads the run from this value, never from the Trainer."""

    backend: Backend  # set up, for the record's collectives (the ranks' placement, memory, fingerprints)
    cfg: RunConfig  # as the run used them: the task's defaults and the threads filled in
    task: str
    accuracy_meaningful: bool  # False: synthetic data
    model: nn.Module  # as the backend wrapped it
    dataset: dict  # the datasets' description (name, source, sizes)
    data_fingerprint: int  # of this rank's datasets (training/fairness.py)
    steps_per_epoch: int
    steps: int  # global steps done, counting those before a resume
    loss_history: list[float]  # the global mean loss of every step, those before a resume included
    memory: dict  # training/memory.py per_rank, at the end of training
    time_to_target_s: float | None  # training time until --target-accuracy was first reached
    compute: dict  # the model's FLOPs and tokens per sample, and how they were counted (Trainer.compute_counts)
    emulated: dict | None = None  # --emulate: the profile and the waits (emulation/emulator.py); None: computed
    fault: dict | None = None  # --fault: what was asked and, met and survived, what it cost (training/faults.py)
    launched: tuple[int, int] | None = None  # the world and nodes it was launched with (None: this attempt's)


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def environment(backend: Backend, threads: int, cores: list[int] | None) -> dict:
    """The software, the machine and this process's threads, cores, device and collective library."""
    return {
        "torch": torch.__version__,
        "accelerate": _version("accelerate"),
        "horovod": _version("horovod"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpus_available": available_cpus(),  # this process's affinity mask (taskset, cpusets)
        "threads_per_process": threads,
        "pinned_cores": cores,  # this process's cores (see distbench/launching/affinity.py); None: not pinned
        "device": str(backend.device),
        "device_name": torch.cuda.get_device_name(backend.device) if backend.device.type == "cuda" else "cpu",
        "collective": collective(backend),
    }


def collective(backend: Backend) -> str | None:
    """The library the ranks' collectives run on: torch.distributed's process group (gloo on CPU, nccl on GPU) for
    the torch-based backends; for Horovod, its own operations as it was built and started (the Gloo compiled into
    it on CPU, NCCL for GPU tensors where it was built with NCCL); None for one process without a group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())
    if backend.name == "horovod":
        import horovod.torch as hvd

        if backend.device.type == "cuda" and hvd.nccl_built():
            return "nccl"
        return "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else None
    return None


def machine_load(facts: Facts, topo: dict, world_size: int, threads: int) -> dict:
    """The machine's 1-minute load average before training (Facts) and now, at its end, beside the machine's cores
    (the scope of the load average: the whole machine) and the cores this run's processes on it asked for (threads x
    processes: all ranks for one node or simulated nodes, this node's for real ones). The report's warning and its
    definition: docs/statistics.md, "The machine's load"."""
    here = world_size if topo["simulated"] or topo["nodes"] == 1 else topo["local_world_size"]
    return {
        "avg_1m_before": facts.load_before,
        "avg_1m_after": load_average(),
        "cores": os.cpu_count(),
        "cores_used": here * threads,
        "short_threads": facts.short_threads,
    }


def dropout_p(model: nn.Module) -> float:
    """The largest probability of the model's dropout layers (0.0: none, or all off): what the model really drew
    masks with, whatever the option said."""
    kinds = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    return max((float(m.p) for m in model.modules() if isinstance(m, kinds)), default=0.0)


def peak_memory_mb(backend: Backend) -> float:
    """This process's peak: the allocator's on a GPU, the resident set's on a CPU, in MiB."""
    if backend.device.type == "cuda":
        return torch.cuda.max_memory_allocated(backend.device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def written_per_step(backend: Backend, timer: StepTimer) -> float | None:
    """Bytes written through system calls per timed step, mean over ranks (a collective). CPU only: on GPU the
    gradients travel through NCCL, not the process's system calls."""
    mine = timer.written_bytes_per_step()
    if backend.device.type != "cpu":
        return None
    value = torch.tensor([float("nan") if mine is None else mine], dtype=torch.float64, device=backend.device)
    mean = backend.all_reduce(value, ReduceOp.AVG).item()
    return None if mean != mean else mean  # NaN: some rank could not count


def scheduler_facts(env=os.environ) -> dict | None:
    """Under Slurm, what it told this (the main) process: its job and step, its node, the CPUs and GPUs it gave the
    node; None elsewhere."""
    if not env.get("SLURM_JOB_ID"):
        return None
    names = {
        "job_id": "SLURM_JOB_ID",
        "step_id": "SLURM_STEP_ID",
        "node": "SLURMD_NODENAME",
        "cpus_on_node": "SLURM_CPUS_ON_NODE",
        "gpus_on_node": "SLURM_GPUS_ON_NODE",
    }
    return {"name": "slurm", **{key: env.get(var) for key, var in names.items()}}


def placement(backend: Backend) -> list[tuple[int, list[int]]]:
    """Every rank's node and the cores it may run on now, in rank order (a collective)."""
    n = os.cpu_count() or 1
    mine = torch.zeros(1 + n, dtype=torch.int64)
    mine[0] = backend.launch.node_rank
    mine[1 + torch.tensor(current_cores(), dtype=torch.long)] = 1
    rows = backend.all_gather(mine.to(backend.device)).cpu()
    return [(int(row[0]), torch.nonzero(row[1:]).flatten().tolist()) for row in rows]


def fingerprints(backend: Backend, mine: int) -> list[int]:
    """Each rank's fingerprint of its datasets, in rank order (a collective): all equal when every rank has the same
    data."""
    return backend.all_gather(torch.tensor(mine, device=backend.device)).cpu().tolist()


def param_checksum(backend: Backend, model) -> float:
    """The sum of every parameter, whole (a sharded model's state dict gathers them: a collective)."""
    state = backend.model_state_dict(model)
    if not state:  # a sharded model's whole state is gathered on the main process only
        return float("nan")
    return float(sum(state[name].double().sum() for name, _ in backend.unwrap(model).named_parameters()))


def build_record(run: RunResult, facts: Facts, timer: StepTimer, evals: list[dict]) -> dict:
    """The results record (fields: docs/architecture.md) from what the training left, this process's facts, the step
    timer and every evaluation (the last at the end). Called on every rank, whose collectives need all of them (peak
    memory, checksum, placement, bytes written, fingerprints); only the main process writes it."""
    backend, cfg = run.backend, run.cfg
    peak = backend.all_reduce(torch.tensor([peak_memory_mb(backend)], device=backend.device), ReduceOp.MAX).item()
    checksum = param_checksum(backend, run.model)
    final = evals[-1]
    first_step = timer.first_step_unix
    if first_step is not None:
        facts.startup.mark("first_step", at=first_step)
    topo = topology.describe(backend.launch, placement(backend))
    world, nodes = run.launched or (backend.launch.world_size, backend.launch.nodes)
    return {
        "schema_version": SCHEMA_VERSION,
        "backend": backend.name,
        "task": run.task,
        "world_size": world,  # as launched (fault.world_size_after: after the job continued without a node)
        "nodes": nodes,  # as launched (topology: as this attempt's processes found them), the sweep's axis
        "threads_per_process": cfg.threads,  # the sweep's axis (also in environment)
        "global_batch_size": cfg.batch_size,
        "per_rank_batch_size": cfg.batch_size // world,
        "seed": cfg.seed,
        "steps": run.steps,
        "resumed_from_step": run.steps - timer.steps,
        "steps_per_epoch": run.steps_per_epoch,
        "epochs": round(run.steps / run.steps_per_epoch, 4),
        "accumulate": cfg.accumulate,
        "micro_batch_size": cfg.batch_size // (world * cfg.accumulate),
        "grad_compression": cfg.grad_compression,
        **(summary := undilated(timer.summary(cfg.batch_size), cfg.dilation)),
        **compute_figures(run, timer, summary["samples_per_sec"]),
        "written_bytes_per_step": written_per_step(backend, timer),
        "startup_s": facts.startup.total_s,  # process start to the end of the first step (None: no step run)
        "startup_phases_s": facts.startup.phases(),  # where it went (timer.STARTUP_PHASES)
        "first_step_unix": first_step,  # lets a driver measure launch-to-first-step, launcher included
        "peak_rss_mb": peak,
        # the largest rank's bytes of parameters, gradients and optimizer state it holds (training/memory.py)
        "memory_per_rank": run.memory,
        "final_loss": run.loss_history[-1] if run.loss_history else float("nan"),
        "loss_history": run.loss_history,
        "eval_accuracy": final["accuracy"],
        "eval_loss": final["loss"],
        "eval_count": final["count"],
        "eval_history": evals,
        "target_accuracy": cfg.target_accuracy,
        "time_to_target_s": run.time_to_target_s,
        "param_checksum": checksum,
        "dataset": run.dataset,
        "data_fingerprints": fingerprints(backend, run.data_fingerprint),
        "accuracy_meaningful": run.accuracy_meaningful,  # False: synthetic data, or emulated
        "emulated": host_share(run.emulated, backend, timer, topo),
        "fault": run.fault,
        **where_it_ran(backend, cfg.threads, facts, topo, cfg.dilation),
        "precision": cfg.precision,
        # the largest dropout probability of the model's layers: with dropout on, each rank draws its own masks
        "dropout_p": dropout_p(backend.unwrap(run.model)),
        "config": cfg.to_dict(),
        "started_at": facts.started_at,
        "wall_time_s": time.time() - facts.startup.process_start,
    }


def compute_figures(run: RunResult, timer: StepTimer, samples_per_sec: float) -> dict:
    """What GPU users read beside samples/s (training/flops.py): tokens/s for a token task (every rank's tokens over
    the timed window: a collective), model FLOPs per sample and how they were counted, achieved model TFLOP/s per
    device, and MFU against the device's peak (None where unknown; why in peak_source)."""
    counts, backend = run.compute, run.backend
    tokens = backend.all_reduce(torch.tensor([float(timer.tokens_timed)], device=backend.device), ReduceOp.SUM).item()
    timed = samples_per_sec == samples_per_sec and timer.window_s > 0  # NaN: no step in the timed window
    tokens_per_sec = tokens / timer.window_s if tokens and timed else None
    peak, source = flops.peak_tflops(backend.device, run.cfg.precision, run.cfg.peak_tflops)
    return {
        "tokens_per_sec": tokens_per_sec,
        **flops.figures(counts, samples_per_sec if timed else None, tokens_per_sec, backend.world_size, peak),
        "flops_counted": counts["flops_counted"],
        "peak_tflops": peak,
        "peak_source": source,
    }


def host_share(emulated: dict | None, backend: Backend, timer: StepTimer, topo: dict) -> dict | None:
    """An emulated run's `emulated`, with the share of its cores' time its processes used in the timed window (every
    rank's CPU time over the window times the cores they ran on; a collective) and whether that is beyond what the
    emulation allows (tasks/emulated.HOST_BUSY_LIMIT: the host was the bottleneck, not the links)."""
    if emulated is None:
        return None
    from distbench.tasks.emulated import HOST_BUSY_LIMIT

    cpu = backend.all_reduce(torch.tensor([timer.window_cpu_s or 0.0]), ReduceOp.SUM).item()
    cores = len({c for cores in topo.get("rank_cores") or [] for c in cores or []}) or available_cpus()
    share = cpu / (timer.window_s * cores) if timer.window_s > 0 else None
    return {**emulated, "host_busy_share": share, "host_bound": share is not None and share > HOST_BUSY_LIMIT}


def undilated(summary: dict, k: float) -> dict:
    """--dilation K (an emulated run's waits and link K times slower): the step's times divided back by K and
    samples/s multiplied by it, what was measured kept under `dilated` (None: not dilated)."""
    if k == 1.0:
        return {**summary, "dilated": None}
    measured = {key: summary[key] for key in ("samples_per_sec", "step_time_ms", "step_breakdown_ms")}
    return {
        **summary,
        "samples_per_sec": summary["samples_per_sec"] * k,
        "step_time_ms": {q: v / k for q, v in summary["step_time_ms"].items()},
        "step_breakdown_ms": {phase: v / k for phase, v in summary["step_breakdown_ms"].items()},
        "dilated": {"dilation": k, **measured},
    }


def where_it_ran(backend: Backend, threads: int, facts: Facts, topo: dict, dilation: float = 1.0) -> dict:
    """The record's account of where the run ran: the software and machine, the ranks' nodes and cores, the
    machine's load, the scheduler, the link between nodes and the launcher."""
    return {
        "environment": environment(backend, threads, facts.cores),
        "topology": topo,
        "load": machine_load(facts, topo, backend.world_size, threads),
        "scheduler": scheduler_facts(),  # Slurm's job, step and node of the main process (None: no scheduler)
        # the link the run's traffic crossed (launching/link.py): its rate ("none": unshaped) and mode (shared: a
        # bucket on loopback; per-node: a NIC per node, netns.py)
        **link.dilated_view(link.observe(), dilation),
        "launcher": backend.launch.launcher,
        # torchrun: how often this machine's agent had restarted the worker group when this run began
        "launcher_restarts": backend.launch.restart_count,
    }
