"""Smoke tests of the benchmark scripts, so they do not rot. No speed assertions: only that they run
end to end and write their tables."""

import json
import os
import sys

import pytest

from tests.helpers import ROOT, child_env, run_cmd

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(600)]


@pytest.mark.parametrize("backend", ["ddp", "accelerate", "horovod"])
def test_a_pinned_hand_written_loop_runs_on_its_local_ranks_cores_in_step(tmp_path, backend):
    """Each loop pins as distbench does, and trains through its library's wrapper: its ranks end with the same
    parameters (the DDP and Accelerate loops once called the module under the wrapper and exchanged nothing)."""
    from backends import REGISTRY
    from distbench.config import available_cpus
    from distbench.launch import local_argv, resolve

    threads = max(1, available_cpus() // 2)
    program = ["-m", f"benchmarks.handwritten.{backend}_loop", "--steps", "8", "--threads", str(threads), "--pin"]
    proc = run_cmd(resolve(local_argv(REGISTRY[backend].launchers[0], program, 2)), timeout=200,
                   env=child_env(tmp_path), cwd=ROOT)  # fmt: skip
    line = next(line for line in reversed(proc.stdout.splitlines()) if "{" in line)
    result = json.loads(line[line.index("{") :])
    assert result["cores"] == sorted(os.sched_getaffinity(0))[:threads]  # rank 0's
    assert result["rank_spread"] == 0.0  # the gradients were exchanged: every rank ends with the same parameters


def test_overhead_benchmark_writes_its_mnist_sections(tmp_path):
    """The MNIST form rewrites its own sections and leaves the others (BERT, scaling) alone."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## BERT sentiment: adapter overhead\n\nkept\n")
    # ddp here; the hand-written Horovod loop runs in the pinning test above, Accelerate's in the BERT form's test
    run_cmd([sys.executable, "-m", "benchmarks.overhead", "--pairs", "1", "--steps", "12", "--world-sizes", "2",
             "--backends", "ddp", "--out", str(out)], timeout=560, env=child_env(tmp_path))  # fmt: skip
    text = out.read_text()
    assert "| ddp | 2 | 1 |" in text
    assert "Scaling" in text and "Hardware ceiling" in text
    assert "## BERT sentiment: adapter overhead\n\nkept" in text


def test_same_pinning_form_alternates_and_pins_both_sides_alike(tmp_path, monkeypatch):
    """The --same-pinning form's rounds, with its two runners recorded instead of launched (both run for real
    elsewhere: the pinned loops above, distbench --no-pin-cores in test_multiprocess.py): each round runs both
    sides unpinned and pinned, the side first alternates, and the ratios are distbench / hand-written within
    a round."""
    from typer.testing import CliRunner

    from benchmarks import overhead

    calls, speeds = [], iter(range(1000, 2000, 100))
    monkeypatch.setattr(overhead, "hand_written", lambda b, n, steps, threads, extra=(): calls.append(("hand", extra))
                        or next(speeds))  # fmt: skip
    monkeypatch.setattr(overhead, "distbench_run", lambda b, n, steps, threads, tmp, args=(): calls.append(
        ("distbench", args)) or {"samples_per_sec": next(speeds)})  # fmt: skip
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## Other\n\nkept\n")
    app = overhead.typer.Typer()
    app.command()(overhead.main)
    result = CliRunner().invoke(app, ["--same-pinning", "--backends", "ddp", "--world-sizes", "1,2", "--pairs", "2",
                                      "--steps", "12", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    unpinned, pinned = ("hand", ()), ("hand", ("--pin",))
    ours, ours_pinned = ("distbench", ("--no-pin-cores",)), ("distbench", ())
    assert calls == [unpinned, ours, pinned, ours_pinned, ours, unpinned, ours_pinned, pinned]  # x1 skipped
    text = out.read_text()
    assert "## Other\n\nkept" in text and "## Adapter overhead at the same pinning (MNIST)" in text
    # speeds in call order: round 1 1000 1100 1200 1300, round 2 (distbench first) 1400 1500 1600 1700
    assert "| ddp | 2 | neither | 1250 | 1250 | **1.017** | 1.100 0.933 |" in text
    assert "| ddp | 2 | both pinned | 1450 | 1450 | **1.012** | 1.083 0.941 |" in text


def test_bert_overhead_benchmark_writes_its_section(tmp_path, mini_mr):
    """The BERT form replaces its own section of the performance document and leaves the rest alone (the bundled
    MiniLM on the tests' small MR-format corpus: the mechanics, not the speed)."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## MNIST\n\nkept\n")
    run_cmd([sys.executable, "-m", "benchmarks.overhead", "--task", "bert-sentiment", "--data-dir", str(mini_mr),
             "--backends", "accelerate", "--world-sizes", "2", "--pairs", "1", "--steps", "6", "--out", str(out)],
            timeout=400, env=child_env(tmp_path))  # fmt: skip
    text = out.read_text()
    assert "## MNIST\n\nkept" in text and text.count("## BERT sentiment: adapter overhead") == 1
    assert "| accelerate | 2 | 1 |" in text


def test_accuracy_benchmark_runs(tmp_path):
    out = tmp_path / "acc.md"
    run_cmd([sys.executable, "-m", "benchmarks.accuracy", "--seeds", "0", "--backends", "single,ddp", "--epochs", "1",
             "--out", str(out)], timeout=300, env=child_env(tmp_path), cwd=ROOT)  # fmt: skip
    text = out.read_text()
    assert "| single | 1 | 0 |" in text and "| ddp | 2 | 0 |" in text


def test_scaling_benchmark_runs_every_configuration(tmp_path):
    out = tmp_path / "scaling.md"
    # every worker mode but lockstep, horovod-grouped and allreduce-ddp, which differ from independent, horovod and
    # allreduce-horovod by a line or two each
    run_cmd([sys.executable, "-m", "benchmarks.scaling", "--rounds", "1", "--steps", "5", "--out", str(out),
             "--modes", "independent,ddp,horovod,allreduce-horovod"], timeout=400,
            env=child_env(tmp_path), cwd=ROOT)  # fmt: skip
    text = out.read_text()
    for label in ("single, batch 32", "x2 independent", "x2 ddp, global 128", "x2 horovod, global 64"):
        assert f"| {label}" in text
    assert "x2 lockstep" not in text  # not asked for
    assert text.count("| **") == 6  # an efficiency for every world-size-2 training row
    assert "| x2 all-reduce of the gradients alone, horovod (gloo) | — |" in text
    assert "| fc1.weight |" in text and "Horovod's timeline" in text


def test_bert_accuracy_benchmark_runs(tmp_path, mr_dir):
    out = tmp_path / "bert.md"
    run_cmd([sys.executable, "-m", "benchmarks.bert_accuracy", "--data-dir", str(mr_dir), "--seeds", "0,1",
             "--recipe", "--model tiny-random --max-steps 2", "--out", str(out)], timeout=400,
            env=child_env(tmp_path), cwd=ROOT)  # fmt: skip
    text = out.read_text()
    assert "| 0 | " in text and "| 1 | " in text and "/ 1066 |" in text
    assert "**Median over 2 seeds:" in text


# Stands in for Horovod's pytorch_synthetic_benchmark.py (not in this repository): rank 0 writes every rank's
# cores and prints the script's last line.
STAND_IN = """import json, os
import horovod.torch as hvd
hvd.init()
cores = hvd.allgather_object(sorted(os.sched_getaffinity(0)))
if hvd.rank() == 0:
    with open(os.environ["STAND_IN_OUT"], "w") as f:
        json.dump(cores, f)
    print("Total img/sec on %d CPU(s): 12.5 +-0.1" % hvd.size())
"""


@pytest.mark.parametrize("pin", [False, True])
def test_horovod_script_runs_pinned_as_distbench_pins(tmp_path, monkeypatch, pin):
    from benchmarks.horovod_synthetic import horovod_script
    from distbench.config import available_cpus

    script, out = tmp_path / "stand_in.py", tmp_path / "cores.json"
    script.write_text(STAND_IN)
    monkeypatch.setenv("STAND_IN_OUT", str(out))
    threads = max(1, available_cpus() // 2)
    assert horovod_script(script, 2, "resnet18", 8, 1, 1, threads, pin) == 12.5
    usable = sorted(os.sched_getaffinity(0))
    expected = [usable[r * threads : (r + 1) * threads] for r in range(2)] if pin else [usable, usable]
    assert json.loads(out.read_text()) == expected


def test_horovod_synthetic_table_compares_at_the_same_pinning():
    from benchmarks.horovod_synthetic import table

    rows = [(10.0, 9.9, 12.0, 12.6), (8.0, 8.4, 11.0, 11.0), (9.0, 9.0, 10.0, 10.5)]
    lines = table(rows)
    assert lines[2].startswith("| unpinned:") and "**1.000** | 0.990 1.050 1.000 |" in lines[2]
    assert lines[3].startswith("| pinned:") and "**1.050** | 1.050 1.000 1.050 |" in lines[3]
    assert "| 9.00 | 11.00 |" in lines[4]  # pinning's effect on the script: medians unpinned, pinned


def test_a_section_is_replaced_not_appended():
    from benchmarks.overhead import replace_section

    doc = "# P\n\n## A\n\nold\n\n## B\n\nb\n"
    once = replace_section(doc, "## A", ["## A", "", "new", ""])
    assert once == "# P\n\n## A\n\nnew\n\n## B\n\nb\n"
    assert replace_section(once, "## A", ["## A", "", "new", ""]) == once
    assert replace_section("# P\n", "## C", ["## C", "", "c"]) == "# P\n\n## C\n\nc"


def test_startup_benchmark_writes_its_section(tmp_path):
    """The floors and distbench under one launcher (plain python: the cheapest), the section replaced in place."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## Other\n\nkept\n")
    run_cmd([sys.executable, "-m", "benchmarks.startup", "--rounds", "1", "--backends", "single", "--out", str(out)],
            timeout=120, env=child_env(tmp_path))  # fmt: skip
    text = out.read_text()
    assert "## Other\n\nkept" in text and "| single x1 | python |" in text
    assert "| backend | launcher | imports | process group | data | build | first step | total |" in text
