"""`run.py commbench`: each library's own all-reduce over message sizes, under its launcher, on simulated nodes and
shaped links (or a Slurm allocation), with nccl-tests' bandwidths and a latency-bandwidth fit.

Definitions (nccl-tests, doc/PERFORMANCE.md): for a message of S bytes all-reduced in t seconds over n ranks,
algbw = S / t, and busbw = algbw x 2(n-1)/n, the rate each rank's link carries in a ring all-reduce (it sends and
receives 2(n-1)/n of the message), comparable with the link's rate whatever n is. DeepSpeed's communication benchmark
calls 2S/t "throughput": a different number. The fit is t(S) = alpha + beta S over the sizes' medians, weighted by
1/t (`fit` says why); alpha is the latency, 2(n-1)/(n beta) the bus bandwidth the large messages reach.

Writes DIR/commbench.jsonl (one record per backend x size x repeat), DIR/summary.csv, DIR/fit.json (alpha and beta
per backend), DIR/commbench.md and DIR/busbw.png.
"""

from __future__ import annotations

import csv
import json
import platform
import statistics
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from distbench.config import available_cpus
from distbench.errors import UserError
from distbench.sweep import stats
from distbench.sweep.configuration import SweepConfig
from distbench.training.reporter import append_line

DEFAULT_SIZES = tuple(4096 * 4**i for i in range(8))  # 4 KiB to 64 MiB
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

    def bus_bandwidth(self, world_size: int) -> float:
        """Bytes per second on each link that large messages reach: 2(n-1)/(n beta)."""
        return 2 * (world_size - 1) / (world_size * self.beta_s_per_byte) if self.beta_s_per_byte > 0 else float("inf")


def fit(sizes: list[int], seconds: list[float]) -> Fit:
    """Least squares of t = alpha + beta S, each point weighted by 1/t.

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
    return Fit(max(0.0, mean_t - beta * mean_s), max(0.0, beta))


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


def records(result: dict, config: SweepConfig, rnd: int) -> list[dict]:
    """The worker's measurements as one record per size and repeat."""
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
    DIR/commbench.jsonl."""
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
            result = executor.run(config, [], out_json, out / "runs" / f"{name}.log", bench.timeout_s, program)
            if result["status"] != "ok":
                last = (result.get("error") or "no output").splitlines()[-1]
                raise UserError(f"commbench: {config.name()} failed: {last}")
            for rec in records(result, config, rnd):
                append_line(out / RECORDS, json.dumps(rec, sort_keys=True))
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


def _fit_of(rows: list[dict]) -> dict:
    sizes = [r["size_bytes"] for r in rows]
    f = fit(sizes, [r["time_s"] for r in rows])
    cpu = fit(sizes, [max(r["cpu_s"], 1e-9) for r in rows])
    n = rows[0]["world_size"]
    out = {
        "alpha_s": f.alpha_s,
        "beta_s_per_byte": f.beta_s_per_byte,
        "cpu_alpha_s": cpu.alpha_s,  # the CPU time an all-reduce costs the busiest rank, fitted alike
        "cpu_beta_s_per_byte": cpu.beta_s_per_byte,
        "world_size": n,
        "nodes": rows[0]["nodes"],
        "link_rate": rows[0]["link_rate"],
        "link_mode": rows[0]["link_mode"],
        "bus_bandwidth_Bps": f.bus_bandwidth(n),
    }
    if all(r["loaded_cpu_s"] == r["loaded_cpu_s"] for r in rows):  # measured (not NaN): CPU ranks
        loaded = fit(sizes, [max(r["loaded_cpu_s"], 1e-9) for r in rows])
        # the computation an all-reduce takes from a rank whose core also computes, fitted alike
        out |= {"loaded_cpu_alpha_s": loaded.alpha_s, "loaded_cpu_beta_s_per_byte": loaded.beta_s_per_byte}
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


def _mb(bps: float) -> str:
    return f"{bps / 1e6:.1f}"


def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1e3:.3f}"  # NaN: not measured (GPU ranks)


def _fit_cells(f: dict) -> str:
    loaded = (
        f"{f['loaded_cpu_alpha_s'] * 1e3:.3f}, {f['loaded_cpu_beta_s_per_byte'] * 1e9:.3f}"
        if "loaded_cpu_alpha_s" in f
        else "—"
    )
    return (
        f"{f['alpha_s'] * 1e3:.3f} | {f['beta_s_per_byte'] * 1e9:.3f} | {_mb(f['bus_bandwidth_Bps'])} | "
        f"{f['cpu_alpha_s'] * 1e3:.3f}, {f['cpu_beta_s_per_byte'] * 1e9:.3f} | {loaded} |"
    )


def markdown(rows: list[dict], fitted: dict[str, dict], command: str) -> str:
    lines = [
        "# commbench",
        "",
        f"Built by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {available_cpus()} CPUs). "
        "algbw = S/t, busbw = algbw x 2(n-1)/n (nccl-tests); medians "
        f"over the repeats with their {stats.CI} where there are enough. MB/s are 10^6 bytes per second. "
        "CPU ms: the CPU time of the busiest rank (every thread of its process) on an otherwise idle core. Taken "
        "under load: the computation the all-reduce took from a thread computing on the same core (CPU ranks). With "
        "a compression, S is the float32 gradient's bytes (half of them travel): its bandwidths are of gradient "
        "bytes.",
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
        "| backend | alpha (latency) ms | beta ns/byte | bus bandwidth MB/s (2(n-1)/(n beta)) | CPU: alpha ms, "
        "beta ns/byte | taken under load: alpha ms, beta ns/byte |",
        "|---|---|---|---|---|---|",
    ]
    for backend, f in fitted.items():
        if "alpha_s" in f:
            lines.append(f"| {backend} | {_fit_cells(f)}")
        for compression, c in f.get("compressed", {}).items():
            lines.append(f"| {label(backend, compression)} | {_fit_cells(c)}")
    return "\n".join(lines) + "\n"


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
    rows = summarize(recs)
    fitted = fits(rows)
    with open(out / SUMMARY, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / FIT).write_text(json.dumps(fitted, indent=2, sort_keys=True) + "\n")
    text = markdown(rows, fitted, command)
    (out / "commbench.md").write_text(text)
    n, rate = rows[0]["world_size"], rows[0]["link_rate"]
    plot(rows, out / "busbw.png", f"all-reduce busbw, {rows[0]['nodes']} node(s), {n} ranks, link {rate}")
    return text
