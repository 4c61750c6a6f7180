"""`--emulate PROFILE` under the real launchers: more simulated nodes than this machine has cores, each library's
own communication for real, the computation the profile's waits (docs/emulation.md)."""

import json

import pytest

from distbench.tasks import emulated
from tests.helpers import ROOT, py, run_in

PROFILE = ROOT / "docs" / "profiles" / "mnist-b32-cpu.json"  # MNIST's ConvNet at micro-batch 32, this machine's CPU
# each way a library exchanges gradients: DDP's reducer buckets (torchrun), FSDP2's units, DeepSpeed's partitions
# (its own launcher). Accelerate and Fabric wrap the model in DDP and emulate as ddp does (all eight backends were run
# emulated by hand, docs/emulation.md). Horovod's fusion runs too (horovodrun on 4 host names, two of them loopback
# addresses of the sweep's private namespace), and its run is failed as host-bound: its waiting ranks spin.
LIBRARIES = ("ddp", "fsdp", "deepspeed")
SPINNING = "horovod"


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_four_emulated_nodes_of_each_library_run_on_two_cores(tmp_path):
    out = tmp_path / "sweep"
    cmd = py(
        f"run.py compare --backends {','.join((*LIBRARIES, SPINNING))} --nodes 4 --nprocs 1 --batch-size 128 "
        f"--max-steps 6 --link-rate 1gbit --emulate {PROFILE} --dilation 8 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=380, expect_rc=1)  # the sweep exits 1: its horovod run failed, as it should
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # no single-process reference: another micro-batch
    assert sorted(r["backend"] for r in recs) == sorted((*LIBRARIES, SPINNING))
    (spun,) = [r for r in recs if r["backend"] == SPINNING]
    recs = [r for r in recs if r["backend"] != SPINNING]
    assert (spun["world_size"], spun["topology"]["nodes"], spun["status"]) == (4, 4, "failed")
    assert "127.0.0.3:1" in spun["command"] and spun["emulated"]["host_bound"]
    assert spun["error"].startswith("invalid emulation") and "polls in a loop of yields" in spun["error"]
    profile = json.loads(PROFILE.read_text())
    waits_ms = (profile["forward"]["median_s"] + profile["backward"]["median_s"]) * 1e3
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert (r["world_size"], r["topology"]["nodes"], r["micro_batch_size"]) == (4, 4, 32)
        assert (r["link_rate"], r["link_rate_shaped"]) == ("1gbit", "125mbit")  # the loopback shaped at 1gbit / 8
        assert len({tuple(c) for c in r["topology"]["node_cores"]}) == 2  # four nodes on two cores
        e = r["emulated"]
        assert (e["profile"], e["micro_batch"], e["dilation"]) == (str(PROFILE), 32, 8.0)
        # the host had room (the sweep fails a run whose processes kept their cores busier: an invalid emulation)
        assert e["host_busy_share"] <= emulated.HOST_BUSY_LIMIT and r["dilated"]["dilation"] == 8.0
        assert r["accuracy_meaningful"] is False and r["eval_count"] == 500 and r["model_flops_per_sample"] is None
        # every step waits for the profile's forward and backward (each rank's steps drawn from its spread, the
        # slowest of 4 ranks at least the median's 0.97), then for the exchanges; divided back by the dilation
        assert r["step_time_ms"]["p50"] >= 0.95 * waits_ms, r["backend"]
    # each library sends what it sends in a real run: FSDP2 twice DDP's bytes, its units' all-gathers before forward
    # and backward (3/4 S each at 4 ranks) and gloo's reduce-scatter, an all-reduce's 3/2 S (docs/fsdp.md); an
    # emulator whose gradients missed FSDP2's unsharded parameters sent only the all-gathers (as DDP's 3/2 S)
    sent = {r["backend"]: r["written_bytes_per_step"] for r in recs}
    assert 1.8 < sent["fsdp"] / sent["ddp"] < 2.2, sent
    held = {r["backend"]: r["memory_per_rank"]["params_bytes"] for r in recs}
    assert held["fsdp"] < held["ddp"] / 3  # FSDP2's shards, a quarter each (with padding)
    # the optimizer's state was made (its first step is the real one): sharded by FSDP2 too
    state = {r["backend"]: r["memory_per_rank"]["optimizer_bytes"] for r in recs}
    assert state["ddp"] > 0 and state["fsdp"] < state["ddp"] / 3
    report = (out / "report.md").read_text()
    assert "**Emulated** (3 of 3 runs)" in report and "n/a: emulated (500)" in report  # of the runs that completed
