"""Smoke tests of the benchmark scripts, so they do not rot. No speed assertions: only that they run
end to end and write their tables."""

import sys

import pytest

from tests.helpers import ROOT, child_env, run_cmd

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(600)]


def test_overhead_benchmark_runs_every_backend(tmp_path):
    """The MNIST form rewrites its own sections and leaves the others (BERT, scaling) alone."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## BERT sentiment: adapter overhead\n\nkept\n")
    # ddp and horovod here; the hand-written Accelerate loop runs in the BERT form's test below
    run_cmd([sys.executable, "-m", "benchmarks.overhead", "--pairs", "1", "--steps", "12", "--world-sizes", "2",
             "--backends", "ddp,horovod", "--out", str(out)], timeout=560, env=child_env(tmp_path))  # fmt: skip
    text = out.read_text()
    for backend in ("ddp", "horovod"):
        assert f"| {backend} | 2 | 1 |" in text
    assert "Scaling" in text and "Start-up" in text and "Hardware ceiling" in text
    assert "## BERT sentiment: adapter overhead\n\nkept" in text


def test_bert_overhead_benchmark_writes_its_section(tmp_path, mr_dir):
    """The BERT form replaces its own section of the performance document and leaves the rest alone."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## MNIST\n\nkept\n")
    run_cmd([sys.executable, "-m", "benchmarks.overhead", "--task", "bert-sentiment", "--data-dir", str(mr_dir),
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
    # every worker mode but lockstep and horovod-grouped, which differ from independent and horovod by one line each
    run_cmd([sys.executable, "-m", "benchmarks.scaling", "--rounds", "1", "--steps", "5", "--out", str(out),
             "--modes", "independent,ddp,horovod,allreduce-ddp,allreduce-horovod"], timeout=400,
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


def test_a_section_is_replaced_not_appended():
    from benchmarks.overhead import replace_section

    doc = "# P\n\n## A\n\nold\n\n## B\n\nb\n"
    once = replace_section(doc, "## A", ["## A", "", "new", ""])
    assert once == "# P\n\n## A\n\nnew\n\n## B\n\nb\n"
    assert replace_section(once, "## A", ["## A", "", "new", ""]) == once
    assert replace_section("# P\n", "## C", ["## C", "", "c"]) == "# P\n\n## C\n\nc"
