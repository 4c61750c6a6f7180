"""What a commbench's records (commbench.jsonl) say, and the files that say it: per backend, compression and size the
median time with its interval and bandwidths (summary.csv), per backend the fits (fit.json: alpha and beta, or why
not), the report (commbench.md) and the plot of busbw against message size (busbw.png)."""

from __future__ import annotations

import csv
import platform
import statistics
from datetime import UTC, datetime
from pathlib import Path

from distbench.machine import available_cpus
from distbench.planning.bandwidth import MIN_SIZES, Fit, algbw, busbw, fit, size_text, unphysical
from distbench.records import write_json
from distbench.sweep import stats

RECORDS, SUMMARY, FIT = "commbench.jsonl", "summary.csv", "fit.json"  # the files of a commbench folder
# per repeat; the loaded two on CPU ranks only, the time as measured under a dilation only (time_s is divided back)
MEASURES = ("time_s", "cpu_s", "loaded_time_s", "loaded_cpu_s", "dilated_time_s")
# fit.json's prefix, the row's key: the time (under load: DeepSpeed's on CPU nodes, timeline.TIMED_UNDER_LOAD), the
# CPU time, and the computation taken under load
FITTED = (("", "time_s"), ("loaded_", "loaded_time_s"), ("cpu_", "cpu_s"), ("loaded_cpu_", "loaded_cpu_s"))
SAID = {
    "time_s": "time",
    "loaded_time_s": "time under load",
    "cpu_s": "CPU time",
    "loaded_cpu_s": "computation taken under load",
}


def series(r: dict) -> tuple[str, str]:
    """What one line of the results is: a backend's collective (`deepspeed`: its gradients' all-reduce, `deepspeed
    all-gather`: its parameters' all-gather; COLLECTIVES) and how its gradients travel (records from before
    compression or the all-gather were timed: an all-reduce, as is)."""
    collective = collective_of(r)
    named = r["backend"] if collective == "all-reduce" else f"{r['backend']} {collective}"
    return named, r.get("grad_compression", "none")


def collective_of(r: dict) -> str:
    """The collective a record or summary row timed (all-reduce for those from before another was timed)."""
    return r.get("collective", "all-reduce")


def label(backend: str, compression: str) -> str:
    """A series as the tables and the plot name it: `ddp`, `ddp fp16`."""
    return backend if compression == "none" else f"{backend} {compression}"


def summarize(recs: list[dict]) -> list[dict]:
    """Per backend, compression and size: the median time with its interval, the bandwidths of the median, and the
    medians of the CPU times."""
    rows = []
    keys = sorted({(*series(r), r["size_bytes"]) for r in recs})
    for backend, compression, size in keys:
        mine = [r for r in recs if (*series(r), r["size_bytes"]) == (backend, compression, size)]
        s = stats.summarize([r["time_s"] for r in mine])
        n, collective = mine[0]["world_size"], collective_of(mine[0])
        rows.append(
            {
                "backend": mine[0]["backend"],
                "collective": collective,
                "grad_compression": compression,
                "size_bytes": size,
                "world_size": n,
                "nodes": mine[0]["nodes"],
                "link_rate": mine[0]["link_rate"],
                "link_mode": mine[0]["link_mode"],
                "dilation": mine[0].get("dilation", 1.0),
                "repeats": len(mine),
                "time_s": s.median,
                "time_s_lo": s.lo,
                "time_s_hi": s.hi,
                **{k: statistics.median(r.get(k, float("nan")) for r in mine) for k in MEASURES[1:]},
                "algbw_Bps": algbw(size, s.median),
                "busbw_Bps": busbw(size, s.median, n, collective),
                "busbw_Bps_lo": busbw(size, s.hi or s.max, n, collective),
                "busbw_Bps_hi": busbw(size, s.lo or s.min, n, collective),
            }
        )
    return rows


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
        "dilation": rows[0]["dilation"],
    }
    for prefix, key in FITTED:
        values = [r[key] for r in rows]
        # NaN: not measured (the computation taken under load: CPU ranks only; CPU time: not by old commbenches)
        if all(v == v for v in values):
            out |= judged(sizes, values, prefix, SAID[key])
    # the bus bandwidth the large messages reach, of a physical fit only
    line = Fit(out["alpha_s"], out["beta_s_per_byte"])
    out["bus_bandwidth_Bps"] = line.bus_bandwidth(n, collective_of(rows[0])) if out["physical"] else None
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
    cells = (_pair(f, prefix) for prefix in ("loaded_", "cpu_", "loaded_cpu_"))
    return f"{time} | {_mb(f['bus_bandwidth_Bps'])} | {' | '.join(cells)} |"


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


