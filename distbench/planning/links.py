"""The projection's link, from commbench's fit of each library's own all-reduce: t(S) = alpha + beta S at the world
size it was measured at, carried to other world sizes as a ring all-reduce (as is, or as its compression sends it);
on CPU nodes also what it takes from a computing core, fitted alike; or the link's nominal rate, with no latency."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from distbench.errors import UserError
from distbench.launching import link
from distbench.planning.bandwidth import Fit, fit, unphysical
from distbench.planning.commbench_report import RECORDS, SAID, series
from distbench.records import read_jsonl

COMPRESSED_FRACTION = {"none": 1.0, "fp16": 0.5, "bf16": 0.5}  # bytes on the link per gradient byte
# what `project` needs of each commbench record, and of what type
COMMBENCH_FIELDS = {"backend": str, "size_bytes": int, "time_s": int | float, "world_size": int}


@dataclass(frozen=True)
class Link:
    """One library's all-reduce on the link: t(S) = alpha + beta S at `world` ranks (commbench), or at the link's
    nominal rate with no latency."""

    alpha_s: float
    beta_s_per_byte: float
    world: int
    source: str
    # the computation an all-reduce takes from a rank whose core computes (commbench under load; else its CPU time
    # on an idle core; 0: not measured), fitted alike
    cpu_alpha_s: float = 0.0
    cpu_beta_s_per_byte: float = 0.0
    wire_fraction: float = 1.0  # the bytes the fit is taken at per gradient byte (0.5: halved by a compression)
    # why commbench's fit of the time, and of the computation taken, is not a latency and a bandwidth (None: it is;
    # bandwidth.unphysical); the projection then takes it held at alpha, beta >= 0, and says so
    time_why: str | None = None
    cpu_why: str | None = None
    # the library's all-gather of its parameters on the same link (DeepSpeed's after a ZeRO-1/2 step, in a ZeRO-3
    # forward), where commbench timed it (`deepspeed all-gather`); None: not measured
    gather: Link | None = None
    # its gradients' reduce-scatter (DeepSpeed's at the end of a ZeRO-3 backward), where commbench timed it
    # (`deepspeed reduce-scatter`), taken as a ring the same way (`allgather_s`); None: not measured
    scatter: Link | None = None

    def allgather_s(self, nbytes: float, world: int) -> float:
        """This fit taken as a ring all-gather (or reduce-scatter) of nbytes in all at `world` ranks: W-1 latency
        steps and (W-1)/W of the bytes on each link, scaled from the world size it was measured at (a fit of an
        all-gather, `gather`, or of a reduce-scatter, `scatter`)."""
        if world <= 1:
            return 0.0
        measured = (self.world - 1) / self.world
        return (
            self.alpha_s * (world - 1) / max(1, self.world - 1)
            + self.beta_s_per_byte * nbytes * ((world - 1) / world) / measured
        )

    def allreduce_s(self, nbytes: float, world: int) -> float:
        """A ring all-reduce of nbytes at `world` ranks: 2(W-1) latency steps and 2(W-1)/W of the bytes on each
        link, scaled from the world size the fit was measured at."""
        return _ring(self.alpha_s, self.beta_s_per_byte, self.world, nbytes, world)

    def cpu_s(self, nbytes: float, world: int) -> float:
        """The CPU time the same all-reduce costs each rank (its share of the copies and the reduction: the same
        ring scaling)."""
        return _ring(self.cpu_alpha_s, self.cpu_beta_s_per_byte, self.world, nbytes, world)

    @classmethod
    def nominal(cls, rate: str, compression: str = "none") -> Link:
        """The link at its nominal rate (--link-rate, no --commbench): no latency, no CPU cost; one line for a rate
        that has none (unshaped)."""
        bits = link.parse_rate(rate)
        if bits is None:
            raise UserError("--link-rate none has no nominal rate: give --commbench DIR measured on that link")
        # a ring moves 2(n-1)/n S over each link: beta is the time per message byte at n = 2 (one byte per byte)
        said = f"nominal {rate}, no latency (no --commbench)"
        return cls(0.0, 8 / bits, 2, said, wire_fraction=COMPRESSED_FRACTION[compression])


def _ring(alpha: float, beta: float, measured_world: int, nbytes: float, world: int) -> float:
    if world <= 1:
        return 0.0
    measured = 2 * (measured_world - 1) / measured_world
    return alpha * (world - 1) / max(1, measured_world - 1) + beta * nbytes * (2 * (world - 1) / world) / measured


def load_links(commbench_dir: Path, rate: str | None, option: str = "--commbench") -> tuple[str, dict[str, list[dict]]]:
    """The link commbench measured and its records per backend, checked against the planned link; a folder that is
    not a commbench's, or whose records are not, is one line."""
    path = commbench_dir / RECORDS
    if not path.is_file():
        raise UserError(f"{option} {commbench_dir}: no {RECORDS} (a `run.py commbench --out` folder)")
    lines = read_jsonl(path)
    recs = lines.records
    if not recs:
        said = f" ({lines.skipped[0]}{' ...' if len(lines.skipped) > 1 else ''})" if lines.skipped else ""
        raise UserError(f"{option} {commbench_dir}: {RECORDS} holds no record{said}")
    for number, r in enumerate(recs, 1):
        wrong = [k for k, kind in COMMBENCH_FIELDS.items() if not isinstance(r.get(k), kind)]
        if wrong or not r["time_s"] > 0 or r["size_bytes"] <= 0:
            raise UserError(
                f"{option} {commbench_dir}: record {number} of {RECORDS} is not a commbench record "
                f"({', '.join(wrong) or 'time_s and size_bytes'} missing or not a positive number)"
            )
    measured = {r["link_rate"] for r in recs}
    if len(measured) > 1 or (rate is not None and measured != {rate}):
        said = "/".join(sorted(map(str, measured)))
        raise UserError(f"{option} {commbench_dir} holds {said}, not one link{f' of {rate}' if rate else ''}")
    out: dict[str, list[dict]] = {}
    for r in recs:  # by series: `deepspeed`'s all-reduce apart from `deepspeed all-gather`
        out.setdefault(series(r)[0], []).append(r)
    return measured.pop(), out


