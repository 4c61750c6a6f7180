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
    """What a commbench times: the backends, the message sizes, the topology and link, and how often."""

    backends: list[str]
    sizes: list[int]
    nodes: int
    nprocs: int  # processes per node
    link_rate: str
    link_mode: str
    repeats: int  # timed all-reduces per size, in one launch
    rounds: int  # launches of each backend
    timeout_s: float

    def configs(self) -> list[SweepConfig]:
        return [
            SweepConfig(
                task="commbench",
                backend=b,
                world_size=self.nodes * self.nprocs,
                threads=1,
                nodes=self.nodes,
                link_rate=self.link_rate,
                link_mode=self.link_mode,
            )
            for b in self.backends
        ]

    def program(self, backend: str, out_json: Path) -> list[str]:
        return [
            "-m",
            "distbench.scaling.worker",
            "--backend",
            backend,
            "--sizes",
            ",".join(map(str, self.sizes)),
            "--repeats",
            str(self.repeats),
            "--output",
            str(out_json),
        ]


def records(result: dict, config: SweepConfig, rnd: int) -> list[dict]:
    """The worker's times as one record per size and repeat."""
    n = result["world_size"]
    fields = {
        "backend": config.backend,
        "world_size": n,
        "nodes": config.nodes,
        "nprocs": config.nprocs,
        "link_rate": config.link_rate,
        "link_mode": config.link_mode,
        "launcher": result["launcher"],
        "round": rnd,
    }
    return [
        {
            **fields,
            "size_bytes": int(size),
            "repeat": repeat,
            "time_s": t,
            "cpu_s": cpu,
            "algbw_Bps": algbw(int(size), t),
            "busbw_Bps": busbw(int(size), t, n),
        }
        for size, times in result["times_s"].items()
        for repeat, (t, cpu) in enumerate(zip(times, result["cpu_s"][size], strict=True), 1)
    ]


def run(executor, bench: Bench, out: Path) -> list[dict]:
    """Every backend once per round (the order alternating by round); returns the records, also appended to
    DIR/commbench.jsonl."""
    configs = bench.configs()
    executor.check(configs)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    found = []
    for rnd in range(1, bench.rounds + 1):
        for config in configs if rnd % 2 else configs[::-1]:
            name = f"{config.backend}-r{rnd}"
            out_json = out / "runs" / f"{name}.json"
            print(f"commbench: {config.name()} round {rnd}: running", file=sys.stderr, flush=True)
            program = bench.program(config.backend, out_json)
            result = executor.run(config, [], out_json, out / "runs" / f"{name}.log", bench.timeout_s, program)
            if result["status"] != "ok":
                last = (result.get("error") or "no output").splitlines()[-1]
                raise UserError(f"commbench: {config.name()} failed: {last}")
            for rec in records(result, config, rnd):
                append_line(out / RECORDS, json.dumps(rec, sort_keys=True))
                found.append(rec)
    return found


def summarize(recs: list[dict]) -> list[dict]:
    """Per backend and size: the median time with its interval, and the bandwidths of the median."""
    rows = []
    keys = sorted({(r["backend"], r["size_bytes"]) for r in recs}, key=lambda k: (k[0], k[1]))
    for backend, size in keys:
        mine = [r for r in recs if (r["backend"], r["size_bytes"]) == (backend, size)]
        s = stats.summarize([r["time_s"] for r in mine])
        n = mine[0]["world_size"]
        rows.append(
            {
                "backend": backend,
                "size_bytes": size,
                "world_size": n,
                "nodes": mine[0]["nodes"],
                "link_rate": mine[0]["link_rate"],
                "link_mode": mine[0]["link_mode"],
                "repeats": len(mine),
                "time_s": s.median,
                "time_s_lo": s.lo,
                "time_s_hi": s.hi,
                "cpu_s": statistics.median(r.get("cpu_s", float("nan")) for r in mine),
                "algbw_Bps": algbw(size, s.median),
                "busbw_Bps": busbw(size, s.median, n),
                "busbw_Bps_lo": busbw(size, s.hi or s.max, n),
                "busbw_Bps_hi": busbw(size, s.lo or s.min, n),
            }
        )
    return rows


def fits(rows: list[dict]) -> dict[str, dict]:
    out = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        f = fit([r["size_bytes"] for r in mine], [r["time_s"] for r in mine])
        cpu = fit([r["size_bytes"] for r in mine], [max(r["cpu_s"], 1e-9) for r in mine])
        n = mine[0]["world_size"]
        out[backend] = {
            "alpha_s": f.alpha_s,
            "beta_s_per_byte": f.beta_s_per_byte,
            "cpu_alpha_s": cpu.alpha_s,  # the CPU time an all-reduce costs the busiest rank, fitted alike
            "cpu_beta_s_per_byte": cpu.beta_s_per_byte,
            "world_size": n,
            "nodes": mine[0]["nodes"],
            "link_rate": mine[0]["link_rate"],
            "link_mode": mine[0]["link_mode"],
            "bus_bandwidth_Bps": f.bus_bandwidth(n),
        }
    return out


def _mb(bps: float) -> str:
    return f"{bps / 1e6:.1f}"


def markdown(rows: list[dict], fitted: dict[str, dict], command: str) -> str:
    lines = [
        "# commbench",
        "",
        f"Built by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {available_cpus()} CPUs). "
        "algbw = S/t, busbw = algbw x 2(n-1)/n (nccl-tests); medians "
        f"over the repeats with their {stats.CI} where there are enough. MB/s are 10^6 bytes per second.",
        "",
        "| backend | size | time ms (CI) | algbw MB/s | busbw MB/s | CPU ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" ({r['time_s_lo'] * 1e3:.3f}-{r['time_s_hi'] * 1e3:.3f})" if r["time_s_lo"] is not None else ""
        lines.append(
            f"| {r['backend']} | {_size(r['size_bytes'])} | {r['time_s'] * 1e3:.3f}{ci} | "
            f"{_mb(r['algbw_Bps'])} | {_mb(r['busbw_Bps'])} | {r['cpu_s'] * 1e3:.3f} |"
        )
    lines += [
        "",
        "## Fit: t(S) = alpha + beta S",
        "",
        "| backend | alpha (latency) ms | beta ns/byte | bus bandwidth MB/s (2(n-1)/(n beta)) | CPU: alpha ms, "
        "beta ns/byte |",
        "|---|---|---|---|---|",
    ]
    for backend, f in fitted.items():
        lines.append(
            f"| {backend} | {f['alpha_s'] * 1e3:.3f} | {f['beta_s_per_byte'] * 1e9:.3f} | "
            f"{_mb(f['bus_bandwidth_Bps'])} | {f['cpu_alpha_s'] * 1e3:.3f}, {f['cpu_beta_s_per_byte'] * 1e9:.3f} |"
        )
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
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        xs = [r["size_bytes"] for r in mine]
        ys = [r["busbw_Bps"] / 1e6 for r in mine]
        lo = [y - r["busbw_Bps_lo"] / 1e6 for y, r in zip(ys, mine, strict=True)]
        hi = [r["busbw_Bps_hi"] / 1e6 - y for y, r in zip(ys, mine, strict=True)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=backend)
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