def dilation_said(rows: list[dict]) -> str:
    """What a dilated commbench's times are ("": not dilated)."""
    k = rows[0]["dilation"]
    if k == 1.0:
        return ""
    return (
        f" At dilation {k:g} (--dilation): the links shaped {k:g} times slower than {rows[0]['link_rate']}, every time "
        "divided back by it (as measured: `dilated_time_s` in commbench.jsonl), nothing timed under load (the "
        "cluster it emulates computes on devices: docs/emulation.md)."
    )


def markdown(rows: list[dict], fitted: dict[str, dict], command: str, recs: list[dict] | None = None) -> str:
    """commbench.md: how it was built and what its numbers are, the table of every size's measurements, the table of
    the fits and a line per fit that is not physical."""
    lines = [
        "# commbench",
        "",
        f"Built by `{command}` on {datetime.now(UTC).date()} ({platform.platform()}, {available_cpus()} CPUs). "
        f"{load_said(recs or [])}{dilation_said(rows)} algbw = S/t, busbw = algbw x 2(n-1)/n for an all-reduce, "
        "x (n-1)/n for an all-gather of S bytes in all (nccl-tests); medians "
        f"over the repeats with their {stats.CI} where there are enough. MB/s are 10^6 bytes per second. "
        "CPU ms: the CPU time of the busiest rank (every thread of its process), with no load of commbench's own on "
        "its core. Taken under load: the computation the all-reduce took from a thread computing on the same core "
        "(CPU ranks). With a compression, S is the float32 gradient's bytes (half of them travel): its bandwidths "
        "are of gradient bytes.",
        "",
        "| backend | size | time ms (CI) | algbw MB/s | busbw MB/s | CPU ms | time under load ms | taken under load "
        "ms |",
        "|---|---|---|---|---|---|---|---|",
        *map(_size_row, rows),
        "",
        "## Fit: t(S) = alpha + beta S",
        "",
        f"Physical only where it can be a latency and a bandwidth: at least {MIN_SIZES} sizes, beta > 0, alpha >= 0, "
        "no median at or below 0, and sizes on both sides of alpha/beta (docs/commbench.md).",
        "",
        "| backend | alpha (latency) ms | beta ns/byte | bus bandwidth MB/s (2(n-1)/(n beta); all-gather: "
        "(n-1)/(n beta)) | time under load: alpha ms, beta ns/byte | CPU: alpha ms, beta ns/byte | taken under load: "
        "alpha ms, beta ns/byte |",
        "|---|---|---|---|---|---|---|",
        *(f"| {name} | {_fit_cells(f)}" for name, f in _every_fit(fitted)),
    ]
    unfit = not_physical(fitted)
    if unfit:
        lines += ["", *(f"- {line}" for line in unfit)]
    return "\n".join(lines) + "\n"


def _size_row(r: dict) -> str:
    """One size's row of the measurements' table."""
    ci = f" ({r['time_s_lo'] * 1e3:.3f}-{r['time_s_hi'] * 1e3:.3f})" if r["time_s_lo"] is not None else ""
    return (
        f"| {label(*series(r))} | {size_text(r['size_bytes'])} | {r['time_s'] * 1e3:.3f}{ci} "
        f"| {_mb(r['algbw_Bps'])} | {_mb(r['busbw_Bps'])} | {_ms(r['cpu_s'])} | {_ms(r['loaded_time_s'])} | "
        f"{_ms(r['loaded_cpu_s'])} |"
    )


def plot(rows: list[dict], path: Path, title: str) -> None:
    """busbw against message size, a line per backend and compression, with each median's interval."""
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
