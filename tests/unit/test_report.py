"""The report of a sweep (distbench/sweep/report.py) on synthetic records: tables, verdicts, noise, labels, plots."""

import csv
import json

import pytest

from distbench.sweep import report
from distbench.sweep.configuration import SweepConfig
from tests.helpers import synthetic_record, synthetic_sweep


def test_report_states_verdicts_noise_and_steps():
    records = synthetic_sweep(noise=0.01, drift=[1.0, 0.8, 1.2, 0.9, 1.1])
    text = report.markdown(records, [], ".")
    assert "horovod x2 is 0.80x ddp x2 (95 % CI 0." in text
    assert "ddp x2 is 1.6" in text and "x single x1 t1 (95 % CI 1.6" in text  # speed-up, paired with its round's
    assert "Each run: 60 global steps, the first 5 of them warm-up (not timed); 5 round(s)" in text
    assert "Reference single x1 t1: median" in text
    assert "Resolution:" in text and "Warning" not in text  # the 20 % drift cancels; 1 % noise resolves 5 %


def test_report_warns_when_the_machine_is_too_noisy():
    text = report.markdown(synthetic_sweep(noise=0.15, drift=[1.0] * 5), [], ".")
    assert "too noisy to resolve differences smaller than about" in text
    one_round = report.markdown(synthetic_sweep(noise=0.01, drift=[1.0]), [], ".")
    assert "fewer than 5 rounds" in one_round and "too few for an interval" in one_round


def test_summary_rows_pair_speedup_and_keep_failures():
    records = synthetic_sweep(noise=0.0, drift=[1.0, 0.5, 2.0, 1.5, 0.8])  # a drift of 4x between rounds, no noise
    records.append(synthetic_record("ddp", 2, 1, 6, 0.0, status="failed"))
    configs = report.configurations(records)
    ddp = next(c for c in configs if c.backend == "ddp")
    row = report.config_row(ddp, configs)
    assert row["speedup"] == pytest.approx(1.6) and row["speedup_lo"] == pytest.approx(1.6)  # drift cancelled
    assert row["scaling_efficiency"] == pytest.approx(0.8)
    assert (row["runs"], row["runs_ok"], row["error"]) == (6, 5, "error: it broke")
    assert row["samples_per_sec_min"] == pytest.approx(800.0) and row["samples_per_sec_max"] == pytest.approx(3200.0)


def test_plot_lines_never_join_different_thread_counts():
    configs = report.configurations(synthetic_sweep(noise=0.01, drift=[1.0, 1.0, 1.0]))
    series = report.plot_series(configs, "mnist", "throughput")
    assert [x for x, _ in series["single, 1 thread/proc"]] == [1]
    assert [x for x, _ in series["single, 2 threads/proc"]] == [1]  # a point of its own, not a vertical segment
    assert {label: [x for x, _ in pts] for label, pts in series.items()}["ddp, 1 thread/proc"] == [2]


def test_baseline_verdicts_match_configurations_between_sweeps():
    old = report.configurations(synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=1))
    same = report.configurations(synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=2))
    faster = report.configurations(
        [
            {**r, "samples_per_sec": r["samples_per_sec"] * 1.25}
            for r in synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=3)
        ]
    )
    assert all("no measurable difference" in v for v in report.baseline_verdicts(old, same))
    lines = report.baseline_verdicts(old, faster)
    assert any(v.startswith("mnist: ddp x2 (new) is 1.2") for v in lines), lines
    only_new = report.baseline_verdicts(old[:1], same)
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
    configs = report.configurations(records)
    assert [c.label for c in configs] == ["single x1 acc1", "single x1 acc4", "ddp x2 acc1 none", "ddp x2 acc4 fp16"]
    ddp_acc4 = configs[-1]
    assert report.reference_for(ddp_acc4, configs).label == "single x1 acc4"
    assert report.config_row(ddp_acc4, configs)["speedup"] == pytest.approx(1.8)
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
    assert report.memory_series(report.configurations(records), "mnist")["fsdp"] == [
        (1, 4.0 + 32 / MIB),
        (2, 2.0 + 32 / MIB),
    ]
    assert (tmp_path / "mnist-memory.png").stat().st_size > 0 and "mnist-memory.png" in text
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [int(r["params_bytes"]) for r in rows if r["backend"] == "fsdp"] == [MIB, MIB // 2]


def test_no_caveat_without_a_sharding_backend_or_on_a_gpu():
    ddp = [_with_memory("ddp", 2, rnd, MIB) for rnd in (1, 2)]
    on_gpu = [_with_memory("fsdp", 2, rnd, MIB, device="cuda:0") for rnd in (1, 2)]
    assert "gloo has no reduce-scatter" not in report.markdown(ddp + on_gpu, [], ".")
    old = [synthetic_record("ddp", 2, 1, rnd, 1000.0) for rnd in (1, 2)]  # records from before memory_per_rank
    assert "Memory per rank" not in report.markdown(old, [], ".")
