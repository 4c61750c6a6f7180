"""`run.py profile`: a task's step taken apart by module, on the device it runs on, for an emulator to replay.

For every module that owns parameters (its own, not its children's), in the order its forward first runs: when its
forward starts and how long it lasts, when its backward starts (the gradient of its output is there: a hook on the
output tensor, which an in-place operation after the module leaves where it was, where a module's full backward
hook would refuse it) and when it ends (the last of its own parameters' gradients accumulated: post-accumulate-grad
hooks, the moment a data-parallel library may send them), each step; and the optimizer's step, per parameter byte.
Marks are taken on the device's clock (training/timer.device_clock: CUDA events on a GPU, read once per step after it
ends; the host's clock on a CPU, where a call's work is done when it returns).

The hooks cost host time: little beside a CPU's computation, but a GPU's small kernels can be bound by how fast the
host queues them, and there the hooks lengthened a ResNet-18 step (micro-batch 32, 64x64, an H200) from 9.7 to
19.9 ms. So steps with the hooks and steps without them alternate: the step's forward, backward and optimizer are
the hook-free steps', the modules' the hooked steps', and `hooked` says what the hooks did to the step (an emulator
scales the modules' times by `module_scale` to replay the hook-free step).

The step is the run's own (training/loop.build with the single backend: the task's model, optimizer, loader and
precision, at --batch-size as the micro-batch); the profile is one JSON object (`KIND`), with the device, batch,
precision and the command that measured it. A module's times include those of any module inside it that owns
parameters too (`inside` names it), as the hooks see them.
"""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import torch
from torch import nn

from distbench.config import RunConfig
from distbench.errors import UserError
from distbench.tasks.emulated import KIND, VERSION, owners
from distbench.training.timer import percentile

SERIES = ("forward_start", "forward", "backward_start", "backward")  # each owner's, per step


def inside(names: list[str]) -> dict[str, str | None]:
    """For each owner, the closest other owner whose module holds it (None: none does)."""
    found = {}
    for name in names:
        outer = [o for o in names if o != name and (o == "(root)" or name.startswith(o + "."))]
        found[name] = max(outer, key=lambda o: -1 if o == "(root)" else o.count(".")) if outer else None
    return found


def tensors_in(output) -> list[torch.Tensor]:
    """The tensors of a module's output: itself, or those in its tuples, lists and mappings (a model output)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in tensors_in(o)]
    if isinstance(output, Mapping):
        return [t for o in output.values() for t in tensors_in(o)]
    return []


@dataclass
class StepMarks:
    """One step's marks (the clock's): the step's four, and per owner its forward's start and end, its backward's
    start and the last of its gradients' accumulation (a module called twice: its first start, its last end)."""

    start: object = None
    forward_end: object = None
    backward_end: object = None
    optimizer_end: object = None
    forward: dict[int, list] = field(default_factory=dict)  # owner: [start, end]
    backward: dict[int, list] = field(default_factory=dict)  # owner: [start, end]


class ModuleHooks:
    """Hooks that mark each owner's forward and backward on `clock`, into the step under way (`marks`)."""

    def __init__(self, model: nn.Module, clock):
        self.clock, self.named = clock, owners(model)
        self.marks = StepMarks()
        self.order: list[int] = []  # owners by their forward's first start
        self._handles = []
        self.attach()

    def attach(self) -> None:
        """The hooks on every owner (a step without them: `remove`, then `attach` again)."""
        for i, (_, module) in enumerate(self.named):
            self._handles.append(module.register_forward_pre_hook(self._forward_start(i)))
            self._handles.append(module.register_forward_hook(self._forward_end(i)))
            for p in module.parameters(recurse=False):
                if p.requires_grad:
                    self._handles.append(p.register_post_accumulate_grad_hook(self._grad_ready(i)))

    def _forward_start(self, i: int):
        def hook(_module, _args):
            if i not in self.order:
                self.order.append(i)
            self.marks.forward.setdefault(i, [self.clock.mark(), None])

        return hook

    def _forward_end(self, i: int):
        def hook(_module, _args, output):
            self.marks.forward[i][1] = self.clock.mark()
            for t in tensors_in(output):
                if t.requires_grad:
                    t.register_hook(self._backward_start(i))

        return hook

    def _backward_start(self, i: int):
        def hook(_grad):
            marks = self.marks.backward.setdefault(i, [None, None])
            if marks[0] is None:
                marks[0] = self.clock.mark()

        return hook

    def _grad_ready(self, i: int):
        def hook(_param):
            self.marks.backward.setdefault(i, [None, None])[1] = self.clock.mark()

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


