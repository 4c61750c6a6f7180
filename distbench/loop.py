"""The backend-agnostic training loop: build, shard, train, evaluate exactly, report.

It talks to the task (model, data, step) and to the backend (setup, sharding, wrapping, collectives),
never to a distributed library directly.
"""

from __future__ import annotations

import math
import os
import platform
import resource
import signal
import time
from dataclasses import replace
from datetime import UTC, datetime
from importlib import metadata

import psutil
import torch

import distbench
from backends import get_backend_class
from backends.base import Backend, env_local_world_size, env_world_size, launcher_from_env
from distbench import checkpoint
from distbench.affinity import pin_process
from distbench.config import RunConfig, default_threads, validate
from distbench.reporter import Reporter
from distbench.tasks import Task, build_task, with_defaults


def move_to(batch, device: torch.device):
    if device.type == "cpu":
        return batch  # already there; skip walking the structure on the hot path
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(move_to(v, device) for v in batch)
    return batch


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def environment(backend: Backend, threads: int, cores: list[int] | None = None) -> dict:
    return {
        "torch": torch.__version__,
        "accelerate": _version("accelerate"),
        "horovod": _version("horovod"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "threads_per_process": threads,
        "pinned_cores": cores,  # this process's cores (see distbench/affinity.py); None: not pinned
        "device": str(backend.device),
        "device_name": torch.cuda.get_device_name(backend.device) if backend.device.type == "cuda" else "cpu",
    }


def evaluate(task: Task, model, loader, backend: Backend) -> dict:
    """Exact evaluation: each rank sums over its disjoint share, the sums are all-reduced."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad(), backend.autocast():
        for batch in loader:
            out = task.evaluate(model, move_to(batch, backend.device))
            totals += torch.stack([out["loss_sum"], out["correct"], out["count"]]).double().cpu()
    model.train(was_training)
    totals = backend.all_reduce(totals.to(backend.device), "sum").cpu()
    loss_sum, correct, count = totals.tolist()
    return {
        "accuracy": correct / count if count else float("nan"),
        "loss": loss_sum / count if count else float("nan"),
        "count": int(round(count)),
    }


def _inject_fault(rank: int, step: int) -> None:
    """Failure injection for the reliability tests: DISTBENCH_FAULT=kill:RANK:STEP SIGKILLs that rank after
    that global step, on the first attempt only (a torchrun restart then runs clean)."""
    spec = os.environ.get("DISTBENCH_FAULT")
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    kind, fault_rank, fault_step = spec.split(":")
    if kind == "kill" and int(fault_rank) == rank and int(fault_step) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(torch.tensor(values, dtype=torch.float64).quantile(q))


def peak_memory_mb(backend: Backend) -> float:
    if backend.device.type == "cuda":
        return torch.cuda.max_memory_allocated(backend.device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def train(task: Task, backend: Backend, cfg: RunConfig, threads: int, reporter: Reporter,
          resume: dict | None = None, cores: list[int] | None = None) -> dict:  # fmt: skip
    """Train and evaluate on this process; returns the results record (complete on every rank)."""
    proc_start = psutil.Process().create_time()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with backend.main_process_first():
        train_ds, test_ds = task.datasets()
    info = task.dataset_info()
    if info.get("notice"):
        reporter.info(info["notice"])

    torch.manual_seed(cfg.seed)  # identical initial weights on every rank and under every backend
    model = task.build_model()
    optimizer = task.build_optimizer(model)
    train_loader = backend.train_loader(train_ds, task.collate, cfg.batch_size, cfg.seed)
    test_loader = backend.eval_loader(test_ds, task.collate, cfg.eval_batch_size)
    model, optimizer, train_loader = backend.prepare(model, optimizer, train_loader)

    steps_per_epoch = backend.steps_per_epoch
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    n_epochs = math.ceil(total_steps / steps_per_epoch)
    scheduler = task.build_scheduler(optimizer, total_steps, steps_per_epoch)
    torch.manual_seed(cfg.seed + 1 + backend.rank)  # dropout masks: a distinct stream per rank

    step, prior_losses = 0, []  # step: global steps done, counting those before a resume
    ckpt_path = checkpoint.path_in(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    if resume is not None:
        state = resume
        backend.unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None and state["scheduler"] is not None:
            scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"][backend.rank].clone())  # a view (storage offset > 0) is misread by torch
        step, prior_losses = state["step"], state["loss_history"].tolist()
        reporter.info(f"resuming from {ckpt_path} at step {step} (epoch {step // steps_per_epoch + 1})")
    start_step = step
    warmup = min(5, (total_steps - start_step) // 4)  # steps excluded from the throughput window

    def save_checkpoint() -> None:
        # Collectives first (every rank), then only the main process writes.
        history = prior_losses + (backend.all_reduce(torch.stack(losses), "sum") / backend.world_size).tolist()
        rng = backend.all_gather(torch.get_rng_state().to(backend.device)).cpu()
        if backend.is_main:
            checkpoint.save({
                "format": checkpoint.FORMAT, "step": step, "world_size": backend.world_size,
                "model": backend.unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng, "loss_history": torch.tensor(history, dtype=torch.float64), "config": cfg.to_dict(),
            }, ckpt_path)  # fmt: skip

    losses: list[torch.Tensor] = []
    step_ms: list[float] = []
    phase = {"data_ms": 0.0, "forward_backward_ms": 0.0, "optimizer_ms": 0.0}
    epoch_evals: list[dict] = []
    time_to_target = None
    first_step_at = None
    eval_s_in_window = 0.0
    t_window = None
    model.train()
    reporter.start(total_steps, f"{task.name}/{backend.name} x{backend.world_size}", initial=start_step)
    t_train = time.perf_counter()
    for epoch in range(start_step // steps_per_epoch, n_epochs):
        backend.set_epoch(epoch, start_step - epoch * steps_per_epoch if epoch == start_step // steps_per_epoch else 0)
        batches = iter(train_loader)
        while step < total_steps:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            batch = move_to(batch, backend.device)
            t1 = time.perf_counter()
            optimizer.zero_grad()  # set_to_none by default; Horovod's wrapper takes no arguments
            with backend.autocast():
                loss = task.step(model, batch)
            backend.backward(loss)
            t2 = time.perf_counter()
            backend.optimizer_step(model, optimizer, cfg.max_grad_norm)
            if scheduler is not None:
                scheduler.step()
            t3 = time.perf_counter()
            losses.append(loss.detach().float())
            step += 1
            done = step - start_step
            if first_step_at is None:
                first_step_at = time.time()
            if done > warmup:
                step_ms.append((t3 - t0) * 1e3)
                phase["data_ms"] += (t1 - t0) * 1e3
                phase["forward_backward_ms"] += (t2 - t1) * 1e3
                phase["optimizer_ms"] += (t3 - t2) * 1e3
            if done == warmup:
                backend.barrier()
                t_window = time.perf_counter()
            if reporter.progress and (step % cfg.log_every == 0 or step == total_steps):
                reporter.update(step, loss.item())  # the only per-step host sync, every log_every steps
            if ckpt_path is not None and step % cfg.checkpoint_every == 0:
                save_checkpoint()
            _inject_fault(backend.rank, step)
        if cfg.target_accuracy is not None or epoch == n_epochs - 1:
            t_eval = time.perf_counter()
            ev = evaluate(task, backend.unwrap(model), test_loader, backend)
            ev["epoch"], ev["step"] = epoch + 1, step
            epoch_evals.append(ev)
            if time_to_target is None and cfg.target_accuracy is not None and ev["accuracy"] >= cfg.target_accuracy:
                time_to_target = t_eval - t_train - sum(e.get("eval_s", 0.0) for e in epoch_evals)
            ev["eval_s"] = time.perf_counter() - t_eval
            if epoch < n_epochs - 1:
                eval_s_in_window += ev["eval_s"]
    backend.barrier()
    t_end = time.perf_counter()
    reporter.close()
    if t_window is None:
        t_window = t_train
    steady_steps = step - start_step - warmup
    window_s = t_end - t_window - eval_s_in_window - epoch_evals[-1]["eval_s"]
    samples_per_sec = cfg.batch_size * steady_steps / window_s if window_s > 0 and steady_steps else float("nan")

    loss_history = prior_losses + (backend.all_reduce(torch.stack(losses), "sum") / backend.world_size).tolist()
    peak_mb = backend.all_reduce(torch.tensor([peak_memory_mb(backend)], device=backend.device), "max").item()
    raw = backend.unwrap(model)
    checksum = float(sum(p.detach().double().sum() for p in raw.parameters()))
    final = epoch_evals[-1]
    n_steady = max(1, steady_steps)
    return {
        "schema_version": distbench.SCHEMA_VERSION,
        "backend": backend.name,
        "task": task.name,
        "world_size": backend.world_size,
        "global_batch_size": cfg.batch_size,
        "per_rank_batch_size": cfg.batch_size // backend.world_size,
        "seed": cfg.seed,
        "steps": step,
        "resumed_from_step": start_step,
        "steps_per_epoch": steps_per_epoch,
        "epochs": round(step / steps_per_epoch, 4),
        "warmup_steps": warmup,
        "samples_per_sec": samples_per_sec,
        "step_time_ms": {"p50": _percentile(step_ms, 0.5), "p90": _percentile(step_ms, 0.9)},
        "step_breakdown_ms": {k: v / n_steady for k, v in phase.items()},
        "startup_s": (first_step_at - proc_start) if first_step_at else None,
        "first_step_unix": first_step_at,  # lets a driver measure launch-to-first-step, launcher included
        "peak_rss_mb": peak_mb,
        "final_loss": loss_history[-1],
        "loss_history": loss_history,
        "eval_accuracy": final["accuracy"],
        "eval_loss": final["loss"],
        "eval_count": final["count"],
        "eval_history": epoch_evals,
        "target_accuracy": cfg.target_accuracy,
        "time_to_target_s": time_to_target,
        "param_checksum": checksum,
        "dataset": info,
        "environment": environment(backend, threads, cores),
        "launcher": launcher_from_env(),
        # torchrun: how often this machine's agent had restarted the worker group when this run began
        "launcher_restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
        "precision": cfg.precision,
        "config": cfg.to_dict(),
        "started_at": started_at,
        "wall_time_s": time.time() - proc_start,
    }


def run(cfg: RunConfig) -> dict:
    """Validate, set up the backend, train, write the record on the main process, tear down."""
    backend_cls = get_backend_class(cfg.backend)
    backend_cls.check_launcher()
    cfg = with_defaults(cfg)
    validate(cfg, env_world_size())
    threads = cfg.threads or default_threads(env_local_world_size())
    cfg = replace(cfg, threads=threads)
    torch.set_num_threads(threads)
    task = build_task(cfg)
    resume = None
    if cfg.checkpoint_dir is not None and checkpoint.path_in(cfg.checkpoint_dir).is_file():
        # checked before any process group starts: a bad checkpoint is one line, exit 2
        resume = checkpoint.load(checkpoint.path_in(cfg.checkpoint_dir), cfg.to_dict(), env_world_size())
    backend = backend_cls(precision=cfg.precision, timeout_s=cfg.timeout_s)
    backend.setup()
    torch.set_num_threads(threads)  # again: some libraries (Accelerate on CPU) reset it during setup
    # after setup, so that the libraries' communication threads started there are not pinned
    cores = None
    if cfg.pin_cores and backend.device.type == "cpu":
        cores = pin_process(backend.local_rank, env_local_world_size(), threads)
    # No teardown when training fails: destroying a process group whose peer died can block, and a
    # blocked worker keeps torchrun from restarting the group. Process exit releases everything.
    reporter = Reporter(backend.is_main, cfg.progress)
    record = train(task, backend, cfg, threads, reporter, resume, cores)
    reporter.write_record(record, cfg.output)
    reporter.summary(record, cfg.output)
    backend.teardown()
    return record
