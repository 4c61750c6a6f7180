"""`--emulate PROFILE`: the task's real model, its computation replaced by waits of a measured profile's times.

What a rank of an emulated run does (docs/emulation.md): the model is the task's own, its parameters of their real
shapes and dtypes on the CPU, wrapped, sharded and exchanged by the backend's library exactly as in a real run. Only
the computation is replaced. Every module on the way from the root to a module that owns parameters gets a forward
that calls, in the profile's forward order, those of its children that lead to an owner, and, for an owner, one
node of a chain (`_Wait`): its forward sleeps for the owner's share of the profiled forward, its backward for the
time until the owner's gradients were ready in the profile, then hands every parameter of the owner a gradient of
its shape (zeros: the values are not what is measured). So gradients become ready in the profiled order and at the
profiled moments, a library's hooks (DDP's reducer, Horovod's, FSDP2's and DeepSpeed's per module) fire when they
would on the profiled device, and the CPU stays free for the library's communication, as a GPU node's host is.

The step's times are the profile's hook-free medians (its modules' times, measured with hooks on, scaled by
`module_scale`), each step multiplied by a factor drawn from the profile's own steps (seeded by the rank: every rank
draws its own, so the slowest of W ranks is as late as the profile's spread makes it), and by `dilation`. The
optimizer's step sleeps for the profile's time per parameter byte times the bytes this rank's optimizer updates
(a shard under FSDP2 and ZeRO: sharding's saving shows). Data are indices (the real sets' lengths, nothing loaded
per step); evaluation computes nothing and the run reports no accuracy.
"""

from __future__ import annotations

import ctypes
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from distbench.errors import UserError
from distbench.tasks import shard_units

KIND = "distbench-module-profile"  # what `run.py profile` writes (emulation/profile.py)
VERSION = 1
# An emulated run is valid while its processes leave the host room: beyond this share of their cores' time in the
# timed window (the libraries' host work: Python, gloo's copies and reductions, the sockets), the host, not the
# emulated links and devices, set the pace, as it would not on a GPU node with cores to spare. The share is a mean
# and the host's work comes in bursts (every rank exchanges at once): the dilation validation (docs/emulation.md)
# found the same cluster 1.5 % apart at dilations 1 and 4 where the share was 10 %, 20 % apart at 23 %, 21 % at 46 %
# and 80 % at 61 %.
HOST_BUSY_LIMIT = 0.15


def host_bound_said(emulated: dict | None, spins: str = "") -> str | None:
    """What a record says of an emulated run whose host was the bottleneck (None: it was not, or not emulated);
    `spins`: how its library's waiting ranks keep their cores busy, where they do (the registry's): then why."""
    if not emulated or not emulated.get("host_bound"):
        return None
    return (
        f"invalid emulation: the run's processes kept {emulated['host_busy_share']:.0%} of their cores busy in the "
        f"timed window (more than {HOST_BUSY_LIMIT:.0%}): the host set the pace, not the emulated cluster; "
        f"{spins or 'run fewer nodes per core or a larger --dilation'}"
    )


