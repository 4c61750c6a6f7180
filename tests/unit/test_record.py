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
