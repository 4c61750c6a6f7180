"""The backend-agnostic training loop: build, restore, train, evaluate exactly, report.

It talks to the task (model, data, step) and to the backend (setup, sharding, wrapping, collectives),
never to a distributed library directly. `run` does the checks and set-up of one process; `Trainer`
puts the named parts together: `build` (model, optimizer, loaders, scheduler), `Trainer.restore`, the
`StepTimer` (warm-up window, phase breakdown, evaluation excluded), `Trainer.train_step`, the
`Checkpointer` and `record.build_record`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import torch

from distbench import process
from distbench.backends import get_spec
from distbench.backends.base import Backend, ReduceOp
from distbench.config import RunConfig, check_output_writable, validate
from distbench.data import download
from distbench.data.arrays import move_to
from distbench.errors import UserError
from distbench.launching import affinity, topology
from distbench.launching.commands import check_launch
from distbench.machine import default_threads
from distbench.sharding import micro_batches
from distbench.tasks import EVAL_KEYS, Task, build_task, load_datasets, shard_units, with_defaults
from distbench.training import checkpoint, fairness, faults, flops, memory, rng
from distbench.training.record import Facts, RunResult, build_record
from distbench.training.reporter import Reporter
from distbench.training.timer import (
    DATA,
    FORWARD_BACKWARD,
    OPTIMIZER,
    StartupClock,
    StepTimer,
    device_clock,
    warmup_steps,
)


def evaluate(task: Task, model, loader, backend: Backend) -> dict:
    """Exact evaluation: each rank sums over its disjoint share, the sums are all-reduced."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad(), backend.autocast():
        for batch, counted in lockstep(loader, backend):
            out = task.evaluate(model, move_to(batch, backend.device))
            if not isinstance(out, dict) or any(k not in out for k in EVAL_KEYS):
                raise UserError(
                    f"task {task.name}: evaluate must return a dict of sums {', '.join(EVAL_KEYS)}; got "
                    f"{sorted(out) if isinstance(out, dict) else type(out).__name__}"
                )
            if counted:
                totals += torch.stack([torch.as_tensor(out[k], dtype=torch.float64).sum().cpu() for k in EVAL_KEYS])
    model.train(was_training)
    totals = backend.all_reduce(totals.to(backend.device), ReduceOp.SUM).cpu()
    loss_sum, correct, count = totals.tolist()
    return {
        "accuracy": correct / count if count else float("nan"),
        "loss": loss_sum / count if count else float("nan"),
        "count": int(round(count)),
    }


def lockstep(loader, backend: Backend):
    """(batch, counted) for each of this rank's evaluation batches. Where every forward is a collective (a sharded
    model all-gathers its parameters), a rank whose share has fewer batches than another's runs its first batch
    again, uncounted, until every rank has run as many forwards."""
    if not backend.forward_is_collective:
        yield from ((batch, True) for batch in loader)
        return
    rounds = int(backend.all_reduce(torch.tensor([len(loader)], device=backend.device), ReduceOp.MAX).item())
    first = None
    for batch in loader:
        first = batch if first is None else first
        yield batch, True
        rounds -= 1
    for _ in range(rounds):
        yield first, False


