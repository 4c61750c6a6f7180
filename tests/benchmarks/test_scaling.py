"""Smoke tests of benchmarks/scaling.py, the hand-written loops' pinning and benchmarks/horovod_synthetic.py, so
that they do not rot. No speed assertions: only that they run end to end and write their tables."""

import json
import os

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
