"""The fairness contract of a task, checked: the same weights from the seed, the same data on every rank, an
exact evaluation, and so the same loss curve under every backend (`run.py check-task`, distbench/sweep/checktask.py).

The checks read what a run leaves in its record: each rank's fingerprint of the datasets (`fingerprint`, taken
by the loop on every rank and gathered), the evaluation's count against the test set's size, the per-step
global losses and the parameter checksum against `single` x1. The seed is checked in-process: two builds of
the model under the same seed must be identical. Each failure names the part of the contract it breaks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

LOSS_TOLERANCE = 1e-4  # largest per-step loss difference to single x1 with dropout off (float reordering only) ...
EARLY_STEPS = 10  # ... over the first steps: later, training amplifies the reordered rounding, while a sharding or
# averaging bug differs from the first step by 1e-2 or more. Measured on this workplace's AMD EPYC host, single x1
# against ddp x2 (MNIST, 50 steps, Adadelta lr 0.5): 1.2e-06 at step 10, 3e-04 at step 20, 7e-03 at step 44.
LATE_TOLERANCE = 0.05  # per step after EARLY_STEPS
CHECKSUM_TOLERANCE = 0.02  # relative difference of the parameter checksums after training (5e-3 seen: MNIST, 50 steps)
_SAMPLES = 8  # samples of each dataset that go into its fingerprint, spread over it
# A run in 16 bits (bf16 computation, fp16/bf16 gradients on the wire) against the same run in fp32: bounds derived
# from the rounding, not measured on one machine (how a processor rounds bf16, natively or emulated, differs: the
# evaluation loss of fsdp x2 in bf16 was 0.34 % off fp32 on one machine and 2.0 % on another).
# - bf16 keeps 8 significant bits: each rounding is off by at most u = 2^-8 = 0.39 % of the value (fp16's 11 bits:
#   2^-11). Each optimizer step passes its update through such roundings; in the linear model of accumulated
#   rounding, the errors of n steps add up, so that the loss after n steps is within n * u of fp32's, relatively.
# - u is bf16's for both formats: training amplifies a perturbation until the two trajectories decorrelate, after
#   which their difference no longer depends on how small the perturbation was (measured: fp16 gradients drift from
#   fp32 as far as bf16 gradients do, 0.40 % and 0.47 % on the evaluation loss after 50 steps).
# - The same amplification makes a single step's loss (one batch's) incomparable after the first few steps (0.25
#   apart at step 19 of 50 here, 3.7 times the bound): what is compared is the evaluation loss after the last step
#   and the mean of the loss over all steps, which averages the batches' noise: measured within 0.5 % here (2.0 %
#   on the other machine), ten times or more below the bound after 50 steps (19.5 %), while a 16-bit path that does
#   not train ends several times off (2.3 against 0.33).
SIXTEEN_BIT_ROUNDING = 2.0**-8  # u: bf16's relative rounding, the coarser of the two 16-bit formats


def rounding_bound(steps: int) -> float:
    """How far, relatively, a run in 16 bits may end from the same run in fp32 after `steps` optimizer steps: one
    rounding of u per step, accumulated linearly (the derivation above)."""
    return steps * SIXTEEN_BIT_ROUNDING


def not_finite(rec: dict, whose: str) -> str | None:
    """Where a run's numbers stopped being numbers (a record keeps NaN and infinities as null): the first step whose
    loss is not finite, or the parameters after training; None when every one is finite."""
    step = next((i for i, loss in enumerate(rec["loss_history"], 1) if loss is None), None)
    if step is not None:
        return f"{whose} loss is not finite from step {step} on (NaN or infinite: a learning rate too high?)"
    if rec.get("param_checksum") is None:
        return f"{whose} parameters are not finite after training"
    return None


def drift(rec: dict, reference: dict) -> dict[str, float]:
    """How far, relatively, a run ended from a reference run of as many steps: in its evaluation loss and in the mean
    of its loss over the steps (what rounding_bound bounds for a run in 16 bits against fp32)."""

    def mean(r: dict) -> float:
        return sum(r["loss_history"]) / len(r["loss_history"])

    return {
        "eval_loss": abs(rec["eval_loss"] / reference["eval_loss"] - 1),
        "mean_loss": abs(mean(rec) / mean(reference) - 1),
    }


def _feed(h, obj) -> None:
    if isinstance(obj, torch.Tensor):
        h.update(str((obj.dtype, tuple(obj.shape))).encode())
        h.update(obj.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _feed(h, obj[k])
    elif isinstance(obj, list | tuple):
        for v in obj:
            _feed(h, v)
    else:
        h.update(repr(obj).encode())


def fingerprint(*datasets) -> int:
    """A 62-bit hash of the datasets' sizes and a few samples spread over each: equal on two ranks when they
    hold the same data (what the contract asks), different when a task builds its data per rank."""
    h = hashlib.sha256()
    for ds in datasets:
        n = len(ds)
        h.update(str(n).encode())
        for i in sorted({n * k // _SAMPLES for k in range(_SAMPLES)} if n else set()):
            _feed(h, ds[i])
    return int.from_bytes(h.digest()[:8], "little") >> 2


def weights_follow_the_seed(task, seed: int = 0) -> bool:
    """Two builds of the task's model under the same seed give the same parameters and buffers."""
    states = []
    for _ in range(2):
        torch.manual_seed(seed)
        states.append(task.build_model().state_dict())
    a, b = states
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@dataclass
class Finding:
    backend: str
    max_loss_diff: float | None
    checksum_rel_diff: float | None
    eval_count: int | None
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def examine(backend: str, rec: dict, reference: dict | None) -> Finding:
    """What one run's record says about the contract, against single x1's record (None for single itself)."""
    problems = []
    prints = rec.get("data_fingerprints") or []
    if len(set(prints)) > 1:
        problems.append(
            f"data differs between ranks (dataset fingerprints {', '.join(f'{p:x}' for p in prints)}): "
            "datasets() must return the same data on every rank"
        )
    n_test = rec["dataset"].get("n_test")
    if n_test is not None and rec["eval_count"] != n_test:
        problems.append(
            f"evaluation counted {rec['eval_count']} of the {n_test} test samples: evaluate() must sum "
            "over every sample of its batch, each once"
        )
    diff = rel = None
    if reference is not None and (broken := not_finite(rec, "its") or not_finite(reference, "single x1's")):
        problems.append(broken)
    elif reference is not None:
        losses, ref = rec["loss_history"], reference["loss_history"]
        diff = max((abs(a - b) for a, b in zip(losses[:EARLY_STEPS], ref, strict=False)), default=0.0)
        late = max((abs(a - b) for a, b in zip(losses, ref, strict=False)), default=0.0)
        rel = abs(rec["param_checksum"] - reference["param_checksum"]) / max(abs(reference["param_checksum"]), 1e-12)
        if len(losses) != len(ref):
            problems.append(f"{len(losses)} steps against single's {len(ref)}")
        if not problems and (diff > LOSS_TOLERANCE or late > LATE_TOLERANCE or rel > CHECKSUM_TOLERANCE):
            problems.append(
                f"the loss curve differs from single x1's by up to {diff:.2e} in the first {EARLY_STEPS} "
                f"steps ({late:.2e} overall, checksum {rel:.1e}): some "
                "randomness is not the seed's (dropout not off through cfg.dropout? an unseeded "
                "generator?)"
            )
    return Finding(backend, diff, rel, rec.get("eval_count"), problems)
