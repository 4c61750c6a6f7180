"""The benchmarks' tables and sections, from records or stand-in runners (no launches)."""

import json

import pytest


def test_knobs_benchmark_table_pairs_each_setting_with_the_plain_run(tmp_path):
    from benchmarks.knobs import table

    lines = []
    for rnd in (1, 2, 3, 4, 5):
        truth = (
            ("single", 1, 1, "none", 1000, 0),
            ("single", 1, 4, "none", 700, 0),
            ("ddp", 2, 1, "none", 1600, 1.2e6),
            ("ddp", 2, 4, "fp16", 1200 + rnd, 6e5),
        )
        for backend, world, acc, comp, sps, sent in truth:
            lines.append(
                json.dumps(
                    {
                        "task": "mnist",
                        "backend": backend,
                        "world_size": world,
                        "threads_per_process": 1,
                        "round": rnd,
                        "accumulate": acc,
                        "grad_compression": comp,
                        "status": "ok",
                        "samples_per_sec": sps,
                        "written_bytes_per_step": sent,
                        "final_loss": 0.3,
                        "step_time_ms": {"p50": 1, "p90": 2},
                        "peak_rss_mb": 1,
                        "eval_accuracy": 0.9,
                        "eval_count": 500,
                        "steps": 10,
                        "command": "x",
                    }
                )
            )
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    rows = table(tmp_path)
    assert rows[2].startswith("| ddp | 1 | none | 1600 (1600-1600) | — | 0.3000 | 1,200,000 | 5/5 |")
    (tmp_path / "few").mkdir()
    (tmp_path / "few" / "results.jsonl").write_text("\n".join(lines[: 3 * 4]) + "\n")  # 3 rounds only
    few = table(tmp_path / "few")
    assert "| ddp | 1 | none | 1600 (min-max 1600-1600) |" in few[2] and "too few for an interval" in few[3]
    assert "acc4 fp16 is 0.75x plain (95 % CI 0.75-0.75)" in rows[3] and "| 600,000 |" in rows[3]
    assert len(rows) == 4  # single is the compare reference, not a row of this table


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_same_pinning_form_alternates_and_pins_both_sides_alike(tmp_path, monkeypatch):
    """The --same-pinning form's rounds, with its two runners recorded instead of launched (both run for real
    elsewhere: the pinned loops in benchmarks/test_scaling.py, distbench --no-pin-cores in test_equivalence.py):
    each round runs both sides unpinned and pinned, the side first alternates, and the ratios are distbench /
    hand-written within a round."""
    from typer.testing import CliRunner

    from benchmarks import overhead

    calls, speeds = [], iter(range(1000, 2000, 100))
    monkeypatch.setattr(
        overhead, "hand_written", lambda b, n, steps, threads, extra=(): calls.append(("hand", extra)) or next(speeds)
    )
    monkeypatch.setattr(
        overhead,
        "distbench_run",
        lambda b, n, steps, threads, tmp, args=(): (
            calls.append(("distbench", args)) or {"samples_per_sec": next(speeds)}
        ),
    )
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## Other\n\nkept\n")
    app = overhead.typer.Typer()
    app.command()(overhead.main)
    result = CliRunner().invoke(
        app,
        [*"--same-pinning --backends ddp --world-sizes 1,2 --pairs 2 --steps 12 --out".split(), str(out)],
    )
    assert result.exit_code == 0, result.output
    unpinned, pinned = ("hand", ()), ("hand", ("--pin",))
    ours, ours_pinned = ("distbench", ("--no-pin-cores",)), ("distbench", ())
    assert calls == [unpinned, ours, pinned, ours_pinned, ours, unpinned, ours_pinned, pinned]  # x1 skipped
    text = out.read_text()
    assert "## Other\n\nkept" in text and "## Adapter overhead at the same pinning (MNIST)" in text
    # speeds in call order: round 1 1000 1100 1200 1300, round 2 (distbench first) 1400 1500 1600 1700
    assert "| ddp | 2 | neither | 1250 | 1250 | **1.017** | 1.100 0.933 |" in text
    assert "| ddp | 2 | both pinned | 1450 | 1450 | **1.012** | 1.083 0.941 |" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_horovod_synthetic_table_compares_at_the_same_pinning():
    from benchmarks.horovod_synthetic import table

    rows = [(10.0, 9.9, 12.0, 12.6), (8.0, 8.4, 11.0, 11.0), (9.0, 9.0, 10.0, 10.5)]
    lines = table(rows)
    assert lines[2].startswith("| unpinned:") and "**1.000** | 0.990 1.050 1.000 |" in lines[2]
    assert lines[3].startswith("| pinned:") and "**1.050** | 1.050 1.000 1.050 |" in lines[3]
    assert "| 9.00 | 11.00 |" in lines[4]  # pinning's effect on the script: medians unpinned, pinned


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_a_section_is_replaced_not_appended():
    from benchmarks.harness import replace_section

    doc = "# P\n\n## A\n\nold\n\n## B\n\nb\n"
    once = replace_section(doc, "## A", ["## A", "", "new", ""])
    assert once == "# P\n\n## A\n\nnew\n\n## B\n\nb\n"
    assert replace_section(once, "## A", ["## A", "", "new", ""]) == once
    assert replace_section("# P\n", "## C", ["## C", "", "c"]) == "# P\n\n## C\n\nc"
    # a subsection whose title contains the header ("### A ..." holds "## A") is not the section: it is kept
    sub = "# P\n\n### A lost node: more\n\nkept\n\n## B\n\nb\n"
    assert replace_section(sub, "## A lost node", ["## A lost node", "", "t"]) == sub + "\n## A lost node\n\nt"