@dataclass
class Measured:
    """Per step, s: forward, backward and the optimizer's step; per owner, its forward's start (from the step's) and
    length, its backward's start (from backward's) and length."""

    forward: list[float] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)
    optimizer: list[float] = field(default_factory=list)
    modules: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    hooked: Measured | None = None  # the hooked steps' own three parts, where steps without hooks were measured too

    def add(self, marks: StepMarks, clock) -> None:
        """A step's marks: a hook-free step's three parts (`hooked` takes a hooked step's), each owner's."""
        clock.wait(marks.optimizer_end)
        s = lambda a, b: clock.ms(a, b) / 1e3  # noqa: E731
        parts = self.hooked if self.hooked is not None and marks.forward else self
        parts.forward.append(s(marks.start, marks.forward_end))
        parts.backward.append(s(marks.forward_end, marks.backward_end))
        parts.optimizer.append(s(marks.backward_end, marks.optimizer_end))
        for i, (f0, f1) in marks.forward.items():
            got = self.modules.setdefault(i, {k: [] for k in SERIES})
            got["forward_start"].append(s(marks.start, f0))
            got["forward"].append(s(f0, f1))
            b0, b1 = marks.backward.get(i, [None, None])
            if b0 is not None and b1 is not None:
                got["backward_start"].append(s(marks.forward_end, b0))
                got["backward"].append(s(b0, b1))


def nbytes(params) -> int:
    """The bytes of these parameters, as they are held."""
    return sum(p.numel() * p.element_size() for p in params)


def spread(values: list[float]) -> dict:
    """A per-step series as the profile gives it: its median, 10th and 90th percentiles, and every value."""
    if not values:
        return {"median_s": None, "p10_s": None, "p90_s": None, "steps_s": []}
    return {
        "median_s": statistics.median(values),
        "p10_s": percentile(values, 0.1),
        "p90_s": percentile(values, 0.9),
        "steps_s": values,
    }


def measure(cfg: RunConfig, steps: int, warmup: int) -> tuple[dict, list[dict]]:
    """Run the task's step warmup + steps times under the single backend with the hooks on; returns what the
    profile says of the run (device, batch, precision) and per owner its entry, in forward order."""
    from distbench import process
    from distbench.backends import get_spec
    from distbench.data.arrays import move_to
    from distbench.tasks import build_task, shard_unit_names
    from distbench.training.loop import build
    from distbench.training.reporter import Reporter
    from distbench.training.timer import StartupClock, device_clock

    torch.set_num_threads(cfg.threads)
    task = build_task(cfg)
    backend = get_spec("single").load()(process.current(), precision=cfg.precision)
    backend.setup()
    parts = build(task, backend, cfg, Reporter(False, False), StartupClock())
    clock = device_clock(backend.device)
    model, optimizer = parts.model, parts.optimizer
    hooks, measured = ModuleHooks(model, clock), Measured(hooked=Measured())
    if not hooks.named:
        raise UserError(f"the task's model ({type(model).__name__}) has no parameter that trains: nothing to profile")
    batches = iter(parts.train_loader)
    for step in range(2 * (warmup + steps)):  # hooked and hook-free steps in turn (module docstring)
        hooks.remove()
        if step % 2 == 0:
            hooks.attach()
        batch = next(batches, None)
        if batch is None:  # an epoch ended: the next one, as training goes on
            batches = iter(parts.train_loader)
            batch = next(batches)
        batch = move_to(batch, backend.device)
        hooks.marks = marks = StepMarks(start=clock.mark())
        with backend.autocast():
            loss = task.step(model, batch)
        marks.forward_end = clock.mark()
        backend.backward(loss)
        marks.backward_end = clock.mark()
        backend.optimizer_step(model, optimizer, cfg.clip_norm)
        marks.optimizer_end = clock.mark()
        optimizer.zero_grad()
        if step >= 2 * warmup:
            measured.add(marks, clock)
    hooks.remove()
    facts = {**_run_facts(cfg, backend, parts, clock, measured), "shard_units": shard_unit_names(task, model)}
    return facts, _modules(hooks, measured)


