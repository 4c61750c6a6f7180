"""`run.py commbench`: each library's own all-reduce over message sizes, under its launcher, on simulated nodes and
shaped links (or a Slurm allocation), with nccl-tests' bandwidths and a latency-bandwidth fit.

Definitions (nccl-tests, doc/PERFORMANCE.md): for a message of S bytes all-reduced in t seconds over n ranks,
algbw = S / t, and busbw = algbw x 2(n-1)/n, the rate each rank's link carries in a ring all-reduce (it sends and
receives 2(n-1)/n of the message), comparable with the link's rate whatever n is. DeepSpeed's communication benchmark
calls 2S/t "throughput": a different number. The fit is t(S) = alpha + beta S over the sizes' medians, weighted by
1/t (`fit` says why); alpha is the latency, 2(n-1)/(n beta) the bus bandwidth the large messages reach. A fit is
called physical only where the measurements can make it a latency and a bandwidth (`unphysical` says when not); one
that is not is said so, with its reason, and its values are null.

Writes DIR/commbench.jsonl (one record per backend x size x repeat, with the machine's load around its launch),
DIR/summary.csv, DIR/fit.json (alpha and beta per backend, or why not), DIR/commbench.md and DIR/busbw.png.
"""

from __future__ import annotations

import csv
import os
import platform
import statistics
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from distbench.config import available_cpus
from distbench.launching.affinity import load_average
from distbench.sweep import stats
from distbench.sweep.configuration import SweepConfig
from distbench.training.reporter import append_line, to_json, write_json

DEFAULT_SIZES = tuple(4096 * 4**i for i in range(8))  # 4 KiB to 64 MiB
MIN_SIZES = 3  # a line through two points fits them exactly: a third is the least that can test it
RECORDS, SUMMARY, FIT = "commbench.jsonl", "summary.csv", "fit.json"


def algbw(size: int, seconds: float) -> float:
    """Bytes per second of the message: S / t."""
    return size / seconds


def busbw(size: int, seconds: float, world_size: int) -> float:
    """Bytes per second on each rank's link in a ring all-reduce: algbw x 2(n-1)/n (0 for one rank)."""
    return algbw(size, seconds) * 2 * (world_size - 1) / world_size


@dataclass(frozen=True)
class Fit:
    """t(S) = alpha + beta S."""

    alpha_s: float
    beta_s_per_byte: float

    def seconds(self, size: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * size

    def bus_bandwidth(self, world_size: int) -> float | None:
        """Bytes per second on each link that large messages reach: 2(n-1)/(n beta); None where beta is not above
        0 (no bandwidth was seen)."""
        return 2 * (world_size - 1) / (world_size * self.beta_s_per_byte) if self.beta_s_per_byte > 0 else None

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
            f"{len(distinct)} size(s) ({', '.join(map(_size, distinct))}): a line fits any two points; time at least "
            f"{MIN_SIZES} (--sizes)"
        )
    low = [s for s, v in zip(sizes, values, strict=True) if not v > 0]
    if low:
        why.append(f"the {what} is not above 0 at {', '.join(map(_size, low))}: below what the measurement resolves")
    if low or len(distinct) < 2:  # no line to judge (its weights are 1/t)
        return "; ".join(why)
    f = least_squares(sizes, values)
    if f.beta_s_per_byte <= 0:
        why.append(
            f"beta {f.beta_s_per_byte * 1e9:.3g} ns/byte <= 0: the larger messages did not take longer (no "
            "bandwidth shows)"
        )
    elif f.alpha_s < 0:
        why.append(
            f"alpha {f.alpha_s * 1e3:.3g} ms < 0: the line gives messages under {_about(-f.half_size)} a negative "
            "time (the small messages do not follow it)"
        )
    elif not why and not distinct[0] <= f.half_size <= distinct[-1]:
        side, fix = ("smallest", "smaller") if f.half_size < distinct[0] else ("largest", "larger")
        edge = distinct[0] if side == "smallest" else distinct[-1]
        why.append(
            f"latency and bandwidth are not told apart: alpha/beta = {_about(f.half_size)} (the size whose "
            f"transfer takes as long as the latency) lies beyond the {side} size, {_size(edge)}; add {fix} sizes"
        )
    return "; ".join(why) or None


