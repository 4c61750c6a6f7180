"""What the record says about the run beyond training (distbench/training/record.py): the collective library, the
machine's load and the dropout the model drew masks with."""

import os
import subprocess
import sys
import types

import torch.distributed as dist

from distbench.models.convnet import ConvNet
from distbench.training import record
from distbench.training.timer import StartupClock
from tests.helpers import ROOT


def test_dropout_p_is_what_the_model_draws_masks_with():
    assert record.dropout_p(ConvNet()) == 0.25  # the ConvNet's own: 0.10 and 0.25
    assert record.dropout_p(ConvNet(dropout=0.0)) == 0.0  # --dropout 0
    assert record.dropout_p(ConvNet(dropout=0.5)) == 0.5


def test_the_load_is_read_before_training_and_at_the_end_beside_the_cores_the_run_used(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 9.0, 9.0))
    facts = record.Facts(StartupClock(), started_at="now")  # gathered after the imports, before training
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 9.0, 9.0))
    topo = {"simulated": True, "nodes": 2, "local_world_size": 1}  # simulated nodes: every rank on this machine
    load = record.machine_load(facts, topo, world_size=2, threads=3)
    said = {"avg_1m_before": 1.25, "avg_1m_after": 2.5, "cores": os.cpu_count(), "cores_used": 6, "short_threads": None}
    assert load == said  # short_threads: the loop's look at the run's cores as training starts (none here)
    facts.short_threads = 2
    assert record.machine_load(facts, topo, world_size=2, threads=3)["short_threads"] == 2
    real = {"simulated": False, "nodes": 2, "local_world_size": 4}  # real nodes: this node's ranks only
    assert record.machine_load(facts, real, world_size=8, threads=1)["cores_used"] == 4


def test_the_collective_is_the_process_groups_or_none_for_one_process():
    assert record.collective(types.SimpleNamespace(name="single")) is None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert record.collective(types.SimpleNamespace(name="ddp")) == "gloo"
    finally:
        dist.destroy_process_group()


def test_horovods_collective_is_its_own_gloo():
    """In a process of its own: hvd.init() starts Horovod's background thread for the rest of the process."""
    code = (
        "import types, torch, horovod.torch as hvd\n"
        "from distbench.training import record\n"
        "hvd.init()\n"
        "print(record.collective(types.SimpleNamespace(name='horovod', device=torch.device('cpu'))))\n"
        "hvd.shutdown()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "gloo", proc.stderr


def test_the_record_is_built_from_the_value_training_left(monkeypatch):
    """build_record reads the run from a RunResult alone, no Trainer (record.py imports nothing of the loop): the
    record's fields are the value's, the process's facts and the timer's."""
    from distbench.backends.single import SingleBackend
    from distbench.config import RunConfig
    from distbench.records import SCHEMA_VERSION
    from distbench.training.timer import StepTimer
    from tests.unit.test_layers import imported

    assert not [m for _, m in imported((ROOT / "distbench/training/record.py").read_text(), set()) if "loop" in m]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    launch = types.SimpleNamespace(
        launcher="python", node_rank=0, nodes=1, local_world_size=1, restart_count=0, world_size=1
    )
    backend = SingleBackend(launch)
    model = ConvNet()
    run = record.RunResult(
        backend=backend,
        cfg=RunConfig(task="mnist", batch_size=8, threads=1, accumulate=2),
        task="mnist",
        accuracy_meaningful=True,
        model=model,
        dataset={"name": "mnist"},
        data_fingerprint=7,
        steps_per_epoch=4,
        steps=6,
        loss_history=[0.5, 0.25],
        memory={"params_bytes": 1},
        time_to_target_s=None,
        compute={"micro_batch_flops": 4e6, "micro_batch_samples": 4, "micro_batch_tokens": None, "flops_counted": "x"},
    )
    timer = StepTimer(lambda: None, warmup=0)
    timer.begin()
    timer.finish()
    evals = [{"accuracy": 0.75, "loss": 0.5, "count": 12}]
    rec = record.build_record(run, record.Facts(StartupClock(), started_at="now"), timer, evals)
    assert rec["schema_version"] == SCHEMA_VERSION and (rec["backend"], rec["task"]) == ("single", "mnist")
    assert (rec["steps"], rec["resumed_from_step"], rec["epochs"]) == (6, 6, 1.5)  # no step timed: all before
    assert (rec["micro_batch_size"], rec["final_loss"], rec["eval_accuracy"]) == (4, 0.25, 0.75)
    assert (rec["data_fingerprints"], rec["memory_per_rank"], rec["dataset"]) == ([7], {"params_bytes": 1}, run.dataset)
    assert rec["param_checksum"] == float(sum(p.detach().double().sum() for p in model.parameters()))
    assert rec["link_rate"] == "none" and rec["launcher"] == "python" and rec["topology"]["rank_nodes"] == [0]
    # no step timed: no rate, so no FLOP/s; on a CPU no peak is known
    assert (rec["tokens_per_sec"], rec["achieved_tflops_per_device"], rec["mfu"], rec["peak_tflops"]) == (None,) * 4
    assert rec["flops_counted"] == "x" and "cpu device" in rec["peak_source"]
