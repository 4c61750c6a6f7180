"""Smoke tests of the benchmark scripts, so they do not rot. No speed assertions: only that they run end to end and
write their tables."""

import json
import os
import sys

import pytest

from benchmarks.harness import last_json
from tests.helpers import py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["horovod"])
def test_a_pinned_hand_written_loop_runs_on_its_local_ranks_cores_in_step(tmp_path, backend):
    """The loop pins as distbench does (`--pin`: benchmarks/handwritten/common.pin, every loop's), and trains through
    its library's wrapper: its ranks end with the same parameters (the DDP and Accelerate loops once called the
    module under the wrapper and exchanged nothing). Those two run in the overhead benchmark's tests below, which
    refuses a loop whose ranks' parameters differ (benchmarks/overhead.py, rank_spread); Horovod's runs here."""
    from distbench.launching.commands import usual_launcher
    from distbench.launching.launch import local_argv, resolve
    from distbench.machine import available_cpus

    threads = max(1, available_cpus() // 2)
    program = ["-m", f"benchmarks.handwritten.{backend}_loop", "--steps", "8", "--threads", str(threads), "--pin"]
    proc = run_in(tmp_path, resolve(local_argv(usual_launcher(backend), program, 2)), timeout=200)
    result = last_json(proc.stdout)
    assert result["cores"] == sorted(os.sched_getaffinity(0))[:threads]  # rank 0's
    assert result["rank_spread"] == 0.0  # the gradients were exchanged: every rank ends with the same parameters


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


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_accuracy_benchmark_runs(tmp_path):
    out = tmp_path / "acc.md"
    run_in(
        tmp_path, py("-m benchmarks.accuracy --seeds 0 --backends single,ddp --epochs 1 --out", str(out)), timeout=300
    )
    text = out.read_text()
    assert "| single | 1 | 0 |" in text and "| ddp | 2 | 0 |" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_scaling_benchmark_runs_every_configuration(tmp_path):
    out = tmp_path / "scaling.md"
    # the worker modes but lockstep, ddp, horovod-grouped and allreduce-ddp, which differ from independent, horovod
    # and allreduce-horovod by a line or two each (ddp: its model wrapped in DDP, as benchmarks/handwritten's)
    modes = "independent,horovod,allreduce-horovod"
    cmd = py("-m benchmarks.scaling --rounds 1 --steps 5 --out", out, "--modes", modes)
    run_in(tmp_path, cmd, timeout=400)
    text = out.read_text()
    for label in ("single, batch 32", "x2 independent", "x2 horovod, global 128", "x2 horovod, global 64"):
        assert f"| {label}" in text
    assert "x2 lockstep" not in text and "x2 ddp" not in text  # not asked for
    assert text.count("| **") == 3  # an efficiency for every world-size-2 training row
    assert "| x2 all-reduce of the gradients alone, horovod (gloo) | — |" in text
    assert "| fc1.weight |" in text and "Horovod's timeline" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_bert_accuracy_benchmark_runs(tmp_path, mr_dir):
    out = tmp_path / "bert.md"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bert_accuracy",
        "--data-dir",
        str(mr_dir),
        "--seeds",
        "0,1",
        "--recipe",
        "--model tiny-random --max-steps 2",
        "--out",
        str(out),
    ]
    run_in(tmp_path, cmd, timeout=400)
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


@pytest.mark.multiproc
@pytest.mark.timeout(600)
@pytest.mark.parametrize("pin", [False, True])
def test_horovod_script_runs_pinned_as_distbench_pins(tmp_path, monkeypatch, pin):
    from benchmarks.horovod_synthetic import horovod_script
    from distbench.machine import available_cpus

    script, out = tmp_path / "stand_in.py", tmp_path / "cores.json"
    script.write_text(STAND_IN)
    monkeypatch.setenv("STAND_IN_OUT", str(out))
    threads = max(1, available_cpus() // 2)
    assert horovod_script(script, 2, "resnet18", 8, 1, 1, threads, pin) == 12.5
    usable = sorted(os.sched_getaffinity(0))
    expected = [usable[r * threads : (r + 1) * threads] for r in range(2)] if pin else [usable, usable]
    assert json.loads(out.read_text()) == expected


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_startup_benchmark_writes_its_section(tmp_path):
    """The floors and distbench under one launcher (plain python: the cheapest), the section replaced in place."""
    out = tmp_path / "perf.md"
    out.write_text("# Performance\n\n## Other\n\nkept\n")
    cmd = [sys.executable, "-m", "benchmarks.startup", "--rounds", "1", "--backends", "single", "--out", str(out)]
    run_in(tmp_path, cmd, timeout=120)
    text = out.read_text()
    assert "## Other\n\nkept" in text and "| single x1 | python |" in text
    assert "| backend | launcher | imports | process group | data | build | first step | total |" in text
