"""What `run.py atlas` writes and prints: atlas.json (every cell), atlas.md (the tables a plan quotes) and heatmaps
of each library's predicted efficiency and of the fastest library per cell."""

from __future__ import annotations

from pathlib import Path

from distbench.records import write_json


def write(atlas: dict, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    write_json(output / "atlas.json", atlas, indent=2, sort_keys=True)
    text = markdown(atlas)
    (output / "atlas.md").write_text(text)
    heatmaps(atlas, output)
    print(text.split("## Every cell")[0].rstrip())
    print(f"\natlas: {output / 'atlas.md'} (atlas.json, efficiency.png and fastest.png beside it)")


def _grid(atlas: dict) -> tuple[list[int], list[str], list[str]]:
    cells = atlas["cells"]
    nodes = sorted({c["nodes"] for c in cells})
    rates = list(dict.fromkeys(c["link_rate"] for c in cells))
    backends = [r["backend"] for r in cells[0]["rows"]]
    return nodes, rates, backends


def _cell(atlas: dict, n: int, rate: str) -> dict:
    return next(c for c in atlas["cells"] if c["nodes"] == n and c["link_rate"] == rate)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}"


def _measured(atlas: dict, backend: str, n: int, rate: str) -> dict | None:
    return next((m for m in atlas["checked"] if (m["backend"], m["nodes"], m["link_rate"]) == (backend, n, rate)), None)


def markdown(atlas: dict) -> str:
    nodes, rates, backends = _grid(atlas)
    nominal = [c for c in atlas["cells"] if not c["commbench"]]
    lines = [
        "# distbench atlas",
        "",
        f"Produced by `{atlas['command']}` on {atlas['created']} ({atlas['platform']}).",
        "",
        f"Computation: {atlas['computation']}; {atlas['nprocs']} process(es) per node, each at micro-batch "
        f"{atlas['micro_batch']} (global batch = micro-batch x processes). Each cell is `run.py project`'s "
        "prediction (docs/projection.md); efficiency = samples/s over (processes x one process's samples/s), "
        "with its 95 % interval.",
    ]
    if nominal:
        lines += [
            "",
            f"**{len(nominal)} of {len(atlas['cells'])} cells are at the link's nominal rate** (no latency, no CPU "
            "cost: no commbench measured that rate): read them as an upper bound.",
        ]
    lines += ["", "## Fastest library per cell", ""]
    lines += [f"| nodes \\ link | {' | '.join(rates)} |", "|---" * (len(rates) + 1) + "|"]
    for n in nodes:
        row = []
        for rate in rates:
            c = _cell(atlas, n, rate)
            if c["runner_up"] is None:
                row.append(c["fastest"])
                continue
            rng = f" ({c['lead_lo']:.2f}-{c['lead_hi']:.2f})" if c["lead_lo"] and c["lead_hi"] else ""
            verdict = "" if c["clear"] else ", within the intervals"
            row.append(f"{c['fastest']} {c['lead']:.2f}x {c['runner_up']}{rng}{verdict}")
        lines.append(f"| {n} | {' | '.join(row)} |")
    target = atlas["target_efficiency"]
    lines += [
        "",
        f"## The slowest link for {100 * target:.0f} % efficiency",
        "",
        "Nominal rates (no latency): the least a cluster's links must carry; measured links need more.",
        "",
        f"| library | {' | '.join(f'{n} nodes' for n in nodes)} |",
        "|---" * (len(nodes) + 1) + "|",
    ]
    for b in backends:
        need = atlas["rate_for_target"][b]
        lines.append(f"| {b} | {' | '.join(need[str(n)] or 'not reached' for n in nodes)} |")
    lines += ["", "## Efficiency % per library (predicted; measured by an emulated sweep where marked)", ""]
    for b in backends:
        lines += [f"### {b}", "", f"| nodes \\ link | {' | '.join(rates)} |", "|---" * (len(rates) + 1) + "|"]
        for n in nodes:
            row = []
            for rate in rates:
                r = next(x for x in _cell(atlas, n, rate)["rows"] if x["backend"] == b)
                lo, hi = _pct(r["scaling_efficiency_lo"]), _pct(r["scaling_efficiency_hi"])
                said = f"{_pct(r['scaling_efficiency'])} ({lo}-{hi})"
                if (m := _measured(atlas, b, n, rate)) is not None:
                    said += f", measured {_pct(m['efficiency'])} ({m['runs']} runs)"
                row.append(said)
            lines.append(f"| {n} | {' | '.join(row)} |")
        lines.append("")
    lines += ["## Every cell", "", "atlas.json holds every cell's prediction, with its warnings."]
    return "\n".join(lines) + "\n"


def heatmaps(atlas: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes, rates, backends = _grid(atlas)
    fig, axes = plt.subplots(1, len(backends), figsize=(3.2 * len(backends) + 1, 0.5 * len(nodes) + 2), squeeze=False)
    for ax, b in zip(axes[0], backends, strict=True):
        grid = [
            [
                next(x for x in _cell(atlas, n, rate)["rows"] if x["backend"] == b)["scaling_efficiency"]
                for rate in rates
            ]
            for n in nodes
        ]
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        for i, n in enumerate(nodes):
            for j, rate in enumerate(rates):
                text = _pct(grid[i][j])
                if (m := _measured(atlas, b, n, rate)) is not None:
                    text += f"\n(m {_pct(m['efficiency'])})"
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=7, color="white" if grid[i][j] < 0.6 else "black"
                )
        ax.set_xticks(range(len(rates)), rates, rotation=45, fontsize=7)
        ax.set_yticks(range(len(nodes)), nodes, fontsize=7)
        ax.set_title(f"{b}: efficiency %", fontsize=8)
        ax.set_xlabel("link", fontsize=7)
    axes[0][0].set_ylabel("nodes", fontsize=7)
    fig.tight_layout()
    fig.savefig(output / "efficiency.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(1.2 * len(rates) + 2, 0.5 * len(nodes) + 2))
    index = {b: i for i, b in enumerate(backends)}
    grid = [[index[_cell(atlas, n, rate)["fastest"]] for rate in rates] for n in nodes]
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto", origin="lower")
    for i, n in enumerate(nodes):
        for j, rate in enumerate(rates):
            c = _cell(atlas, n, rate)
            lead = "" if c["lead"] is None else f"\n{c['lead']:.2f}x{'' if c['clear'] else '?'}"
            ax.text(j, i, f"{c['fastest']}{lead}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(rates)), rates, rotation=45, fontsize=7)
    ax.set_yticks(range(len(nodes)), nodes, fontsize=7)
    ax.set_title("fastest library (lead over the next; ?: within the intervals)", fontsize=8)
    fig.tight_layout()
    fig.savefig(output / "fastest.png", dpi=120)
    plt.close(fig)