def owners(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules that own parameters of their own that train, by name, in registration order: what a profile
    times and an emulated run replays."""
    return [
        (name or "(root)", m)
        for name, m in model.named_modules()
        if any(p.requires_grad for p in m.parameters(recurse=False))
    ]


def read_profile(path: Path, flag: str = "--emulate") -> dict:
    """A profile written by `run.py profile` (given as `flag`); anything else is one line."""
    try:
        profile = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{flag} {path} does not exist") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{flag} {path} is not a readable JSON profile: {e}") from e
    if not isinstance(profile, dict) or profile.get("kind") != KIND:
        raise UserError(f"{flag} {path} is not a profile written by `run.py profile` (kind {KIND!r})")
    if profile.get("version") != VERSION:
        raise UserError(f"{flag} {path} is a version {profile.get('version')} profile; this distbench reads {VERSION}")
    if not profile.get("modules"):
        raise UserError(f"{flag} {path} lists no module")
    return profile


def check_profile(path: Path, micro_batch: int, precision: str) -> dict:
    """The profile at `path`, if a run of this micro-batch and precision can replay it; else one line (asked by the
    run before its process group starts, and by a sweep of every configuration before its first launch)."""
    profile = read_profile(path)
    if profile.get("micro_batch") != micro_batch:
        raise UserError(
            f"--emulate {path} was profiled at micro-batch {profile.get('micro_batch')}, this run's is {micro_batch} "
            "(--batch-size over the processes and --accumulate): profile the task at the run's micro-batch"
        )
    if profile.get("precision") != precision:
        raise UserError(
            f"--emulate {path} was profiled at {profile.get('precision')}, this run is {precision}: give "
            f"--precision {profile.get('precision')}"
        )
    return profile


@dataclass(frozen=True)
class Schedule:
    """Waits of one step at factor 1, s: forward per chain node (the head, each owner in forward order, the tail),
    backward per chain node in the same order (each runs in reverse), and the optimizer's per parameter byte."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    optimizer_s_per_byte: float
    factors: tuple[tuple[float, float], ...]  # the profile's steps: (forward, backward) over their medians

    @property
    def step_s(self) -> float:
        """Forward and backward of one step at factor 1, s (the optimizer's depends on the bytes a rank updates)."""
        return sum(self.forward) + sum(self.backward)


def _median(series: dict) -> float:
    value = series.get("median_s")
    return float(value) if value is not None else 0.0


def schedule(profile: dict) -> Schedule:
    """The chain's waits from the profile: forward, each owner from its start to the next owner's start (the last
    to its end; the head before the first, the tail after the last), summing to the hook-free forward; backward,
    each owner until its gradients were ready, in the order backward reaches them (the tail before the first owner's
    backward starts, the head after the last owner's gradients), summing to the hook-free backward where the
    profile's ready times lie within it."""
    scale_f, scale_b = profile["module_scale"]["forward"], profile["module_scale"]["backward"]
    forward_s, backward_s = _median(profile["forward"]), _median(profile["backward"])
    mods = profile["modules"]
    starts = [_median(m["forward_start"]) * scale_f for m in mods]
    ends = [s + _median(m["forward"]) * scale_f for s, m in zip(starts, mods, strict=True)]
    n = len(mods)
    forward = [
        starts[0],  # the head: before the first owner
        *(max(0.0, starts[i + 1] - starts[i]) for i in range(n - 1)),  # each owner until the next starts
        ends[-1] - starts[-1],  # the last owner, its own length
        max(0.0, forward_s - ends[-1]),  # the tail: after it (the loss)
    ]
    ready = [(_median(m["backward_start"]) + _median(m["backward"])) * scale_b for m in mods]
    first_start = _median(mods[-1]["backward_start"]) * scale_b
    backward, clock = [0.0] * (n + 2), 0.0
    backward[-1], clock = first_start, first_start  # the tail's node runs first in backward
    for i in reversed(range(len(mods))):
        end = max(clock, ready[i])
        backward[i + 1], clock = end - clock, end
    backward[0] = max(0.0, backward_s - clock)
    factors = tuple(
        (f / forward_s if forward_s else 1.0, b / backward_s if backward_s else 1.0)
        for f, b in zip(profile["forward"]["steps_s"], profile["backward"]["steps_s"], strict=False)
    )
    return Schedule(tuple(forward), tuple(backward), profile["optimizer_s_per_param_byte"], factors)


@dataclass
class Clock:
    """One rank's waits: each step's factors drawn (seeded by the rank) at the head's forward, times the dilation."""

    schedule: Schedule
    rank: int
    seed: int
    dilation: float = 1.0
    factor: tuple[float, float] = (1.0, 1.0)
    _rng: random.Random = field(init=False)
    _late: float = 0.0  # s that the sleeps so far overran

    def __post_init__(self):
        self._rng = random.Random(f"{self.seed}:{self.rank}")
        _fine_timer_slack()

    def new_step(self) -> None:
        if self.schedule.factors:
            self.factor = self._rng.choice(self.schedule.factors)

    def forward(self, node: int) -> None:
        self._wait(self.schedule.forward[node] * self.factor[0])

    def backward(self, node: int) -> None:
        self._wait(self.schedule.backward[node] * self.factor[1])

    def optimizer(self, nbytes: int) -> None:
        self._wait(self.schedule.optimizer_s_per_byte * nbytes)

    @property
    def overrun_s(self) -> float:
        """What the sleeps so far overran (s): the next wait is that much shorter."""
        return self._late

    def _wait(self, seconds: float) -> None:
        """Sleep `seconds` x the dilation, less what earlier sleeps overran (a sleep wakes late by the kernel's
        timer slack and the scheduler's delay, about 0.1 ms: over dozens of modules a step would run slow); the
        time between sleeps, the library's, is never taken from a wait."""
        want = seconds * self.dilation - self._late
        if want <= 0:
            self._late = -want
            return
        start = time.perf_counter()
        time.sleep(want)
        self._late = time.perf_counter() - start - want


def _fine_timer_slack() -> None:
    """Linux: this thread's timer slack from 50 us to 1 ns (prctl PR_SET_TIMERSLACK), so that a sleep wakes within
    about 30 us of its end rather than 80 (measured here); elsewhere nothing changes."""
    try:
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Wait(torch.autograd.Function):
    """One node of the chain: forward waits and passes the chain on; backward waits, then gives each of the owner's
    parameters a gradient of its shape (as it was in forward: a library may have released it since)."""

    @staticmethod
    def forward(ctx, chain, clock: Clock, node: int, *params):
        ctx.clock, ctx.node = clock, node
        ctx.meta = [(p.shape, p.dtype, p.device) for p in params]
        clock.forward(node)
        return chain.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.backward(ctx.node)
        grads = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.meta]
        return (grad, None, None, *grads)