def _run_facts(cfg: RunConfig, backend, parts, clock, measured: Measured) -> dict:
    device = backend.device
    param_bytes = nbytes(p for p in parts.model.parameters() if p.requires_grad)
    optimizer = spread(measured.optimizer)
    return {
        "task": cfg.task,
        "model": parts.dataset_info.get("model"),
        "micro_batch": cfg.batch_size,
        "precision": cfg.precision,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "platform": platform.platform(),
        "clock": clock.name,
        "threads": cfg.threads,
        "torch": torch.__version__,
        "steps": len(measured.forward),
        "param_bytes": param_bytes,
        "forward": spread(measured.forward),
        "backward": spread(measured.backward),
        "optimizer": optimizer,
        "optimizer_s_per_param_byte": optimizer["median_s"] / param_bytes,
        **hook_cost(measured),
    }


def hook_cost(measured: Measured) -> dict:
    """The hooked steps' forward and backward, and the factor that takes the modules' times (measured with the
    hooks) to the hook-free step's: the hook-free median over the hooked one."""
    with_hooks = {"forward": spread(measured.hooked.forward), "backward": spread(measured.hooked.backward)}
    scale = {
        part: statistics.median(getattr(measured, part)) / with_hooks[part]["median_s"]
        for part in ("forward", "backward")
    }
    return {"hooked": with_hooks, "module_scale": scale}


def cpu_name() -> str | None:
    """The processor's model name, as /proc/cpuinfo gives it (None where it does not)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


def _modules(hooks: ModuleHooks, measured: Measured) -> list[dict]:
    names = [n for n, _ in hooks.named]
    holders = inside(names)
    out = []
    for i in hooks.order:
        name, module = hooks.named[i]
        got = measured.modules.get(i, {})
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        out.append(
            {
                "name": name,
                "type": type(module).__name__,
                "param_bytes": nbytes(own),
                "grad_bytes": nbytes(own),  # what a library exchanges: each gradient has its parameter's dtype
                "inside": holders[name],
                **{k: spread(got.get(k, [])) for k in SERIES},
            }
        )
    return out


def profile(cfg: RunConfig, steps: int, warmup: int, output: Path) -> dict:
    """The command: check, measure, write the profile (atomically) and return it."""
    from distbench import process
    from distbench.config import check_output_writable, validate
    from distbench.machine import default_threads
    from distbench.records import write_json
    from distbench.tasks import with_defaults

    world = process.current().world_size
    if world != 1:
        raise UserError(f"profile runs in one process (it was started as {world}): run it with python")
    if steps < 1 or warmup < 0:
        raise UserError(f"--steps must be at least 1 and --warmup at least 0, got {steps} and {warmup}")
    if output.suffix != ".json":
        raise UserError(f"--output: a .json file for the profile, got {output}")
    if output.exists() and not cfg.force:
        raise UserError(f"--output {output} exists; pass --force to overwrite it")
    cfg = with_defaults(replace(cfg, output=output, max_steps=warmup + steps))
    cfg = replace(cfg, threads=cfg.threads or default_threads(1))
    validate(cfg, 1)
    check_output_writable(output, True)
    run, modules = measure(cfg, steps, warmup)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    result = {"kind": KIND, "version": VERSION, "created": created, "command": _command(), **run, "modules": modules}
    write_json(output, result)
    return result


def _command() -> str:
    import shlex

    return " ".join(["python", *map(shlex.quote, ["run.py", *sys.argv[1:]])])


def table(result: dict) -> str:
    """The profile as a terminal reads it: per owner, its gradient bytes and median forward and backward, ms."""
    ms = lambda d: "—" if d["median_s"] is None else f"{d['median_s'] * 1e3:.3f}"  # noqa: E731
    width = min(60, max(len("module"), *(len(m["name"]) for m in result["modules"])))
    rows = [f"{'module':<{width}} {'type':<16} {'grad KB':>9} {'fwd ms':>8} {'bwd ms':>8}"]
    for m in result["modules"]:
        name = m["name"] if len(m["name"]) <= width else "..." + m["name"][3 - width :]
        kind, kb = m["type"][:16], m["grad_bytes"] / 1e3
        rows.append(f"{name:<{width}} {kind:<16} {kb:>9.1f} {ms(m['forward']):>8} {ms(m['backward']):>8}")
    rows.append(
        f"step (median of {result['steps']}, {result['device']}, {result['clock']} clock, micro-batch "
        f"{result['micro_batch']}, {result['precision']}): forward {ms(result['forward'])} ms, backward "
        f"{ms(result['backward'])} ms, optimizer {ms(result['optimizer'])} ms "
        f"({result['optimizer_s_per_param_byte'] * 1e9:.3f} ns per parameter byte)"
    )
    return "\n".join(rows)
