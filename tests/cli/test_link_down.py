"""A link that goes down (`--fault link-down`) for less than the collective timeout: the job rides it out
(docs/faults.md; every library, and past the timeout: benchmarks/faults.py link). Multi-process, in the first tier:
it mostly waits for the link."""

import pytest

from distbench.records import read_records
from tests.helpers import py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_link_down_for_less_than_the_timeout_is_ridden_out_in_the_same_processes(tmp_path):
    """`--fault link-down:1@10:3`: node 1's switch port goes down after step 10 and comes up 3 s later (a pulled cable:
    no process is told; their packets are lost meanwhile). ddp under torchrun, ready to continue (--restarts 1),
    rides it out in the same processes: nothing notices within --timeout-s, the next step completes once TCP's
    retransmission gets through after the link is back, nothing is trained again, and the run ends bit for bit on
    its fault-free run; the record says so."""
    out = tmp_path / "sweep"
    cmd = py(
        "run.py compare --backends ddp --nodes 2 --nprocs 1 --link-mode per-node --max-steps 20 --dropout 0 "
        "--timeout-s 20 --checkpoint-every 10 --restarts 1 --fault none,link-down:1@10:3 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=360)
    runs = {r["config"]["fault"]: r for r in read_records(out / "results.jsonl") if r["backend"] == "ddp"}
    rec, free = runs["link-down:1@10:3"], runs["none"]
    assert rec["status"] == "ok", rec.get("error")
    cost = rec["fault"]
    print(f"ddp: {cost}")
    assert (cost["met"], cost["seconds"], cost["attempts"], cost["steps_redone"]) == (True, 3.0, 1, 0)
    assert cost["first_noticed_s"] is None and cost["restarted_s"] is None
    assert 3.0 <= cost["recovered_s"] < 3.0 + 15  # the link's 3 s, then at most TCP's backed-off retransmission
    assert (rec["loss_history"], rec["param_checksum"]) == (free["loss_history"], free["param_checksum"])