@dataclass(frozen=True)
class Bench:
    """What a commbench times: the backends and their compressions, the message sizes, the topology and link, and
    how often."""

    backends: list[str]
    sizes: list[int]
    nodes: int
    nprocs: int  # processes per node
    link_rate: str
    link_mode: str
    repeats: int  # timed all-reduces per size, in one launch
    rounds: int  # launches of each backend
    timeout_s: float
    compressions: tuple[str, ...] = ("none",)  # how the gradients travel: as is, or in 16 bits

    def configs(self) -> list[SweepConfig]:
        return [
            SweepConfig(
                task="commbench",
                backend=b,
                world_size=self.nodes * self.nprocs,
                threads=1,
                grad_compression=c,
                nodes=self.nodes,
                link_rate=self.link_rate,
                link_mode=self.link_mode,
            )
            for b in self.backends
            for c in self.compressions
        ]

    def program(self, config: SweepConfig, out_json: Path) -> list[str]:
        return [
            "-m",
            "distbench.scaling.worker",
            "--backend",
            config.backend,
            "--grad-compression",
            config.grad_compression,
            "--sizes",
            ",".join(map(str, self.sizes)),
            "--repeats",
            str(self.repeats),
            "--output",
            str(out_json),
        ]


MEASURES = ("time_s", "cpu_s", "loaded_time_s", "loaded_cpu_s")  # per repeat; the loaded two on CPU ranks only


def records(result: dict, config: SweepConfig, rnd: int, load: dict | None = None) -> list[dict]:
    """The worker's measurements as one record per size and repeat, each with the machine's load around its launch
    (`load`: avg_1m_before, avg_1m_after, cores; as a training record's machine_load)."""
    n = result["world_size"]
    fields = {
        "backend": config.backend,
        "grad_compression": config.grad_compression,
        "world_size": n,
        "nodes": config.nodes,
        "nprocs": config.nprocs,
        "link_rate": config.link_rate,
        "link_mode": config.link_mode,
        "launcher": result["launcher"],
        "round": rnd,
        **({"machine_load": load} if load is not None else {}),
    }
    out = []
    for size, measured in result["measured"].items():
        for i, t in enumerate(measured["time_s"]):
            rec = {**fields, "size_bytes": int(size), "repeat": i + 1}
            rec |= {k: measured[k][i] for k in MEASURES if k in measured}
            out.append(rec | {"algbw_Bps": algbw(int(size), t), "busbw_Bps": busbw(int(size), t, n)})
    return out


def run(executor, bench: Bench, out: Path) -> list[dict]:
    """Every backend once per round (the order alternating by round); returns the records, also appended to
    DIR/commbench.jsonl. A launch that fails is one FAILED line with its cause (whole in its log) and no records."""
    configs = bench.configs()
    executor.check(configs)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    found = []
    for rnd in range(1, bench.rounds + 1):
        for config in configs if rnd % 2 else configs[::-1]:
            name = "-".join(
                [config.backend, *([config.grad_compression] if len(bench.compressions) > 1 else []), f"r{rnd}"]
            )
            out_json = out / "runs" / f"{name}.json"
            print(f"commbench: {config.name()} round {rnd}: running", file=sys.stderr, flush=True)
            program = bench.program(config, out_json)
            before = load_average()
            result = executor.run(config, [], out_json, out / "runs" / f"{name}.log", bench.timeout_s, program)
            load = {"avg_1m_before": before, "avg_1m_after": load_average(), "cores": os.cpu_count()}
            if result["status"] != "ok":  # the others go on; the command then says how many failed, and exits 1
                last = (result.get("error") or "no output").splitlines()[-1]
                print(f"commbench: {config.name()} round {rnd}: FAILED: {last}", file=sys.stderr, flush=True)
                continue
            for rec in records(result, config, rnd, load):
                append_line(out / RECORDS, to_json(rec, sort_keys=True))
                found.append(rec)
    return found


def series(r: dict) -> tuple[str, str]:
    """What one line of the results is: a backend and how its gradients travel (records from before compression
    was timed travelled as is)."""
    return r["backend"], r.get("grad_compression", "none")


def label(backend: str, compression: str) -> str:
    return backend if compression == "none" else f"{backend} {compression}"


def summarize(recs: list[dict]) -> list[dict]:
    """Per backend, compression and size: the median time with its interval, the bandwidths of the median, and the
    medians of the CPU times."""
    rows = []
    keys = sorted({(*series(r), r["size_bytes"]) for r in recs})
    for backend, compression, size in keys:
        mine = [r for r in recs if (*series(r), r["size_bytes"]) == (backend, compression, size)]
        s = stats.summarize([r["time_s"] for r in mine])
        n = mine[0]["world_size"]
        rows.append(
            {
                "backend": backend,
                "grad_compression": compression,
                "size_bytes": size,
                "world_size": n,
                "nodes": mine[0]["nodes"],
                "link_rate": mine[0]["link_rate"],
                "link_mode": mine[0]["link_mode"],
                "repeats": len(mine),
                "time_s": s.median,
                "time_s_lo": s.lo,
                "time_s_hi": s.hi,
                **{k: statistics.median(r.get(k, float("nan")) for r in mine) for k in MEASURES[1:]},
                "algbw_Bps": algbw(size, s.median),
                "busbw_Bps": busbw(size, s.median, n),
                "busbw_Bps_lo": busbw(size, s.hi or s.max, n),
                "busbw_Bps_hi": busbw(size, s.lo or s.min, n),
            }
        )
    return rows