def _own_params(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters(recurse=False) if p.requires_grad]


def install(model: nn.Module, profile: dict, clock: Clock) -> None:
    """Replace the forward of every module on the way to an owner (module docstring); the profile's owners must be
    the model's, by name and bytes, else one line."""
    named = dict(owners(model))
    listed = [m["name"] for m in profile["modules"]]
    if sorted(listed) != sorted(named):
        extra, missing = sorted(set(listed) - set(named)), sorted(set(named) - set(listed))
        raise UserError(
            f"--emulate: the profile's modules are not this model's (in the profile only: {extra[:3] or 'none'}; "
            f"in the model only: {missing[:3] or 'none'}): profile the task's model with `run.py profile`"
        )
    for m in profile["modules"]:
        held = sum(p.numel() * p.element_size() for p in _own_params(named[m["name"]]))
        if held != m["param_bytes"]:
            raise UserError(
                f"--emulate: module {m['name']} holds {held} bytes of parameters, the profile's {m['param_bytes']}: "
                "profile the task's model at its precision"
            )
    node = {name: i + 1 for i, name in enumerate(listed)}  # 0: the head; len + 1: the tail
    order = {name: i for i, name in enumerate(listed)}
    root_name = "(root)"
    modules = {root_name: model, **{n: m for n, m in model.named_modules() if n}}
    children = _paths(listed, order)
    for name, module in modules.items():
        if name == root_name or name in children:
            _replace_forward(module, name, children.get(name, []), modules, node, clock, root=name == root_name)


def _paths(owner_names: list[str], order: dict[str, int]) -> dict[str, list[str]]:
    """For each module on the way to an owner, its children on the way, by their first owner's forward order."""
    first: dict[str, int] = {}
    kids: dict[str, set[str]] = {}
    for owner in owner_names:
        if owner == "(root)":
            continue
        parts = owner.split(".")
        for depth in range(1, len(parts) + 1):
            name, parent = ".".join(parts[:depth]), ".".join(parts[: depth - 1]) or "(root)"
            first[name] = min(first.get(name, math.inf), order[owner])
            kids.setdefault(parent, set()).add(name)
            kids.setdefault(name, set())
    return {parent: sorted(names, key=first.__getitem__) for parent, names in kids.items()}