@dataclass
class Parts:
    """What the loop trains with, built the same way on every rank and under every backend."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object | None
    train_loader: object
    test_loader: object
    dataset_info: dict
    steps_per_epoch: int
    total_steps: int
    data_fingerprint: int  # of this rank's datasets (training/fairness.py): the same on every rank, by contract


def build(task: Task, backend: Backend, cfg: RunConfig, reporter: Reporter, clock: StartupClock) -> Parts:
    # The main process loads first (a download lands in the cache before the others read it); on each machine
    # only its first process may download, the others read what it fetched or fall back as it did; where a process
    # may join under way, each in turn under a lock (main_process_first), so any of them may be the first.
    may_download = backend.launch.local_rank == 0 or backend.joins_under_way
    with backend.main_process_first(), contextlib.nullcontext() if may_download else download.no_downloads():
        train_ds, test_ds, info = load_datasets(task)
    clock.mark("data")
    if info.get("notice"):
        reporter.info(info["notice"])
    data_fingerprint = fairness.fingerprint(train_ds, test_ds)
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank and under every backend
    model = task.build_model()
    optimizer = task.build_optimizer(model)
    train_loader = backend.train_loader(train_ds, task.collate, cfg.batch_size, cfg.seed)
    test_loader = backend.eval_loader(test_ds, task.collate, cfg.eval_batch_size)
    units = shard_units(task, model)
    model, optimizer, train_loader = backend.prepare(model, optimizer, train_loader, units)
    steps_per_epoch = backend.steps_per_epoch
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    build_scheduler = getattr(task, "build_scheduler", None)  # optional in the Task interface
    schedulable = backend.schedulable(optimizer)
    scheduler = build_scheduler(schedulable, total_steps, steps_per_epoch) if build_scheduler else None
    clock.mark("build")
    return Parts(
        model, optimizer, scheduler, train_loader, test_loader, info, steps_per_epoch, total_steps, data_fingerprint
    )


class Checkpointer:
    """Saves everything a resumed run needs, every `every` global steps: collectives on every rank, then
    only the main process writes (atomically)."""

    def __init__(self, cfg: RunConfig, backend: Backend, parts: Parts):
        self.path = checkpoint.path_in(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.every, self.config = cfg.checkpoint_every, cfg.to_dict()
        self.backend, self.parts = backend, parts
        own = backend.own_checkpoint
        self.library_dir = checkpoint.library_dir(cfg.checkpoint_dir, own) if own and cfg.checkpoint_dir else None

    def due(self, step: int) -> bool:
        return self.path is not None and step % self.every == 0

    def save(self, step: int, loss_history: list[float]) -> None:
        backend, parts = self.backend, self.parts
        gathered = rng.gather(backend.all_gather, backend.device)
        model, optimizer, library = self.model_and_optimizer(step)  # collectives: on every rank
        if backend.is_main:
            scheduler = parts.scheduler.state_dict() if parts.scheduler is not None else None
            ckpt = checkpoint.Checkpoint(
                step,
                backend.world_size,
                model,
                optimizer,
                scheduler,
                gathered,
                torch.tensor(loss_history, dtype=torch.float64),
                self.config,
                library,
            )
            checkpoint.save(ckpt, self.path)  # the commit: a resume reads the library's tag from here
            if library is not None:
                checkpoint.prune_library(self.library_dir, keep=library["tag"])

    def model_and_optimizer(self, step: int) -> tuple[dict, dict, dict | None]:
        """The whole model and optimizer states, or ({}, {}, the tag) where the library writes its own checkpoint
        (every rank its part, all of it written when this returns)."""
        backend, parts = self.backend, self.parts
        if self.library_dir is None:
            model = backend.model_state_dict(parts.model)
            return model, backend.optimizer_state_dict(parts.model, parts.optimizer), None
        library = {"name": backend.own_checkpoint, "tag": f"step{step}"}
        library["not_reshardable"] = backend.save_own_checkpoint(parts.model, self.library_dir, library["tag"])
        return {}, {}, library

    def restore(self, ckpt: checkpoint.Checkpoint) -> None:
        """The model and optimizer as `save` left them (on every rank)."""
        backend, parts = self.backend, self.parts
        if ckpt.library is not None:
            backend.load_own_checkpoint(parts.model, self.library_dir, ckpt.library["tag"])
            return
        backend.load_model_state_dict(parts.model, ckpt.model)
        backend.load_optimizer_state_dict(parts.model, parts.optimizer, ckpt.optimizer)


class Trainer:
    def __init__(self, task: Task, backend: Backend, cfg: RunConfig, reporter: Reporter, clock: StartupClock):
        self.task, self.backend, self.cfg, self.reporter = task, backend, cfg, reporter
        self.parts = build(task, backend, cfg, reporter, clock)
        self.checkpointer = Checkpointer(cfg, backend, self.parts)
        torch.manual_seed(cfg.seed + 1 + backend.rank)  # dropout masks: a distinct stream per rank
        self.step = 0  # global steps done, counting those before a resume
        self.prior_losses: list[float] = []  # the global mean loss of each step before a resume
        self.losses: list[torch.Tensor] = []  # this rank's losses since the start (or resume)
        self.time_to_target_s: float | None = None  # training time until --target-accuracy was first reached
        self.first_micro_batch = None  # its shapes: what the model's FLOPs are counted on (training/flops.py)
        self.events = faults.Events(cfg.checkpoint_dir)
        on_cpu = backend.device.type == "cpu" and not hasattr(task, "emulation")  # computed here: a straggler's clock
        attempt = faults.job_restarts(backend.launch.restart_count)
        self.injector = faults.Injector(cfg.fault, backend.rank, attempt, self.events, on_cpu, backend.launch)
        self.watchdog = faults.Watchdog(cfg.timeout_s + faults.WATCHDOG_GRACE_S, backend.rank, self.events)
        self.commit_every = cfg.commit_every or cfg.checkpoint_every  # Horovod Elastic's rollback point
        self.attempts = 0  # of the loop in this process: more than one after an elastic library's rollback

    def restore(self, ckpt: checkpoint.Checkpoint) -> None:
        parts = self.parts
        if ckpt.step > parts.total_steps:
            raise UserError(
                f"the checkpoint in {self.cfg.checkpoint_dir} is at step {ckpt.step}, past this run's last "
                f"step {parts.total_steps}; raise --max-steps/--epochs or use another --checkpoint-dir"
            )
        self.checkpointer.restore(ckpt)
        if parts.scheduler is not None and ckpt.scheduler is not None:
            parts.scheduler.load_state_dict(ckpt.scheduler)
        self.restore_random_streams(ckpt)
        self.step, self.prior_losses = ckpt.step, ckpt.loss_history.tolist()
        at = "its last step: nothing left to train" if self.step == parts.total_steps else f"step {self.step}"
        self.reporter.info(
            f"resuming from {self.checkpointer.path} at {at} (epoch {self.step // parts.steps_per_epoch + 1})"
        )

    def restore_random_streams(self, ckpt: checkpoint.Checkpoint) -> None:
        """Each rank's generators as the checkpoint left them; at another world size there is no such rank to
        continue, so each rank's stream (dropout's masks) starts afresh from --seed, the step and its rank."""
        backend = self.backend
        if ckpt.world_size == backend.world_size:
            rng.restore_rank(ckpt.rng, backend.rank, backend.device)
            return
        torch.manual_seed(self.cfg.seed + 1 + backend.rank + 1_000_003 * ckpt.step)
        self.reporter.info(
            f"the checkpoint was written at world size {ckpt.world_size}, this run has {backend.world_size}: the "
            "model, optimizer, step and data order continue; each rank's random stream (dropout) starts afresh"
        )

    def snapshot(self) -> dict:
        """The place an elastic library rolls back to (backends.base.Progress; a collective): the step, the loss
        history (this rank's losses folded into it) and the scheduler."""
        self.prior_losses, self.losses = self.loss_history(), []
        scheduler = self.parts.scheduler
        state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None
        return {"step": self.step, "losses": tuple(self.prior_losses), "scheduler": state}

    def resume(self, place: dict) -> None:
        """Continue from a snapshot, at each attempt of the loop in this process; after a rollback, the fault
        injector is told this rank's place in the world of the new size. Each rank's random stream (dropout's)
        goes on: a survivor's is not rolled back."""
        if self.attempts:
            self.injector.rejoined(self.backend.rank)
            self.reporter.main_is(self.backend.is_main)
        self.attempts += 1
        self.step, self.prior_losses, self.losses = place["step"], list(place["losses"]), []
        if self.parts.scheduler is not None and place["scheduler"] is not None:
            self.parts.scheduler.load_state_dict(place["scheduler"])

    def noticed(self, error: BaseException) -> None:
        self.injector.noticed(error)

    def loss_history(self) -> list[float]:
        """The global mean loss of every step so far (a collective: every rank calls it)."""
        if not self.losses:
            return list(self.prior_losses)
        return self.prior_losses + self.backend.all_reduce(torch.stack(self.losses), ReduceOp.AVG).tolist()

    def result(self) -> RunResult:
        """What this run's training left for its record (a collective: the loss history; every rank calls it)."""
        parts = self.parts
        return RunResult(
            backend=self.backend,
            cfg=self.cfg,
            task=self.task.name,
            accuracy_meaningful=getattr(self.task, "accuracy_meaningful", True),  # optional in the Task interface
            model=parts.model,
            dataset=parts.dataset_info,
            data_fingerprint=parts.data_fingerprint,
            steps_per_epoch=parts.steps_per_epoch,
            steps=self.step,
            loss_history=self.loss_history(),
            memory=self.memory,
            time_to_target_s=self.time_to_target_s,
            compute=self.compute_counts(),
            emulated=self.task.emulation() if hasattr(self.task, "emulation") else None,
            fault=self.fault_costs(),
            launched=self.launched(),
        )

    def launched(self) -> tuple[int, int]:
        """The world and nodes the run was launched with (training/faults.launched)."""
        launch = self.backend.launch
        continued = faults.job_restarts(launch.restart_count) > 0 or self.attempts > 1
        return faults.launched(self.events.read(), launch.world_size, launch.nodes, continued)

    def fault_costs(self) -> dict | None:
        """The record's `fault` (training/faults.py), from the events this run kept (none without --checkpoint-dir)."""
        samples, kept = self.step * self.cfg.batch_size, self.events.path is not None
        costs = faults.costs(self.cfg.fault, self.events.read(), time.time(), samples, kept)
        if costs is not None:
            costs["world_size_after"] = self.backend.world_size  # fewer where the job continued without a node
            costs["nodes_after"] = self.backend.launch.nodes
        return costs

    def compute_counts(self) -> dict:
        """The model's FLOPs over the first micro-batch, its samples and tokens (training/flops.py; none trained: a run
        resumed at its end), and how they were counted: by the main process, which writes the record."""
        micro = self.first_micro_batch
        if hasattr(self.task, "emulation"):
            return {"micro_batch_flops": None, "flops_counted": "not counted: an emulated run computes nothing"}
        if micro is None or not self.backend.is_main:
            return {"micro_batch_flops": None, "flops_counted": "not counted: no step trained"}
        total, how = flops.count_flops(self.task, micro)
        samples = self.cfg.batch_size // (self.backend.world_size * self.cfg.accumulate)
        return {
            "micro_batch_flops": total,
            "micro_batch_samples": samples,
            "micro_batch_tokens": flops.tokens_in(micro),
            "flops_counted": how,
        }

    def shows(self, step: int) -> bool:
        """Whether the progress bar shows this step's loss: the global mean, as the record keeps it, a collective.
        The same answer on every rank (the options, never is_main): every rank must join that all-reduce, though only
        the main process has a bar. Only every log_every steps, and not at all without a bar (a sweep's runs)."""
        return self.cfg.progress and (step % self.cfg.log_every == 0 or step == self.parts.total_steps)

    def train_step(self, batch, timer: StepTimer) -> torch.Tensor:
        """One optimizer step over this rank's share of a global batch, in --accumulate micro-batches; returns
        the mean of their losses."""
        parts, backend = self.parts, self.backend
        micro = micro_batches(move_to(batch, backend.device), self.cfg.accumulate)
        if self.first_micro_batch is None:
            self.first_micro_batch = micro[0]
        timer.count_tokens(sum(flops.tokens_in(mb) or 0 for mb in micro))  # from shapes: no wait for the device
        timer.mark(DATA)
        parts.optimizer.zero_grad()  # set_to_none by default; Horovod's wrapper takes no arguments
        losses, started = [], self.injector.clock()
        for i, mb in enumerate(micro):
            with backend.accumulation(parts.model, sync=i == len(micro) - 1):
                with backend.autocast():
                    loss = self.task.step(parts.model, mb)
                backend.backward(loss)
            losses.append(loss.detach())
        loss = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
        self.injector.computed(self.injector.clock() - started)  # --fault slow: a straggler's longer computation
        timer.mark(FORWARD_BACKWARD)
        backend.optimizer_step(parts.model, parts.optimizer, self.cfg.clip_norm)
        if parts.scheduler is not None:
            parts.scheduler.step()
        timer.mark(OPTIMIZER)
        return loss.detach().float()

    def train_epoch(self, epoch: int, start_step: int, timer: StepTimer) -> None:
        parts, backend = self.parts, self.backend
        backend.set_epoch(epoch, max(0, start_step - epoch * parts.steps_per_epoch))
        batches = iter(parts.train_loader)
        while self.step < parts.total_steps:
            timer.start_step()  # before the batch is fetched: loading and collating count as the data phase
            batch = next(batches, None)
            if batch is None:
                break
            loss = self.train_step(batch, timer)
            self.losses.append(loss)
            self.step += 1
            timer.end_step()
            if self.shows(self.step):
                with timer.excluded():  # the bar's own exchange: not the training's (a sweep's runs show no bar)
                    self.reporter.update(self.step, backend.all_reduce(loss, ReduceOp.AVG))  # as the record keeps it
            self.watchdog.beat()
            if self.checkpointer.due(self.step):
                with self.watchdog.held():
                    self.checkpointer.save(self.step, self.loss_history())
            if self.step % self.commit_every == 0:
                backend.commit()  # Horovod Elastic's rollback point (nothing under the other libraries)
            self.injector.stepped(self.step)  # --fault kill, hang: after this step's checkpoint and commit

    def evaluate(self, epoch: int, timer: StepTimer) -> dict:
        with timer.excluded() as span, self.watchdog.held():
            ev = evaluate(self.task, self.backend.unwrap(self.parts.model), self.parts.test_loader, self.backend)
        ev.update(epoch=epoch + 1, step=self.step, eval_s=span.seconds)
        target = self.cfg.target_accuracy
        if self.time_to_target_s is None and target is not None and ev["accuracy"] >= target:
            self.time_to_target_s = span.trained_s
        return ev

    def train(self) -> tuple[StepTimer, list[dict]]:
        """Train to the last step, evaluating after each epoch where asked and always at the end; the backend runs
        the loop (again after a rollback, where its library continues in the processes that survive a failure)."""
        return self.backend.run_training(self.train_from_step, self.parts.model, self.parts.optimizer, self)

    def train_from_step(self) -> tuple[StepTimer, list[dict]]:
        """The loop from this trainer's step: the step timer and evaluations of this attempt."""
        parts, cfg = self.parts, self.cfg
        start_step = self.step
        n_epochs = math.ceil(parts.total_steps / parts.steps_per_epoch)
        warmup = warmup_steps(parts.total_steps - start_step)
        timer = StepTimer(self.backend.barrier, warmup, device_clock(self.backend.device))
        evals: list[dict] = []
        parts.model.train()
        self.reporter.start(
            parts.total_steps, f"{self.task.name}/{self.backend.name} x{self.backend.world_size}", initial=start_step
        )
        self.injector.started(start_step, self.backend.world_size, self.backend.launch.nodes)
        timer.begin()
        for epoch in range(start_step // parts.steps_per_epoch, n_epochs):
            self.train_epoch(epoch, start_step, timer)
            if epoch < n_epochs - 1 and cfg.target_accuracy is not None:
                evals.append(self.evaluate(epoch, timer))
        timer.finish()
        self.memory = memory.per_rank(parts.model, parts.optimizer, self.backend)  # the gradients of the last step
        self.reporter.close()
        evals.append(self.evaluate(max(0, n_epochs - 1), timer))  # at the end: also a run resumed at its end
        self.watchdog.stop()  # training is over: the record's collectives have their library's timeout
        return timer, evals


def place(
    backend: Backend, threads: int, pin_cores: bool, node_cores: tuple[int, ...] | None
) -> tuple[list[int] | None, bool]:
    """The cores this process computes on, set after the backend's setup so that the communication threads the
    library started there are placed too: a simulated node's share, and within it (several processes per node,
    CPU) this process's own block. None: not pinned. And whether the process has its cores to itself (alone on its
    machine or node, or pinned to a block of its own), not shared with the other ranks of its machine."""
    cores, alone = None, backend.launch.local_world_size == 1
    if node_cores is not None:
        topology.confine(backend.launch)  # again: onto the node's cores, the library's threads with the rest
        cores = list(node_cores)
    if pin_cores and backend.device.type == "cpu":
        block = affinity.pin_process(backend.local_rank, backend.launch.local_world_size, threads)
        if block is not None:
            cores, alone = block, True
    return cores, alone


def busy_machine(backend: Backend, threads: int, cores: list[int] | None, alone: bool) -> int | None:
    """As training starts, the most threads of one process that find no core of theirs free of other processes'
    computing threads (affinity.shortfall): more than 0, and the run is slower than on an idle machine, or than with
    fewer threads. The worst rank's (a collective, called by every rank), or this rank's own where a process may join
    the job under way (Backend.joins_under_way). A rank that shares its cores with the
    other ranks of its machine cannot tell their threads from a neighbour's, and counts 0; None: a GPU run, whose
    computation is not on the cores."""
    if backend.device.type != "cpu":
        return None
    short = affinity.shortfall(cores or affinity.current_cores(), threads) if alone else 0
    if backend.joins_under_way:  # this rank's own: a collective here would wait for ranks that train meanwhile
        return short
    return int(backend.all_reduce(torch.tensor([float(short)]), ReduceOp.MAX).item())


def busy_warning(short: int | None, threads: int) -> str | None:
    if not short:
        return None
    return (
        f"warning: the machine is busy: other processes compute on the cores of this run, and {short} of the "
        f"{threads} thread(s) of a process find no core free of them; it will run slower than on an idle machine "
        "(fewer --threads may be faster)"
    )


def emulated(task: Task, cfg: RunConfig, launch_env: process.LaunchEnv) -> Task:
    """The task, or with --emulate its computation replaced by the profile's waits (emulation/emulator.py), checked
    against the run before any process group starts."""
    if cfg.emulate is None:
        return task
    from distbench.tasks import emulated as emulator

    micro = cfg.batch_size // (launch_env.world_size * cfg.accumulate)
    return emulator.emulate(task, cfg.emulate, micro, cfg.precision, launch_env.rank, cfg.seed, cfg.dilation)


def run(cfg: RunConfig) -> dict:
    """Check, set up the backend, train, write the record on the main process, tear down."""
    clock = StartupClock()
    launch_env = process.current()  # before the backend's setup, which may write launch variables
    spec = get_spec(cfg.backend)
    check_launch(cfg.backend, launch_env)
    node_cores = topology.confine(launch_env)  # a simulated node: its share of the cores, before any thread starts
    cfg = with_defaults(cfg)
    validate(cfg, launch_env.world_size)
    faults.check_here(cfg.fault, launch_env, faults.Events(cfg.checkpoint_dir), launch_env.restart_count)
    spec.check_options(cfg)
    check_output_writable(cfg.output, launch_env.is_main)
    threads = cfg.threads or default_threads(launch_env.local_world_size)
    cfg = replace(cfg, threads=threads)
    torch.set_num_threads(threads)
    task = emulated(build_task(cfg), cfg, launch_env)
    backend_class = spec.load()
    resume = None
    if cfg.checkpoint_dir is not None and checkpoint.path_in(cfg.checkpoint_dir).is_file():
        # checked before any process group starts: a bad checkpoint is one line, exit 2
        path, own = checkpoint.path_in(cfg.checkpoint_dir), backend_class.own_checkpoint
        resume = checkpoint.load(path, cfg.to_dict(), launch_env.world_size, own)
    clock.mark("imports")
    facts = Facts(clock, started_at=datetime.now(UTC).isoformat(timespec="seconds"))
    backend = backend_class(
        launch_env,
        precision=cfg.precision,
        timeout_s=cfg.timeout_s,
        accumulate=cfg.accumulate,
        grad_compression=cfg.grad_compression,
        zero_stage=cfg.zero_stage,
        max_grad_norm=cfg.clip_norm,
        loader_workers=cfg.loader_workers,
        resumes_from=resume.world_size if resume is not None else None,
    )
    backend.setup()
    clock.mark("process_group")
    torch.set_num_threads(threads)  # again: some libraries (Accelerate on CPU) reset it during setup
    facts.cores, alone = place(backend, threads, cfg.pin_cores, node_cores)
    # No teardown when training fails: destroying a process group whose peer died can block, and a
    # blocked worker keeps torchrun from restarting the group. Process exit releases everything.
    reporter = Reporter(backend.is_main, cfg.progress)
    trainer = Trainer(task, backend, cfg, reporter, clock)
    if resume is not None:
        trainer.restore(resume)
    # said as training starts, after every check that can refuse the run (their error is then its one line)
    facts.short_threads = busy_machine(backend, threads, facts.cores, alone)
    if (busy := busy_warning(facts.short_threads, threads)) is not None:
        reporter.info(busy)
    try:
        timer, evals = trainer.train()
    except Exception as e:  # a collective failed: a peer is gone or silent (--fault: when this rank knew)
        trainer.injector.noticed(e)
        raise
    record = build_record(trainer.result(), facts, timer, evals)
    reporter.write_record(record, cfg.output)
    reporter.summary(record, cfg.output)
    backend.teardown()
    return record