FITTED = (("", "time_s"), ("cpu_", "cpu_s"), ("loaded_cpu_", "loaded_cpu_s"))  # fit.json's prefix, the row's key
SAID = {"time_s": "time", "cpu_s": "CPU time", "loaded_cpu_s": "computation taken under load"}


def judged(sizes: list[int], values: list[float], prefix: str = "", what: str = "time") -> dict:
    """One fit as fit.json holds it: alpha and beta where the fit is physical, else null and why not."""
    why = unphysical(sizes, values, what)
    f = fit(sizes, values) if why is None else None
    return {
        f"{prefix}alpha_s": f and f.alpha_s,
        f"{prefix}beta_s_per_byte": f and f.beta_s_per_byte,
        f"{prefix}physical": why is None,
        f"{prefix}why": why,
    }


def _fit_of(rows: list[dict]) -> dict:
    sizes = [r["size_bytes"] for r in rows]
    n = rows[0]["world_size"]
    out = {
        "sizes_bytes": sizes,
        "world_size": n,
        "nodes": rows[0]["nodes"],
        "link_rate": rows[0]["link_rate"],
        "link_mode": rows[0]["link_mode"],
    }
    for prefix, key in FITTED:
        values = [r[key] for r in rows]
        # NaN: not measured (the computation taken under load: CPU ranks only; CPU time: not by old commbenches)
        if all(v == v for v in values):
            out |= judged(sizes, values, prefix, SAID[key])
    # the bus bandwidth the large messages reach, of a physical fit only
    out["bus_bandwidth_Bps"] = Fit(out["alpha_s"], out["beta_s_per_byte"]).bus_bandwidth(n) if out["physical"] else None
    return out


def fits(rows: list[dict]) -> dict[str, dict]:
    """Per backend, the fit of its gradients sent as is, and under "compressed" those of each compression timed."""
    out: dict[str, dict] = {}
    for backend, compression in dict.fromkeys(series(r) for r in rows):
        f = _fit_of([r for r in rows if series(r) == (backend, compression)])
        if compression == "none":
            out[backend] = f | out.get(backend, {})
        else:
            out.setdefault(backend, {}).setdefault("compressed", {})[compression] = f
    return out


def _mb(bps: float | None) -> str:
    return "—" if bps is None else f"{bps / 1e6:.1f}"


def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1e3:.3f}"  # NaN: not measured (GPU ranks)


def _pair(f: dict, prefix: str) -> str:
    """A fit's cells: alpha ms, beta ns/byte; or that it is not physical, or not measured."""
    if f"{prefix}physical" not in f:
        return "—"
    if not f[f"{prefix}physical"]:
        return "not physical"
    return f"{f[f'{prefix}alpha_s'] * 1e3:.3f}, {f[f'{prefix}beta_s_per_byte'] * 1e9:.3f}"


def _fit_cells(f: dict) -> str:
    time = (
        f"{f['alpha_s'] * 1e3:.3f} | {f['beta_s_per_byte'] * 1e9:.3f}"
        if f["physical"]
        else "not physical | not physical"
    )
    return f"{time} | {_mb(f['bus_bandwidth_Bps'])} | {_pair(f, 'cpu_')} | {_pair(f, 'loaded_cpu_')} |"


def _every_fit(fitted: dict[str, dict]) -> list[tuple[str, dict]]:
    """(label, fit) of every backend and compression, in the table's order."""
    out = [(backend, f) for backend, f in fitted.items() if "alpha_s" in f]
    for backend, f in fitted.items():
        out += [(label(backend, c), cf) for c, cf in f.get("compressed", {}).items()]
    return out


def not_physical(fitted: dict[str, dict]) -> list[str]:
    """A line per fit that is not physical, those of one backend for one reason together: whose, of what, why."""
    lines = []
    for name, f in _every_fit(fitted):
        by_why: dict[str, list[str]] = {}
        for prefix, key in FITTED:
            if f.get(f"{prefix}physical") is False:
                by_why.setdefault(f[f"{prefix}why"], []).append(SAID[key])
        lines += [f"{name}: fit not physical ({', '.join(what)}): {why}" for why, what in by_why.items()]
    return lines


