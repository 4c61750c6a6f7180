"""A lost node (`--fault kill-node`): torchrun's agents continue without it (docs/faults.md). A file of its own, so
that the suite runs it beside test_continue.py's sweep: it mostly waits for torchrun's rendezvous."""

import pytest

from distbench.launching.launch import resolve
from distbench.sweep.executor import launch_config, run_one
from tests.helpers import child_env, launch, read_record, run_cmd

TIMEOUT_S = 60
COMMON = ["--threads", "1", "--no-progress"]  # dropout on (the task's): its masks are what a change of size changes


def _run(tmp_path, fault: str) -> dict:
    """ddp on 2 simulated nodes of one process, as `compare --restarts 1 --nodes 2` starts it
    (sweep/executor.launch_config), without a sweep around it: its record."""
    out, folder = tmp_path / f"{fault}.json", tmp_path / f"ckpt-{fault}"
    args = ["--max-steps", "30", *COMMON, "--timeout-s", str(TIMEOUT_S), "--checkpoint-dir", str(folder)]
    args += ["--checkpoint-every", "10", "--fault", fault, "--output", str(out)]
    started = launch_config("ddp", 2, 2, args, restarts=1)
    assert all(c[c.index("--nnodes") + 1] == "1:2" for c in started.commands)
    env = {**child_env(tmp_path), **started.env}
    return run_one([resolve(c) for c in started.commands], out, 300, tmp_path / f"{fault}.log", env, continues=True)


def _changed_size_at_step_10(tmp_path) -> dict:
    """The same training made to change size by hand at step 10: ddp x2 (one node of two processes, the same
    arithmetic as two nodes of one) to its step-10 checkpoint, then torchrun's one process from it to step 30."""
    folder, env = tmp_path / "ckpt-changed", child_env(tmp_path)
    args = [*COMMON, "--checkpoint-dir", str(folder), "--checkpoint-every", "10"]
    run_cmd(launch("ddp", 2, [*args, "--max-steps", "10", "--output", str(tmp_path / "to-10.json")]), 240, env=env)
    out = tmp_path / "changed.json"
    run_cmd(launch("ddp", 1, [*args, "--max-steps", "30", "--output", str(out)]), 240, env=env)
    return read_record(out)


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_torchrun_continues_without_a_lost_node(tmp_path):
    """`--fault kill-node:1@15` kills node 1's torchrun agent and its worker (a lost machine). Restarting, torchrun's
    agents meet at `--nnodes 1:2`: node 0's agent, whose worker's collective failed, waits out the lost node's
    rendezvous keep-alive and last call, then restarts its worker alone, from the step-10 checkpoint, at world size 1
    (the global batch kept, split over fewer ranks). With dropout on, the run is the one that changed size at the same
    step by hand (x2 to the step-10 checkpoint, x1 from it: each rank's random stream restarts from the seed, the step
    and its rank), bit for bit; its record keeps the world it was launched with and says the one it ended with. Started
    as `compare --restarts 1 --nodes 2` starts it (sweep/executor.launch_config), without a sweep around it."""
    rec, changed = _run(tmp_path, "kill-node:1@15"), _changed_size_at_step_10(tmp_path)
    assert (rec["status"], rec["world_size"], rec["nodes"], rec["resumed_from_step"]) == ("ok", 2, 2, 10), rec.get(
        "error"
    )
    cost = rec["fault"]
    print(f"ddp, node 1 lost: {cost}")
    assert (cost["met"], cost["attempts"], cost["steps_redone"]) == (True, 2, 5)
    assert (cost["world_size_after"], cost["nodes_after"]) == (1, 1)
    assert cost["first_noticed_s"] < cost["restarted_s"] < cost["recovered_s"] < TIMEOUT_S + 60
    assert changed["resumed_from_step"] == 10 and changed["world_size"] == 1
    assert (rec["loss_history"], rec["param_checksum"]) == (changed["loss_history"], changed["param_checksum"])
