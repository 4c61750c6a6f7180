"""The statistics of repeated runs and the report built on them, on synthetic records of known distributions."""

import numpy as np
import pytest

from distbench import report, stats
from distbench.compare import round_orders


def test_bootstrap_interval_of_five_is_their_min_max():
    """Documented property (docs/statistics.md): with 5 values the 95 % interval of the median is min-max."""
    s = stats.summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (s.median, s.lo, s.hi, s.min, s.max, s.n) == (3.0, 1.0, 5.0, 1.0, 5.0, 5)
    assert stats.summarize([1.0, 2.0, 3.0, 4.0]).has_interval is False  # too few for a 95 % interval
    assert stats.summarize([]) is None


def _paired(true_ratio: float, noise: float, repeats: int, rng, drift=None) -> tuple[dict, dict]:
    """Per-round samples/s of a reference A (100) and B (true_ratio x 100), each with its own relative noise, and a
    round-wide drift multiplying both sides of a round."""
    drift = drift if drift is not None else [1.0] * repeats
    a = {r: 100.0 * drift[r] * (1 + rng.normal(0, noise)) for r in range(repeats)}
    b = {r: 100.0 * true_ratio * drift[r] * (1 + rng.normal(0, noise)) for r in range(repeats)}
    return a, b


def _called_different(true_ratio: float, seed: int) -> bool:
    a, b = _paired(true_ratio, 0.05, 5, np.random.default_rng(seed))
    return stats.distinguishable(stats.summarize(stats.paired_ratios(b, a)))


def test_a_true_20_percent_difference_with_5_percent_noise_is_distinguishable():
    assert _called_different(1.2, seed=0)
    assert sum(_called_different(1.2, seed) for seed in range(200)) >= 0.95 * 200  # power, not one lucky draw
    a, b = _paired(1.2, 0.05, 5, np.random.default_rng(0))
    text = stats.verdict("horovod x2", "ddp x2", stats.summarize(stats.paired_ratios(b, a)))
    assert text.startswith("horovod x2 is 1.") and "x ddp x2 (95 % CI 1." in text


def test_a_1_percent_difference_with_5_percent_noise_is_no_measurable_difference():
    assert not _called_different(1.01, seed=0)
    assert sum(_called_different(1.01, seed) for seed in range(200)) <= 0.15 * 200
    a, b = _paired(1.01, 0.05, 5, np.random.default_rng(0))
    assert "no measurable difference (0." in stats.verdict("b", "a", stats.summarize(stats.paired_ratios(b, a)))


def test_paired_ratios_cancel_a_drift_injected_into_both_sides_of_a_round():
    drift = [1.0, 0.6, 1.4, 0.75, 1.25]  # the machine slows and speeds up by far more than the difference
    a, b = _paired(0.9, 0.005, 5, np.random.default_rng(1), drift)
    paired = stats.summarize(stats.paired_ratios(b, a))
    assert paired.lo > 0.87 and paired.hi < 0.93 and stats.distinguishable(paired)
    # the same numbers unpaired: the drift swamps the difference
    unpaired = stats.ratio_of_medians(list(b.values()), list(a.values()))
    assert not stats.distinguishable(unpaired)


def test_too_few_rounds_give_no_verdict_of_difference():
    text = stats.verdict("ddp x2", "single x1", stats.summarize([1.4]))
    assert "too few for an interval" in text and "--repeats" in text