def load_said(recs: list[dict]) -> str:
    """The machine's load around the measurements, as measured (the first launch's start, the last one's end)."""
    loads = [r["machine_load"] for r in recs if r.get("machine_load")]
    if not loads or loads[0]["avg_1m_before"] is None:
        return "The machine's load was not recorded."
    return (
        f"The machine's 1-minute load average was {loads[0]['avg_1m_before']:.2f} before the first launch and "
        f"{loads[-1]['avg_1m_after']:.2f} after the last ({loads[0]['cores']} cores; it counts commbench's own "
        "processes while they ran; each launch's is in commbench.jsonl)."
    )


def markdown(rows: list[dict], fitted: dict[str, dict], command: str, recs: list[dict] | None = None) -> str:
    lines = [
        "# commbench",
        "",
        f"Built by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {available_cpus()} CPUs). "
        f"{load_said(recs or [])} algbw = S/t, busbw = algbw x 2(n-1)/n (nccl-tests); medians "
        f"over the repeats with their {stats.CI} where there are enough. MB/s are 10^6 bytes per second. "
        "CPU ms: the CPU time of the busiest rank (every thread of its process), with no load of commbench's own on "
        "its core. Taken under load: the computation the all-reduce took from a thread computing on the same core "
        "(CPU ranks). With a compression, S is the float32 gradient's bytes (half of them travel): its bandwidths "
        "are of gradient bytes.",
        "",
        "| backend | size | time ms (CI) | algbw MB/s | busbw MB/s | CPU ms | time under load ms | taken under load "
        "ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" ({r['time_s_lo'] * 1e3:.3f}-{r['time_s_hi'] * 1e3:.3f})" if r["time_s_lo"] is not None else ""
        lines.append(
            f"| {label(r['backend'], r['grad_compression'])} | {_size(r['size_bytes'])} | {r['time_s'] * 1e3:.3f}{ci} "
            f"| {_mb(r['algbw_Bps'])} | {_mb(r['busbw_Bps'])} | {_ms(r['cpu_s'])} | {_ms(r['loaded_time_s'])} | "
            f"{_ms(r['loaded_cpu_s'])} |"
        )
    lines += [
        "",
        "## Fit: t(S) = alpha + beta S",
        "",
        f"Physical only where it can be a latency and a bandwidth: at least {MIN_SIZES} sizes, beta > 0, alpha >= 0, "
        "no median at or below 0, and sizes on both sides of alpha/beta (docs/commbench.md).",
        "",
        "| backend | alpha (latency) ms | beta ns/byte | bus bandwidth MB/s (2(n-1)/(n beta)) | CPU: alpha ms, "
        "beta ns/byte | taken under load: alpha ms, beta ns/byte |",
        "|---|---|---|---|---|---|",
        *(f"| {name} | {_fit_cells(f)}" for name, f in _every_fit(fitted)),
    ]
    unfit = not_physical(fitted)
    if unfit:
        lines += ["", *(f"- {line}" for line in unfit)]
    return "\n".join(lines) + "\n"


def _about(n: float) -> str:
    """A size that is not a message's, to a tenth of its unit."""
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def _size(n: int) -> str:
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key in dict.fromkeys(series(r) for r in rows):
        mine = [r for r in rows if series(r) == key]
        xs = [r["size_bytes"] for r in mine]
        ys = [r["busbw_Bps"] / 1e6 for r in mine]
        lo = [y - r["busbw_Bps_lo"] / 1e6 for y, r in zip(ys, mine, strict=True)]
        hi = [r["busbw_Bps_hi"] / 1e6 - y for y, r in zip(ys, mine, strict=True)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label(*key))
    ax.set(xscale="log", xlabel="message size (bytes)", ylabel="busbw (MB/s), median", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write(recs: list[dict], out: Path, command: str) -> str:
    """Everything measured (summary.csv, commbench.md, busbw.png) and the fits (fit.json: valid JSON, a fit that is
    not physical null with why); returns the report's text."""
    rows = summarize(recs)
    fitted = fits(rows)
    with open(out / SUMMARY, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    write_json(out / FIT, fitted, indent=2, sort_keys=True)
    text = markdown(rows, fitted, command, recs)
    (out / "commbench.md").write_text(text)
    n, rate = rows[0]["world_size"], rows[0]["link_rate"]
    plot(rows, out / "busbw.png", f"all-reduce busbw, {rows[0]['nodes']} node(s), {n} ranks, link {rate}")
    return text
