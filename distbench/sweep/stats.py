"""The statistics of repeated runs: medians, their spread, bootstrap intervals, paired ratios and verdicts.

Why these (docs/statistics.md says it for users):
- **Median**, not mean: one run disturbed by the machine (a neighbour's burst, a page-cache miss) moves a mean
  by its whole size and a median hardly at all.
- **Percentile bootstrap 95 % interval of the median**: no assumption about the shape of the noise, which on a
  shared machine is skewed (runs are slowed, never sped up). With 5 repeats it is the min-max of the 5
  values (each end has a (1/2)^5 chance of lying beyond the true median: 94 % coverage), so it is honest about
  how little 5 runs say.
- **Paired ratios**: within a round, configurations run back to back, so a slow drift of the machine hits
  both sides of a ratio alike and cancels; the ratio of two medians taken over different minutes does not.
- **Verdict**: a difference is reported when the interval of the paired ratio excludes 1, and "no measurable
  difference" otherwise, with the interval, so that a reader sees how large a difference could still hide.

Nothing here knows about records; grouping.py and verdicts.py feed it numbers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
CI = f"{round(LEVEL * 100)} % CI"
N_BOOT = 4000
# Fewer values than this give no interval (the verdict says so): the bootstrap interval of the median of n
# values is about their min-max for n <= 5, which holds the true median with probability 1 - 2 / 2^n: 94 % for
# 5, but 88 % for 4 and 75 % for 3, too far from the 95 % it would be labelled with.
MIN_FOR_INTERVAL = 5
NOISE_WARN_PCT = 5.0  # the report warns when the noise hides differences larger than this


@dataclass(frozen=True)
class Summary:
    """The median of `n` values, their min-max and the bootstrap interval of the median (None when n is too
    small for one)."""

    median: float
    lo: float | None
    hi: float | None
    min: float
    max: float
    n: int

    @property
    def has_interval(self) -> bool:
        """Whether there were enough values for an interval (MIN_FOR_INTERVAL)."""
        return self.lo is not None

    def interval(self, spec: str = ".2f") -> str:
        """The interval as "lo-hi" in `spec`, "—" without one."""
        if not self.has_interval:
            return "—"
        if spec == ".2f" and "1.00" in (f"{self.lo:.2f}", f"{self.hi:.2f}"):
            spec = ".3f"  # a bound next to 1 decides the verdict: show the digit that says on which side it is
        return f"{self.lo:{spec}}-{self.hi:{spec}}"

    def half_width_pct(self) -> float | None:
        """Half the interval's width, in % of the median: the relative resolution of this median."""
        if not self.has_interval or not self.median:
            return None
        return 50.0 * (self.hi - self.lo) / abs(self.median)


def bootstrap_interval(values: list[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0):
    """Percentile bootstrap interval of the median (seeded: the same values give the same interval)."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(medians, tail, method="lower")), float(np.quantile(medians, 1 - tail, method="higher"))


def summarize(values: list[float]) -> Summary | None:
    """The Summary of the finite values given (None and non-finite ones left out); None where none is left."""
    values = [float(v) for v in values if v is not None and np.isfinite(v)]
    if not values:
        return None
    lo = hi = None
    if len(values) >= MIN_FOR_INTERVAL:
        lo, hi = bootstrap_interval(values)
    return Summary(statistics.median(values), lo, hi, min(values), max(values), len(values))


def paired_ratios(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """a[round] / b[round] for the rounds where both ran (a round is one pass over every configuration)."""
    return [a[r] / b[r] for r in sorted(a.keys() & b.keys()) if b[r]]


def ratio_of_medians(new: list[float], old: list[float], seed: int = 0) -> Summary | None:
    """median(new) / median(old) for unpaired samples (two sweeps: before/after, or two machines), with a
    bootstrap interval that resamples each side on its own."""
    if not new or not old:
        return None
    point = statistics.median(new) / statistics.median(old)
    lo = hi = None
    if min(len(new), len(old)) >= MIN_FOR_INTERVAL:
        rng = np.random.default_rng(seed)
        x, y = np.asarray(new, dtype=float), np.asarray(old, dtype=float)
        ratios = np.median(x[rng.integers(0, len(x), size=(N_BOOT, len(x)))], axis=1) / np.median(
            y[rng.integers(0, len(y), size=(N_BOOT, len(y)))], axis=1
        )
        tail = (1 - LEVEL) / 2
        lo = float(np.quantile(ratios, tail, method="lower"))
        hi = float(np.quantile(ratios, 1 - tail, method="higher"))
    return Summary(point, lo, hi, point, point, min(len(new), len(old)))


def distinguishable(ratio: Summary) -> bool | None:
    """True: the interval excludes 1 (a real difference); False: it contains 1; None: no interval."""
    if not ratio.has_interval:
        return None
    return not (ratio.lo <= 1.0 <= ratio.hi)


def verdict(a: str, b: str, ratio: Summary | None) -> str:
    """One sentence a reader can paste, e.g. "horovod x2 is 0.83x ddp x2 (95 % CI 0.78-0.88)"."""
    if ratio is None:
        return f"{a} vs {b}: no round where both ran"
    d = distinguishable(ratio)
    if d is None:
        return f"{a} vs {b}: {ratio.median:.2f}x from {ratio.n} round(s), too few for an interval (use --repeats 5)"
    if d:
        return f"{a} is {ratio.median:.2f}x {b} ({CI} {ratio.interval()})"
    return f"{a} vs {b}: no measurable difference ({ratio.interval()})"