def test_round_orders_are_shuffled_per_round_from_the_seed():
    orders = round_orders(6, 5, seed=3)
    assert all(sorted(o) == list(range(6)) for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not the same order every round
    assert orders == round_orders(6, 5, seed=3) and orders != round_orders(6, 5, seed=4)
    assert round_orders(4, 1, seed=3) == [[0, 1, 2, 3]]  # one round: as planned


# ---- the report on synthetic sweeps ----------------------------------------------------------------
def _record(backend: str, world: int, threads: int, rnd: int, sps: float, status: str = "ok") -> dict:
    rec = {"task": "mnist", "backend": backend, "world_size": world, "threads_per_process": threads, "round": rnd,
           "status": status, "command": f"run {backend} x{world}"}  # fmt: skip
    if status != "ok":
        return {**rec, "error": "boom\nerror: it broke"}
    return {**rec, "samples_per_sec": sps, "step_time_ms": {"p50": 10.0, "p90": 12.0},
            "step_breakdown_ms": {"data_ms": 1.0, "forward_backward_ms": 7.0, "optimizer_ms": 2.0},
            "startup_s": 3.0, "launch_to_first_step_s": 5.0, "peak_rss_mb": 900.0, "final_loss": 0.1,
            "eval_accuracy": 0.95, "eval_count": 500, "steps": 60, "warmup_steps": 5, "epochs": 1.0,
            "loss_history": [1.0, 0.5, 0.1], "environment": {"torch": "x"}}  # fmt: skip


def _sweep(noise: float, drift: list[float], horovod_ratio: float = 0.8, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    truth = (("single", 1, 1, 1000.0), ("single", 1, 2, 1600.0), ("ddp", 2, 1, 1600.0),
             ("horovod", 2, 1, 1600.0 * horovod_ratio))  # fmt: skip
    records = []
    for rnd, d in enumerate(drift, 1):
        for backend, world, threads, true in truth:
            records.append(_record(backend, world, threads, rnd, true * d * (1 + rng.normal(0, noise))))
    return records


def test_report_states_verdicts_noise_and_steps():
    records = _sweep(noise=0.01, drift=[1.0, 0.8, 1.2, 0.9, 1.1])
    text = report.markdown(records, [], ".")
    assert "horovod x2 is 0.80x ddp x2 (95 % CI 0." in text
    assert "ddp x2 is 1.6" in text and "x single x1 t1 (95 % CI 1.6" in text  # speed-up, paired with its round's
    assert "Each run: 60 global steps, the first 5 of them warm-up (not timed); 5 round(s)" in text
    assert "Reference single x1 t1: median" in text
    assert "Resolution:" in text and "Warning" not in text  # the 20 % drift cancels; 1 % noise resolves 5 %


def test_report_warns_when_the_machine_is_too_noisy():
    text = report.markdown(_sweep(noise=0.15, drift=[1.0] * 5), [], ".")
    assert "too noisy to resolve differences smaller than about" in text
    one_round = report.markdown(_sweep(noise=0.01, drift=[1.0]), [], ".")
    assert "fewer than 5 rounds" in one_round and "too few for an interval" in one_round


def test_summary_rows_pair_speedup_and_keep_failures():
    records = _sweep(noise=0.0, drift=[1.0, 0.5, 2.0, 1.5, 0.8])  # a drift of 4x between rounds, no noise
    records.append(_record("ddp", 2, 1, 6, 0.0, status="failed"))
    configs = report.configurations(records)
    ddp = next(c for c in configs if c.backend == "ddp")
    row = report.config_row(ddp, configs)
    assert row["speedup"] == pytest.approx(1.6) and row["speedup_lo"] == pytest.approx(1.6)  # drift cancelled
    assert row["scaling_efficiency"] == pytest.approx(0.8)
    assert (row["runs"], row["runs_ok"], row["error"]) == (6, 5, "error: it broke")
    assert row["samples_per_sec_min"] == pytest.approx(800.0) and row["samples_per_sec_max"] == pytest.approx(3200.0)


def test_plot_lines_never_join_different_thread_counts():
    configs = report.configurations(_sweep(noise=0.01, drift=[1.0, 1.0, 1.0]))
    series = report.plot_series(configs, "mnist", "throughput")
    assert [x for x, _ in series["single, 1 thread/proc"]] == [1]
    assert [x for x, _ in series["single, 2 threads/proc"]] == [1]  # a point of its own, not a vertical segment
    assert {label: [x for x, _ in pts] for label, pts in series.items()}["ddp, 1 thread/proc"] == [2]


def test_baseline_verdicts_match_configurations_between_sweeps():
    old = report.configurations(_sweep(noise=0.02, drift=[1.0] * 5, seed=1))
    same = report.configurations(_sweep(noise=0.02, drift=[1.0] * 5, seed=2))
    faster = report.configurations([{**r, "samples_per_sec": r["samples_per_sec"] * 1.25}
                                    for r in _sweep(noise=0.02, drift=[1.0] * 5, seed=3)])  # fmt: skip
    assert all("no measurable difference" in v for v in report.baseline_verdicts(old, same))
    lines = report.baseline_verdicts(old, faster)
    assert any(v.startswith("mnist: ddp x2 (new) is 1.2") for v in lines), lines
    only_new = report.baseline_verdicts(old[:1], same)
    assert any("not in both sweeps" in v for v in only_new)


def test_labels_show_the_axes_that_vary_and_speedup_pairs_the_same_accumulation():
    records = []
    truth = (("single", 1, 1, "none", 1000.0), ("single", 1, 4, "none", 500.0), ("ddp", 2, 1, "none", 1600.0),
             ("ddp", 2, 4, "fp16", 900.0))  # fmt: skip
    for rnd in (1, 2, 3):
        for backend, world, acc, comp, sps in truth:
            records.append({**_record(backend, world, 1, rnd, sps), "accumulate": acc, "grad_compression": comp})
    configs = report.configurations(records)
    assert [c.label for c in configs] == ["single x1 acc1", "single x1 acc4", "ddp x2 acc1 none", "ddp x2 acc4 fp16"]
    ddp_acc4 = configs[-1]
    assert report.reference_for(ddp_acc4, configs).label == "single x1 acc4"
    assert report.config_row(ddp_acc4, configs)["speedup"] == pytest.approx(1.8)
    old = [{k: v for k, v in r.items() if k not in ("accumulate", "grad_compression")} for r in records[:1]]
    assert report.config_key(old[0])[-2:] == (1, "none")  # records from before the knobs: their defaults


def test_report_baseline_command_writes_the_verdicts(tmp_path):
    """`run.py report --baseline OLD NEW` end to end, on sweep folders of synthetic records."""
    import json
    import sys

    from tests.helpers import child_env, run_cmd

    for name, scale, seed in (("old", 1.0, 1), ("new", 1.3, 2)):
        folder = tmp_path / name
        folder.mkdir()
        records = [{**r, "samples_per_sec": r["samples_per_sec"] * scale}
                   for r in _sweep(noise=0.02, drift=[1.0] * 5, seed=seed)]  # fmt: skip
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = run_cmd([sys.executable, "run.py", "report", "--baseline", str(tmp_path / "old"), str(tmp_path / "new")],
                   timeout=120, env=child_env(tmp_path))  # fmt: skip
    text = (tmp_path / "new" / "report.md").read_text()
    assert "## Against the baseline sweep" in text and "mnist: ddp x2 (new) is 1.3" in text
    assert "x ddp x2 (baseline) (95 % CI 1.2" in text and proc.stdout.startswith("# distbench comparison")
    missing = run_cmd([sys.executable, "run.py", "report", "--baseline", str(tmp_path / "nope"), str(tmp_path / "new")],
                      timeout=60, env=child_env(tmp_path), expect_rc=2)  # fmt: skip
    assert "holds no results.jsonl" in missing.stderr


def test_report_of_a_sweep_interrupted_before_any_run(tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    text = report.write_report([tmp_path], tmp_path)
    assert text.startswith("# distbench comparison") and (tmp_path / "summary.csv").is_file()


def test_an_interval_just_below_1_is_not_printed_as_reaching_it():
    ratio = stats.Summary(0.82, 0.74, 0.998, 0.74, 0.998, 3)
    assert stats.verdict("a", "b", ratio) == "a is 0.82x b (95 % CI 0.740-0.998)"
    assert stats.Summary(1.0, 0.97, 1.04, 0.97, 1.04, 5).interval() == "0.97-1.04"