def _replace_forward(module, name, kids, modules, node, clock, *, root: bool) -> None:
    own = node.get(name)

    def forward(*args, **kwargs):
        x = args[0] if not root else torch.zeros((), requires_grad=True)
        if root:
            clock.new_step()
            x = _Wait.apply(x, clock, 0)
        if own is not None:
            # the parameters the module holds now, not those it held when this was installed: FSDP2 replaces them
            # with its sharded ones and, during forward, its unsharded ones, whose gradients it reduce-scatters
            x = _Wait.apply(x, clock, own, *_own_params(module))
        for kid in kids:
            x = modules[kid](x)
        if root:
            x = _Wait.apply(x, clock, len(node) + 1)
        return x

    module.forward = forward


def emulated_optimizer(optimizer: torch.optim.Optimizer, clock: Clock) -> torch.optim.Optimizer:
    """The task's optimizer as a subclass of its own class (a library that checks or rebuilds the optimizer's class,
    Horovod's DistributedOptimizer, keeps it) whose step, after a first real one (the state it makes is memory a
    rank holds), sleeps for the bytes this rank's parameter groups hold now: a DTensor's local shard, DeepSpeed's
    fp32 partition."""

    def step(self, closure=None):
        if not getattr(self, "_emulating", False):  # the first step is the real one: it makes the optimizer's state,
            self._emulating = True  # which each rank holds (its memory); the gradients are zeros
            return base.step(self, closure)
        nbytes = sum(_local_bytes(p) for group in self.param_groups for p in group["params"])
        clock.optimizer(nbytes)
        return None

    base = type(optimizer)
    optimizer.__class__ = type(f"Emulated{base.__name__}", (base,), {"step": step})
    return optimizer


def _local_bytes(p: torch.Tensor) -> int:
    local = p.to_local() if hasattr(p, "to_local") else p
    return local.numel() * local.element_size()


class Indices(Dataset):
    """A set of the real one's length whose samples are their indices: nothing loaded or drawn per step."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


class EmulatedTask:
    """A task whose model's computation is the profile's waits (module docstring); the real task builds the model
    (its shapes), its optimizer (its class) and tells the sets' lengths."""

    accuracy_meaningful = False

    def __init__(self, task, profile: dict, path: Path, clock: Clock):
        self.task, self.profile, self.path, self.clock = task, profile, path, clock
        self.name = task.name

    def build_model(self) -> nn.Module:
        model = self.task.build_model()
        install(model, self.profile, self.clock)
        return model

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return emulated_optimizer(self.task.build_optimizer(model), self.clock)

    def build_scheduler(self, optimizer, total_steps: int, steps_per_epoch: int):
        build = getattr(self.task, "build_scheduler", None)
        return build(optimizer, total_steps, steps_per_epoch) if build else None

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return shard_units(self.task, model)

    def datasets(self):
        out = self.task.datasets()
        train, test, info = out if len(out) == 3 else (*out, {})
        return Indices(len(train)), Indices(len(test)), {**info, "emulated": True}

    collate = staticmethod(torch.stack)

    def step(self, model: nn.Module, batch) -> torch.Tensor:
        return model(batch)

    def evaluate(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        zero = torch.zeros((), dtype=torch.float64)
        return {"loss_sum": zero, "correct": zero, "count": torch.tensor(float(len(batch)), dtype=torch.float64)}

    def emulation(self) -> dict:
        """The record's `emulated`: the profile, where and how it was measured, and the waits' step."""
        p = self.profile
        return {
            "profile": str(self.path),
            "device_name": p.get("device_name"),
            "device": p.get("device"),
            "precision": p.get("precision"),
            "micro_batch": p.get("micro_batch"),
            "profiled": p.get("created"),
            "dilation": self.clock.dilation,
            "step_s": self.clock.schedule.step_s,
        }


def emulate(
    task, path: Path, micro_batch: int, precision: str, rank: int, seed: int, dilation: float = 1.0
) -> EmulatedTask:
    """The task emulated from the profile at `path` (every wait x `dilation`), checked against the run before
    anything starts."""
    profile = check_profile(path, micro_batch, precision)
    return EmulatedTask(task, profile, path, Clock(schedule(profile), rank, seed, dilation))