def test_fsdp_benchmark_section_gives_each_state_against_x1_and_the_caveat(tmp_path):
    from benchmarks.fsdp import main
    from tests.helpers import synthetic_record

    mib = 2**20
    lines = []
    for rnd in (1, 2, 3, 4, 5):
        for backend, world, params in (("single", 1, mib), ("ddp", 2, mib), ("fsdp", 1, mib), ("fsdp", 2, mib // 2)):
            rec = synthetic_record(backend, world, 1, rnd, 1000.0 * world**0.5 + rnd)
            counts = {"params_bytes": params, "grads_bytes": params, "optimizer_bytes": 2 * params}
            rec |= {"memory_per_rank": counts, "environment": {"device": "cpu"}, "global_batch_size": 64}
            lines.append(json.dumps(rec))
    sweep = tmp_path / "mnist"
    sweep.mkdir()
    (sweep / "results.jsonl").write_text("\n".join(lines) + "\n")
    (sweep / "sweep.json").write_text(
        json.dumps({"command": "compare ...", "started_at": "t", "repeats": 5, "order_seed": 0})
    )
    out = tmp_path / "fsdp.md"
    out.write_text("# FSDP\n\nkept\n\n## mnist\n\nold\n")
    main([sweep], out)
    text = out.read_text()
    assert "kept" in text and "old" not in text  # only its own section replaced
    # parameters, gradients, optimizer, their sum, and the sum over the same backend's x1
    assert "| fsdp x2 | 0.500 | 0.500 | 1.000 | 2.000 | 0.500 | 900 |" in text
    assert "| ddp x2 | 1.000 | 1.000 | 2.000 | 4.000 | — | 900 |" in text  # no ddp x1 in this sweep
    assert "On CPU (fsdp): gloo has no reduce-scatter" in text and "fsdp x2 vs ddp x2" in text


def test_faults_benchmark_table_pairs_each_fault_with_the_same_round_without_it():
    """benchmarks/faults.py's restart table from stand-in runs: a library that continued (its costs, its goodput over
    the fault-free run of the same round, whether it ended on the same run) and one whose job ended."""
    from benchmarks.faults import restart_table

    def record(goodput: float | None = None) -> dict:
        rec = {"steps": 30, "global_batch_size": 64, "wall_time_s": 10.0, "param_checksum": 1.0, "loss_history": [1.0]}
        cost = {"first_noticed_s": 0.05, "restarted_s": 0.3, "recovered_s": 4.0, "steps_redone": 5}
        return {**rec, "fault": {**cost, "goodput_samples_per_sec": goodput} if goodput else None}

    def run(backend: str, fault: str, rnd: int, ok: bool = True, **more) -> dict:
        launcher = "torchrun" if backend == "ddp" else "horovodrun"
        return {"backend": backend, "fault": fault, "launcher": launcher, "ok": ok, "round": rnd, **more}

    runs = []
    for rnd in (1, 2):
        runs += [run("ddp", "none", rnd, record=record()), run("horovod", "none", rnd, record=record())]
        runs += [run("ddp", f, rnd, record=record(96.0 * rnd)) for f in ("kill:1@15", "hang:1@15")]
        runs += [run("horovod", f, rnd, ok=False, ended_s=8.0 + rnd) for f in ("kill:1@15", "hang:1@15")]
    lines = restart_table(runs, 2, 30, ["ddp", "horovod"])
    rows = [line for line in lines if line.startswith("| ddp") or line.startswith("| horovod")]
    assert rows[0] == (
        "| ddp | torchrun | `kill:1@15` | 2 of 2 | — | 0.05 | 0.30 | 4.0 | 5 | 0.75 (0.50-1.00) "
        "| 2 of 2 (bit for bit) |"
    )
    assert rows[2] == "| horovod | horovodrun | `kill:1@15` | 0 of 2 | 9.5 (9.0-10.0) | — | — | — | — | — | — |"
    assert "--libraries ddp,horovod" in lines[2]
