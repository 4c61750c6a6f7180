"""A job that continues after a failure, as each library's users run it (`compare --restarts`): torchrun's agents
and accelerate launch restarting the group from its checkpoint (docs/faults.md). Horovod Elastic's survivors rolling
back to their commit and continuing without the lost host: tests/slurm/test_slurm.py (and, the host coming back,
test_lost_node.py); torchrun continuing without a lost node: test_lost_node.py."""

import pytest

from distbench.records import read_records
from tests.helpers import assert_one_process_per_node_on_its_cores, py, run_in

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def continued_sweep(tmp_path_factory):
    """`compare --restarts 1 --fault none,kill:1@15` on 2 simulated nodes of one process, ddp and accelerate."""
    tmp = tmp_path_factory.mktemp("continued")
    out = tmp / "sweep"
    cmd = py(
        f"run.py compare --backends ddp,accelerate --nprocs 1 --nodes 2 --threads 1 --max-steps 30 "
        f"--timeout-s {TIMEOUT_S} --dropout 0 --checkpoint-every 10 --restarts 1 --fault none,kill:1@15 --out",
        out,
    )
    run_in(tmp, cmd, timeout=500)
    records = read_records(out / "results.jsonl")
    return out, {(r["backend"], r["config"]["fault"]): r for r in records if r["backend"] != "single"}


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_a_sweep_continues_each_library_past_a_killed_rank_and_reports_what_it_cost(continued_sweep):
    """`compare --restarts 1 --fault none,kill:1@15` on 2 simulated nodes: ddp under torchrun's agents (--max-restarts,
    a c10d rendezvous: node 1's agent restarts its worker, node 0's joins the new round), accelerate under accelerate
    launch (--max_restarts). Each run checkpoints into a folder of its own. Each continued run ends on its
    fault-free run of the same sweep bit for bit: the group restarted from its checkpoint. The records say what the
    kill cost; so does the report's Faults section."""
    out, runs = continued_sweep
    assert sorted(runs) == [(b, f) for b in ("accelerate", "ddp") for f in ("kill:1@15", "none")]
    for backend in ("ddp", "accelerate"):
        rec, free = runs[backend, "kill:1@15"], runs[backend, "none"]
        assert (rec["status"], rec["resumed_from_step"], rec["steps"]) == ("ok", 10, 30), rec.get("error")
        cost = rec["fault"]  # from the events in the run's checkpoint folder (training/faults.py)
        print(f"{backend}: {cost}")
        assert (cost["spec"], cost["met"], cost["attempts"], cost["steps_redone"]) == ("kill:1@15", True, 2, 5)
        assert 0 <= cost["restarted_s"] < cost["recovered_s"] < TIMEOUT_S
        assert cost["first_noticed_s"] is None or cost["first_noticed_s"] <= cost["recovered_s"]
        assert cost["goodput_samples_per_sec"] < rec["samples_per_sec"]  # the whole run's wall, the lost steps in it
        assert (cost["world_size_after"], cost["nodes_after"]) == (2, 2)
        assert_one_process_per_node_on_its_cores(free)  # without a link
        assert (free["link_rate"], free["link_mode"]) == ("none", "shared")  # as the children found their namespace
        assert (rec["loss_history"], rec["param_checksum"]) == (free["loss_history"], free["param_checksum"])
    assert "--max-restarts=1" in runs["ddp", "kill:1@15"]["command"]
    assert not list((out / "runs").glob("*.ckpt"))  # the folders the restarts needed, removed
    report = (out / "report.md").read_text()
    assert "## Faults" in report and "| ddp x2 fault kill:1@15 | `kill:1@15` | 1 of 1 |" in report
