"""Smoke tests of benchmarks/overhead.py, so that it does not rot: each form writes its own sections of the
performance document and leaves the others. No speed assertions."""

import sys

import pytest

from tests.helpers import py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_overhead_benchmark_writes_its_mnist_sections(tmp_path):
    """The MNIST form rewrites its own sections and leaves the others (BERT, scaling) alone."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## BERT sentiment: adapter overhead\n\nkept\n")
    # ddp here; the hand-written Horovod loop runs in the pinning test above, Accelerate's in the BERT form's test
    cmd = py("-m benchmarks.overhead --pairs 1 --steps 12 --world-sizes 2 --backends ddp --out", str(out))
    run_in(tmp_path, cmd, timeout=560)
    text = out.read_text()
    assert "| ddp | 2 | 1 |" in text
    assert "Scaling" in text and "Hardware ceiling" in text
    assert "## BERT sentiment: adapter overhead\n\nkept" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_bert_overhead_benchmark_writes_its_section(tmp_path, mini_mr):
    """The BERT form replaces its own section of the performance document and leaves the rest alone (the bundled
    MiniLM on the tests' small MR-format corpus: the mechanics, not the speed)."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## MNIST\n\nkept\n")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.overhead",
        "--task",
        "bert-sentiment",
        "--data-dir",
        str(mini_mr),
        *"--backends accelerate --world-sizes 2 --pairs 1 --steps 6 --out".split(),
        str(out),
    ]
    run_in(tmp_path, cmd, timeout=400)
    text = out.read_text()
    assert "## MNIST\n\nkept" in text and text.count("## BERT sentiment: adapter overhead") == 1
    assert "| accelerate | 2 | 1 |" in text
