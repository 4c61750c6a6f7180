"""A commbench's arithmetic: nccl-tests' bandwidths and the latency-bandwidth fit, and when a fit is physical.

Definitions (nccl-tests, doc/PERFORMANCE.md): for a message of S bytes all-reduced in t seconds over n ranks,
algbw = S / t, and busbw = algbw x 2(n-1)/n, the rate each rank's link carries in a ring all-reduce (it sends and
receives 2(n-1)/n of the message), comparable with the link's rate whatever n is. DeepSpeed's communication benchmark
calls 2S/t "throughput": a different number. The fit is t(S) = alpha + beta S over the sizes' medians, weighted by
1/t (`least_squares` says why); alpha is the latency, 2(n-1)/(n beta) the bus bandwidth the large messages reach. A
fit is called physical only where the measurements can make it a latency and a bandwidth (`unphysical` says when
not); one that is not is said so, with its reason, and its values are null.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SIZES = 3  # a line through two points fits them exactly: a third is the least that can test it


def algbw(size: int, seconds: float) -> float:
    """Bytes per second of the message: S / t."""
    return size / seconds


# the bytes each rank's link carries per message byte in a ring (nccl-tests' bus bandwidth factors): an all-reduce
# sends 2(n-1)/n of the message, an all-gather (n-1)/n of its output (each rank holds 1/n of it already)
BUS_FACTOR = {
    "all-reduce": lambda n: 2 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: (n - 1) / n,
}


def busbw(size: int, seconds: float, world_size: int, collective: str = "all-reduce") -> float:
    """Bytes per second on each rank's link in a ring (BUS_FACTOR): algbw x 2(n-1)/n for an all-reduce of `size`
    bytes, x (n-1)/n for an all-gather whose output is `size` bytes (0 for one rank)."""
    return algbw(size, seconds) * BUS_FACTOR[collective](world_size)


@dataclass(frozen=True)
class Fit:
    """t(S) = alpha + beta S."""

    alpha_s: float
    beta_s_per_byte: float

    def seconds(self, size: float) -> float:
        """The fitted time of a message of `size` bytes."""
        return self.alpha_s + self.beta_s_per_byte * size

    def bus_bandwidth(self, world_size: int, collective: str = "all-reduce") -> float | None:
        """Bytes per second on each link that large messages reach: 2(n-1)/(n beta) for an all-reduce (BUS_FACTOR);
        None where beta is not above 0 (no bandwidth was seen)."""
        factor = BUS_FACTOR[collective](world_size)
        return factor / self.beta_s_per_byte if self.beta_s_per_byte > 0 else None

    @property
    def half_size(self) -> float:
        """Hockney's n1/2 = alpha / beta: the message whose transfer takes as long as the latency (the time of a
        smaller one is mostly latency, of a larger one mostly transfer)."""
        return self.alpha_s / self.beta_s_per_byte


def least_squares(sizes: list[int], seconds: list[float]) -> Fit:
    """Least squares of t = alpha + beta S, each point weighted by 1/t (every t above 0), as it comes: alpha or
    beta may be negative.

    The weight sits between the absolute error (1: the largest message alone decides) and the relative error (1/t^2:
    the many small messages decide, and they do not follow the line: a token bucket passes a message smaller than its
    burst at line speed, and their times are noisy). On this machine's per-node links from 100 Mbit/s to 500 Mbit/s,
    1/t fits every size from 1 MiB to 64 MiB within 4 %, where 1/t^2 was 7-13 % fast (docs/commbench.md), and
    gradient buckets are that large."""
    w = [1 / t for t in seconds]
    sw = sum(w)
    mean_s = sum(wi * s for wi, s in zip(w, sizes, strict=True)) / sw
    mean_t = sum(wi * t for wi, t in zip(w, seconds, strict=True)) / sw
    var = sum(wi * (s - mean_s) ** 2 for wi, s in zip(w, sizes, strict=True))
    cov = sum(wi * (s - mean_s) * (t - mean_t) for wi, s, t in zip(w, sizes, seconds, strict=True))
    beta = cov / var if var > 0 else 0.0
    return Fit(mean_t - beta * mean_s, beta)


def fit(sizes: list[int], seconds: list[float]) -> Fit:
    """The least-squares line held to what a link can be: alpha and beta each at least 0 (`run.py project` takes
    it so, and says where `unphysical` finds it is not a latency and a bandwidth)."""
    raw = least_squares(sizes, seconds)
    return Fit(max(0.0, raw.alpha_s), max(0.0, raw.beta_s_per_byte))


def unphysical(sizes: list[int], values: list[float], what: str = "time") -> str | None:
    """Why the line fitted to these per-size medians is not a latency and a bandwidth (every reason that holds);
    None where it is. Not where:

    - fewer than MIN_SIZES sizes: a line through two points fits them whatever they are, so nothing tests it;
    - a median at or below 0 (of what an all-reduce takes from a computing thread, a difference of two timings: the
      cost is then below what the measurement resolves);
    - beta <= 0: the larger messages did not take longer, and the bandwidth would be unbounded;
    - alpha < 0: the line gives the small messages a negative time (they did not follow it);
    - the sizes do not reach both sides of n1/2 = alpha / beta (`Fit.half_size`): a size whose time is mostly
      latency and one whose time is mostly transfer are both needed to tell the two apart; with all of them on one
      side, that side's parameter is an extrapolation."""
    distinct = sorted(set(sizes))
    why = []
    if len(distinct) < MIN_SIZES:
        why.append(
            f"{len(distinct)} size(s) ({', '.join(map(size_text, distinct))}): a line fits any two points; time at "
            f"least {MIN_SIZES} (--sizes)"
        )
    low = [s for s, v in zip(sizes, values, strict=True) if not v > 0]
    if low:
        why.append(
            f"the {what} is not above 0 at {', '.join(map(size_text, low))}: below what the measurement resolves"
        )
    if low or len(distinct) < 2:  # no line to judge (its weights are 1/t)
        return "; ".join(why)
    return "; ".join(why + _line_faults(least_squares(sizes, values), distinct, bool(why))) or None


def _line_faults(f: Fit, distinct: list[int], said: bool) -> list[str]:
    """What keeps a fitted line from being a latency and a bandwidth (`unphysical`'s last three reasons); where
    another reason is `said` already, n1/2's side is not judged."""
    if f.beta_s_per_byte <= 0:
        return [
            f"beta {f.beta_s_per_byte * 1e9:.3g} ns/byte <= 0: the larger messages did not take longer (no "
            "bandwidth shows)"
        ]
    if f.alpha_s < 0:
        return [
            f"alpha {f.alpha_s * 1e3:.3g} ms < 0: the line gives messages under {_about(-f.half_size)} a negative "
            "time (the small messages do not follow it)"
        ]
    if said or distinct[0] <= f.half_size <= distinct[-1]:
        return []
    side, fix = ("smallest", "smaller") if f.half_size < distinct[0] else ("largest", "larger")
    edge = distinct[0] if side == "smallest" else distinct[-1]
    return [
        f"latency and bandwidth are not told apart: alpha/beta = {_about(f.half_size)} (the size whose "
        f"transfer takes as long as the latency) lies beyond the {side} size, {size_text(edge)}; add {fix} sizes"
    ]


def _about(n: float) -> str:
    """A size that is not a message's, to a tenth of its unit."""
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def size_text(n: int) -> str:
    """A message size as the reports write it: 4 KiB, 1 MiB, 512 B."""
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"
