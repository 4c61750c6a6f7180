"""The shape of backward, from the task's own model on this machine: when each gradient is ready, as a fraction of
backward, forward's share of forward+backward, and how forward+backward scales from the sweep's batch to a process's
micro-batch. Measured (`measure_profile`), kept beside the projection's output, and read again (`Profile.read`)."""

from __future__ import annotations

import json
import random
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from distbench.errors import UserError
from distbench.planning.reference import NORMAL_P90, Phases, Reference


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
    # the gradients' bytes of each of the task's shard units (Task.shard_units, inner before outer), what a sharding
    # library gathers and scatters unit by unit; the root holds the rest (None: not known, a profile from before)
    shard_units: list[int] | None = None

    PASSES = ("micro_forward_s", "micro_backward_s", "reference_s")

    @property
    def total_bytes(self) -> int:
        """The gradients' bytes, all of them."""
        return sum(self.grad_bytes)

    def to_dict(self) -> dict:
        """The profile as OUTPUT.profile.json holds it (`read` reads it back)."""
        return {
            "grad_bytes": self.grad_bytes,
            "ready": self.ready,
            "forward_share": self.forward_share,
            "micro_over_reference": self.micro_over_reference,
            "micro_batch": self.micro_batch,
            **({"passes": self.passes} if self.passes else {}),
            **({"shard_units": self.shard_units} if self.shard_units is not None else {}),
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
                [int(b) for b in d["shard_units"]] if "shard_units" in d else None,
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


def measure_profile(ref: Reference, micro_batch: int, repeats: int = 5) -> Profile:
    """Forward and backward of the task's model at the micro-batch and at the reference batch, on this machine with
    the reference's threads: when each gradient is ready (post-accumulate-grad hooks) and how long each part takes."""
    import torch

    from distbench.config import RunConfig
    from distbench.tasks import build_task, load_datasets, shard_unit_names

    torch.set_num_threads(ref.threads)
    cfg = RunConfig.from_dict(ref.config)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model()
    train = load_datasets(task)[0]
    params = [p for p in model.parameters() if p.requires_grad]

    def batch(n: int):
        return task.collate([train[i % len(train)] for i in range(n)])

    model.train()
    micro, full = batch(micro_batch), batch(ref.batch_size)
    for b in (micro, full):  # warm-up
        _one_pass(task, model, params, b)
    passes = [_one_pass(task, model, params, micro) for _ in range(repeats)]
    full_passes = [sum(_one_pass(task, model, params, full)[:2]) for _ in range(repeats)]
    fwd, bwd = statistics.median(p[0] for p in passes), statistics.median(p[1] for p in passes)
    ready = [statistics.median(p[2][i] for p in passes) for i in range(len(params))]
    order = sorted(range(len(params)), key=lambda i: ready[i])
    return Profile(
        grad_bytes=[params[i].numel() * params[i].element_size() for i in order],
        ready=[min(1.0, max(0.0, ready[i])) for i in order],
        forward_share=fwd / (fwd + bwd),
        micro_over_reference=(fwd + bwd) / statistics.median(full_passes),
        micro_batch=micro_batch,
        passes={
            "micro_forward_s": [p[0] for p in passes],
            "micro_backward_s": [p[1] for p in passes],
            "reference_s": full_passes,
        },
        shard_units=unit_bytes(
            [
                (n.rpartition(".")[0], p.numel() * p.element_size())
                for n, p in model.named_parameters()
                if p.requires_grad
            ],
            shard_unit_names(task, model),
        ),
    )


def unit_bytes(owners: list[tuple[str, int]], units: list[str]) -> list[int]:
    """The bytes of each shard unit (named, inner before outer): each owner's (a module's name and its gradients'
    bytes) go to the first unit that holds it (the unit itself or a module inside it); the root holds the rest."""
    out = [0] * len(units)
    for owner, nbytes in owners:
        inside = [i for i, u in enumerate(units) if owner == u or owner.startswith(u + ".")]
        if inside:
            out[inside[0]] += nbytes
    return out


def _one_pass(task, model, params: list, batch) -> tuple[float, float, list[float]]:
    """One forward and backward: their seconds, and when each parameter's gradient was ready (a fraction of
    backward, from the post-accumulate-grad hooks)."""
    ready = [0.0] * len(params)
    hooks = [
        p.register_post_accumulate_grad_hook(lambda _p, i=i: ready.__setitem__(i, time.perf_counter()))
        for i, p in enumerate(params)
    ]
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    loss = task.step(model, batch)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    for h in hooks:
        h.remove()
    return t1 - t0, t2 - t1, [(r - t1) / (t2 - t1) for r in ready]


def from_module_profile(path: Path) -> tuple[Reference, Profile]:
    """A module profile (`run.py profile`) as the projection's inputs (`--from-profile`, atlas's and project's):
    each of its steps a reference run (forward, backward, optimizer), and its modules, in the order their gradients
    were ready, the backward's shape (a module's gradients together: its parameters were ready within microseconds of
    each other). Its computation is a device's, as the emulator replays it (`--emulate`): it leaves the cores free for
    the communication, on whatever device it was measured (Reference.emulated)."""
    from distbench.tasks.emulated import read_profile

    p = read_profile(path, "--from-profile")
    micro = p["micro_batch"]
    fwd, bwd, opt = (p[k]["steps_s"] for k in ("forward", "backward", "optimizer"))
    totals = sorted(f + b + o for f, b, o in zip(fwd, bwd, opt, strict=False))
    jitter = max(0.0, totals[int(0.9 * (len(totals) - 1))] - statistics.median(totals)) / NORMAL_P90 * 1e3
    runs = [Phases(0.0, (f + b) * 1e3, o * 1e3, jitter) for f, b, o in zip(fwd, bwd, opt, strict=False)]
    if not runs:
        raise UserError(f"--from-profile {path}: no step measured")
    ref = Reference(
        p.get("task") or "profiled",
        micro,
        p.get("threads") or 1,
        str(p.get("device") or "cpu").split(":")[0],
        {},
        runs,
        [micro / (f + b + o) for f, b, o in zip(fwd, bwd, opt, strict=False)],
        {micro: runs},
        emulated=True,
        profiled=True,
    )
    scale, backward = p["module_scale"]["backward"], p["backward"]["median_s"]
    ready = sorted(
        (min(1.0, (m["backward_start"]["median_s"] + m["backward"]["median_s"]) * scale / backward), m["grad_bytes"])
        for m in p["modules"]
        if m["backward"]["median_s"] is not None
    )
    forward = p["forward"]["median_s"]
    profile = Profile(
        [b for _, b in ready],
        [t for t, _ in ready],
        forward / (forward + backward),
        1.0,
        micro,
        {
            "micro_forward_s": list(fwd),
            "micro_backward_s": list(bwd),
            "reference_s": [f + b for f, b in zip(fwd, bwd, strict=False)],
        },
        unit_bytes([(m["name"], m["grad_bytes"]) for m in p["modules"]], p["shard_units"])
        if "shard_units" in p
        else None,
    )
    return ref, profile


def at_micro_batch(profile: Profile, path: Path, micro: int, given: str) -> Profile:
    """A module profile's backward for a plan at `micro`: only at the micro-batch it was measured at, which it does
    not scale from; else one line naming what the user gave (`given`, e.g. "--batch-size 32")."""
    if profile.micro_batch != micro:
        raise UserError(
            f"{given}: the module profile {path} was measured at micro-batch {profile.micro_batch}, this plan's is "
            f"{micro}, and a profile does not scale to another (profile the model at {micro}, or leave "
            f"{given.split()[0]} out)"
        )
    return profile