def resampled(recs: list[dict], rng: random.Random) -> list[dict]:
    """A bootstrap resample of commbench's records, size by size."""
    by_size: dict[int, list[dict]] = {}
    for r in recs:
        by_size.setdefault(r["size_bytes"], []).append(r)
    return [rng.choice(group) for group in by_size.values() for _ in group]


def fit_link(
    recs: list[dict], source: str, wire_fraction: float = 1.0, under_load: bool = False, cores_shared: bool = True
) -> Link:
    """The fit of one library's records: per size, the median time (as commbench's summary; `under_load`: the time
    commbench measured with a computation on the rank's core, where it did, as a CPU node's training step has it:
    timeline.TIMED_UNDER_LOAD), and the median computation an all-reduce takes under load (else its CPU time on an
    idle core, from a commbench that did not measure under load, which the source says where the node's computation
    shares its cores: `cores_shared`); each held at alpha, beta >= 0, with why it is not physical where it is not."""
    sizes = sorted({r["size_bytes"] for r in recs})

    def medians(key: str) -> list[float]:
        return [statistics.median(r[key] for r in recs if r["size_bytes"] == s) for s in sizes]

    def fitted(values: list[float]) -> Fit:
        return fit(sizes, [max(1e-9, v) for v in values])

    key = "loaded_time_s" if under_load and all(r.get("loaded_time_s") is not None for r in recs) else "time_s"
    if under_load:
        source += " timed under load" if key == "loaded_time_s" else " (timed on an idle core: not measured under load)"
    times = medians(key)
    f, time_why = fitted(times), unphysical(sizes, times, SAID[key])
    world = recs[0]["world_size"]
    cpu_key = next((k for k in ("loaded_cpu_s", "cpu_s") if all(r.get(k) is not None for r in recs)), None)
    if cpu_key is None:  # a commbench from before CPU time was recorded
        return Link(f.alpha_s, f.beta_s_per_byte, world, source, wire_fraction=wire_fraction, time_why=time_why)
    cpu = medians(cpu_key)
    c = fitted(cpu)
    idle = cores_shared and cpu_key != "loaded_cpu_s"  # where the cores are free, nothing is under load
    said = f"{source}{' (CPU time on an idle core: not measured under load)' if idle else ''}"
    cpu_why = unphysical(sizes, cpu, SAID[cpu_key])
    return Link(
        f.alpha_s, f.beta_s_per_byte, world, said, c.alpha_s, c.beta_s_per_byte, wire_fraction, time_why, cpu_why
    )
