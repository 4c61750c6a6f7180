"""`--fault`: its grammar and checks, the events a run keeps, and what a fault cost, from those events (the real
faults under the launchers: tests/multiproc/test_reliability.py)."""

import time

import pytest

from distbench.config import Fault, RunConfig, parse_fault, validate
from distbench.errors import UserError
from distbench.training import faults


@pytest.mark.parametrize(
    "text,fault",
    [
        ("none", None),
        ("kill:1@15", Fault("kill", 1, step=15)),
        ("hang:0@3", Fault("hang", 0, step=3)),
        ("kill-node:1@4", Fault("kill-node", 1, step=4)),
        ("kill-node:1@4:30", Fault("kill-node", 1, step=4, seconds=30.0)),  # back 30 s later
        ("slow:1:2.5", Fault("slow", 1, factor=2.5)),
        ("link-down:1@10:5", Fault("link-down", 1, step=10, seconds=5.0)),
        ("link-down:0@3:0.5", Fault("link-down", 0, step=3, seconds=0.5)),
    ],
)
def test_each_form_parses(text, fault):
    assert parse_fault(text) == fault
    assert (fault is not None and fault.returns) == (text == "kill-node:1@4:30")


@pytest.mark.parametrize(
    "text",
    [
        "kill:1",
        "kill:1@0",
        "slow:1:1",
        "slow:1:0.5",
        "crash:1@3",
        "kill:-1@3",
        "",
        "link-down:1@3",
        "link-down:1@3:0",
        "kill-node:1@3:0",
        "kill:1@3:30",
    ],
)
def test_a_fault_of_no_form_is_one_line_naming_the_forms(text):
    forms = r"none, kill:RANK@STEP, kill-node:NODE@STEP\[:BACK\], hang:RANK@STEP, slow:RANK:FACTOR \(FACTOR above 1\)"
    with pytest.raises(UserError, match=rf"^--fault must be {forms} or link-down:NODE@STEP:SECONDS, got"):
        validate(RunConfig(fault=text, output="/tmp/never/r.json"), 2)


def test_a_rank_the_job_does_not_have_is_refused():
    with pytest.raises(UserError, match=r"^--fault kill:2@5: rank 2, but the job has ranks 0 to 1$"):
        validate(RunConfig(fault="kill:2@5", output="/tmp/never/r.json"), 2)


def test_a_node_fault_falls_on_every_process_of_its_node_once(tmp_path):
    """kill-node:NODE@STEP: every process of the node (its agent too, where one started it); a node the job lacks
    is one line, but not in an attempt that continued without the node (the fault met: its events say so)."""
    from distbench.process import LaunchEnv

    def place(rank, node, nodes=2, launcher="torchrun"):
        return LaunchEnv(launcher, rank, rank % 2, 4, 2, node_rank=node, nodes=nodes)

    events = faults.Events(tmp_path)
    on_node_1 = [faults.Injector("kill-node:1@5", r, 0, events, place=place(r, r // 2)) for r in range(4)]
    assert [i.fault is not None for i in on_node_1] == [False, False, True, True]
    assert on_node_1[2].agent and not faults.Injector("none", 0, 0, events, place=place(0, 0, 2, "horovodrun")).agent
    with pytest.raises(UserError, match=r"^--fault kill-node:2@5: node 2, but the job has nodes 0 to 1$"):
        faults.Injector("kill-node:2@5", 0, 0, events, place=place(0, 0))
    events.add("fault", kind="kill-node", rank=1, step=5)
    assert faults.Injector("kill-node:1@5", 0, 1, events, place=place(0, 0, nodes=1)).fault is None


def test_a_node_that_comes_back_is_its_executors_and_joins_a_later_attempt(tmp_path, monkeypatch):
    """kill-node:NODE@STEP:BACK: the node comes back when the job's executor starts it again (compare --restarts:
    NODE_RETURNS_ENV); a launch of its own cannot, one line. A node that came back (NODE_RETURNED_ENV) joins a later
    attempt of the job, although its agent counts from 0: the fault is met, and not met again."""
    from distbench.process import NODE_RETURNED_ENV, NODE_RETURNS_ENV, LaunchEnv

    events, place = faults.Events(tmp_path), LaunchEnv("torchrun", 1, 0, 2, 1, node_rank=1, nodes=2)
    monkeypatch.delenv(NODE_RETURNS_ENV, raising=False)
    with pytest.raises(UserError, match=r"^--fault kill-node:1@5:30: the node comes back when compare --restarts N "):
        faults.Injector("kill-node:1@5:30", 1, 0, events, place=place)
    monkeypatch.setenv(NODE_RETURNS_ENV, "1")
    assert faults.Injector("kill-node:1@5:30", 1, 0, events, place=place).fault == parse_fault("kill-node:1@5:30")
    assert faults.job_restarts(0) == 0 and faults.job_restarts(2) == 2
    monkeypatch.setenv(NODE_RETURNED_ENV, "1")
    assert faults.job_restarts(0) == 1 and faults.job_restarts(2) == 2
    no_events = faults.Events(None)  # without a checkpoint folder, the restart count says it was met
    assert faults.Injector("kill-node:1@5:30", 1, faults.job_restarts(0), no_events, place=place).fault is None


def test_a_link_down_falls_on_its_nodes_first_process_where_the_node_has_a_link_of_its_own(tmp_path, monkeypatch):
    """link-down:NODE@STEP:SECONDS: the node's first process takes the node's switch port down (its other processes
    only live through it); outside a per-node network distbench made (no switch: netns.switch), one line."""
    from distbench.launching import netns
    from distbench.process import LaunchEnv

    events = faults.Events(tmp_path)
    with pytest.raises(UserError, match=r"^--fault link-down:1@5:3: the node has no link of its own here; per-node"):
        faults.Injector("link-down:1@5:3", 0, 0, events, place=LaunchEnv("torchrun", 0, 0, 4, 2, node_rank=0, nodes=2))
    monkeypatch.setattr(netns, "switch", lambda: "net:[4026532000]")
    places = [LaunchEnv("torchrun", r, r % 2, 4, 2, node_rank=r // 2, nodes=2) for r in range(4)]
    met = [faults.Injector("link-down:1@5:3", r, 0, events, place=places[r]).fault is not None for r in range(4)]
    assert met == [False, False, True, False]


def test_a_fault_happens_once_per_run_on_its_rank(tmp_path):
    events = faults.Events(tmp_path)
    assert faults.Injector("kill:1@5", 1, 0, events).fault == Fault("kill", 1, step=5)
    assert faults.Injector("kill:1@5", 0, 0, events).fault is None  # another rank's
    events.add("fault", kind="kill", rank=1, step=5)
    assert faults.Injector("kill:1@5", 1, 1, events).fault is None  # a restart resumes past it
    assert faults.Injector("kill:1@5", 1, 0, events).fault is None  # and so does the same command again
    nowhere = faults.Events(None)  # no checkpoint folder: a restarted group runs clean
    assert faults.Injector("kill:1@5", 1, 0, nowhere).fault is not None
    assert faults.Injector("kill:1@5", 1, 1, nowhere).fault is None


def test_a_fresh_start_starts_the_events_afresh_and_a_resumed_attempt_adds_to_them(tmp_path):
    events = faults.Events(tmp_path)
    events.add("fault", kind="kill", rank=1, step=5)
    faults.Injector("none", 0, 0, events).started(resumed_from=0)
    assert [e["event"] for e in events.read()] == ["attempt"]
    faults.Injector("none", 0, 1, events).started(resumed_from=4)
    assert [(e["event"], e["resumed_from"]) for e in events.read()] == [("attempt", 0), ("attempt", 4)]
    with open(events.path, "a") as f:
        f.write('{"event": "first_st')  # a line cut by a kill mid-write
    assert len(events.read()) == 2


def test_what_a_kill_cost_comes_from_the_events():
    events = [
        {"event": "attempt", "t": 100.5, "started": 100.0, "restart": 0, "resumed_from": 0},
        {"event": "first_step", "t": 101.0, "restart": 0, "step": 1},
        {"event": "fault", "t": 103.0, "kind": "kill", "rank": 1, "step": 15},
        {"event": "noticed", "t": 103.2, "rank": 0, "restart": 0, "error": "RuntimeError"},
        {"event": "attempt", "t": 106.0, "started": 104.0, "restart": 1, "resumed_from": 10},
        {"event": "first_step", "t": 107.0, "restart": 1, "step": 11},
    ]
    cost = faults.costs("kill:1@15", events, now=110.0, samples=1920)
    assert cost == pytest.approx(
        {
            "spec": "kill:1@15",
            "kind": "kill",
            "rank": 1,
            "step": 15,
            "factor": 1.0,
            "met": True,
            "first_noticed_s": 0.2,
            "first_noticed_by": "RuntimeError",
            "restarted_s": 1.0,
            "recovered_s": 4.0,
            "steps_redone": 5,
            "attempts": 2,
            "run_wall_s": 10.0,
            "goodput_samples_per_sec": 192.0,
        }
    )
    # the fault asked for but not met (the run ended first), and a run without one
    assert faults.costs("kill:1@15", events[:2], now=110.0, samples=1)["met"] is False
    assert faults.costs("none", events[:2], now=110.0, samples=1) is None
    # a link down for 3 s that the job rode out in the same processes: its next step is the recovery, nothing redone
    rode = [*events[:2], {**events[2], "kind": "link-down"}, {"event": "next_step", "t": 106.4, "rank": 2, "step": 16}]
    cost = faults.costs("link-down:1@15:3", rode, now=110.0, samples=1920)
    assert (cost["seconds"], cost["steps_redone"], cost["attempts"]) == (3.0, 0, 1)
    assert cost["recovered_s"] == pytest.approx(3.4)
    assert cost["restarted_s"] is None and cost["first_noticed_s"] is None
    # a run without a fault that its library continued after a failure (a node that Slurm took down): unplanned, its
    # times from the first failed collective; the world it was launched with is this launch's first attempt's
    unasked = [
        {**e, "world_size": 2, "nodes": 2} if e["event"] == "attempt" else e for e in events if e["event"] != "fault"
    ]
    unasked[4] = {**unasked[4], "world_size": 1, "nodes": 1}
    cost = faults.costs("none", unasked, now=110.0, samples=1920)
    assert (cost["kind"], cost["attempts"], cost["steps_redone"], cost["first_noticed_by"]) == (
        "unplanned",
        2,
        None,
        "RuntimeError",
    )
    assert cost["restarted_s"] == pytest.approx(0.8) and cost["recovered_s"] == pytest.approx(3.8)
    assert faults.launched(unasked, 1, 1, continued=True) == (2, 2) and faults.launched(unasked, 1, 1, False) == (1, 1)
    resumed_by_hand = [*unasked, {**unasked[0], "restart": 0, "resumed_from": 20, "world_size": 4, "nodes": 2}]
    assert faults.launched(resumed_by_hand, 4, 2, continued=False) == (4, 2)
    assert faults.costs("none", resumed_by_hand, now=110.0, samples=1) is None  # this launch did not continue
    assert faults.costs("none", unasked[:2], now=110.0, samples=1) is None
    # no --checkpoint-dir: no events kept, and whether a kill was met is not known (not "not met")
    assert faults.costs("kill:1@15", [], now=110.0, samples=1, kept=False)["met"] is None


def test_what_a_lost_node_that_came_back_cost_comes_from_the_events():
    """kill-node:1@15:30: shrunk to one node from the step-10 checkpoint, then, 30 s after the fault, grown back to
    two from the step-40 one: the sizes in turn, and from the node's return to the first step at two."""
    events = [
        {"event": "attempt", "t": 100.5, "started": 100.0, "restart": 0, "resumed_from": 0, "world_size": 2},
        {"event": "first_step", "t": 101.0, "restart": 0, "step": 1},
        {"event": "fault", "t": 103.0, "kind": "kill-node", "rank": 1, "step": 15},
        {"event": "noticed", "t": 103.2, "rank": 0, "restart": 0, "error": "DistBackendError"},
        {"event": "attempt", "t": 146.0, "started": 144.0, "restart": 1, "resumed_from": 10, "world_size": 1},
        {"event": "first_step", "t": 147.0, "restart": 1, "step": 11},
        {"event": "attempt", "t": 139.0, "started": 138.0, "restart": 1, "resumed_from": 40, "world_size": 2},
        {"event": "first_step", "t": 141.5, "restart": 1, "step": 41},
    ]
    events[6:] = [{**e, "t": e["t"] + 20, **({"started": 158.0} if "started" in e else {})} for e in events[6:]]
    cost = faults.costs("kill-node:1@15:30", events, now=170.0, samples=1920)
    assert (cost["seconds"], cost["attempts"], cost["steps_redone"], cost["world_sizes"]) == (30.0, 3, 5, [2, 1, 2])
    assert cost["regrown_from"] == 40 and cost["regrown_s"] == pytest.approx(161.5 - 133.0)
    assert cost["recovered_s"] == pytest.approx(44.0)  # the first step after the fault: at one node
    never = faults.costs("kill-node:1@15:30", events[:6], now=170.0, samples=1920)  # the job ended before
    assert (never["world_sizes"], never["regrown_s"], never["regrown_from"]) == ([2, 1], None, None)
    assert "world_sizes" not in faults.costs("kill-node:1@15", events[:6], now=170.0, samples=1920)


def test_the_report_pairs_each_faulted_configuration_with_the_same_one_without_it(tmp_path):
    """A straggler's runs (step time 3x), runs killed and continued (with their costs) and runs killed and not
    continued, each against ddp x2 without a fault, over 5 rounds: the Faults section's rows."""
    from distbench.sweep.report import write_report
    from tests.helpers import synthetic_record

    def run(spec: str, rnd: int, step_ms: float = 10.0, status: str = "ok", **more) -> dict:
        rec = synthetic_record("ddp", 2, 1, rnd, 1000.0, status)
        if status == "ok":
            rec.update(step_time_ms={"p50": step_ms, "p90": step_ms}, global_batch_size=64, wall_time_s=10.0)
        return {**rec, "fault_spec": spec, **more}

    records = [synthetic_record("single", 1, 1, rnd, 600.0) for rnd in range(1, 6)]
    cost = {"first_noticed_s": 0.1, "restarted_s": 0.2, "recovered_s": 4.0, "steps_redone": 5}
    for rnd in range(1, 6):
        records += [run("none", rnd), run("slow:1:3", rnd, step_ms=30.0 + rnd / 10)]
        records += [run("kill:1@15", rnd, fault={**cost, "goodput_samples_per_sec": 192.0})]  # 60 x 64 / 10 s: 384
        records += [run("hang:1@15", rnd, status="failed", elapsed_s=40.0 + rnd)]
        grown = {**cost, "goodput_samples_per_sec": 192.0, "world_sizes": [2, 1, 2], "regrown_s": 28.5}
        records += [run("kill-node:1@15:30", rnd, fault=grown)]
    with open(tmp_path / "results.jsonl", "w") as f:
        f.writelines(faults.to_json(r) + "\n" for r in records)
    text = write_report([tmp_path], tmp_path)
    section = text.split("## Faults")[1].split("\n## ")[0]
    rows = {line.split(" | ")[1]: line for line in section.splitlines() if line.startswith("| ddp")}
    print(section)
    assert set(rows) == {"`slow:1:3`", "`kill:1@15`", "`hang:1@15`", "`kill-node:1@15:30`"}
    assert "| 5 of 5 | — | — | — | — | — | — | 3.03x (3.01-3.05) | 1.00x (1.00-1.00) |" in rows["`slow:1:3`"]
    assert "| 5 of 5 | — | 0.1 | 0.2 | 4.0 | 5.0 | — | 1.00x (1.00-1.00) | 0.50x (0.50-0.50) |" in rows["`kill:1@15`"]
    assert "| 0 of 5 | 43.0 | — | — | — | — | — | — | — |" in rows["`hang:1@15`"]
    back = "| 5 of 5 (x2 > x1 > x2) | — | 0.1 | 0.2 | 4.0 | 5.0 | 28.5 | 1.00x (1.00-1.00) | 0.50x (0.50-0.50) |"
    assert back in rows["`kill-node:1@15:30`"]


WATCHED = """
import pathlib, sys, time
from distbench.training.faults import Events, Watchdog

dog = Watchdog(1.0, 0, Events(pathlib.Path(sys.argv[1])))
dog.beat()
with dog.held():  # evaluating, checkpointing: not watched
    time.sleep(2.5)
print("held", flush=True)
time.sleep(30)  # no step: stalled
print("never")
"""


def test_the_watchdog_ends_a_stalled_process_with_one_line_and_an_event(tmp_path):
    import subprocess
    import sys
    import time

    from tests.helpers import ROOT

    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WATCHED, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert time.monotonic() - t0 < 25
    assert (proc.returncode, proc.stdout) == (1, "held\n")
    assert proc.stderr.startswith("error: rank 0: no training step completed in 1 s (--timeout-s + 15 s)")
    assert len(proc.stderr.splitlines()) == 1
    assert [e["error"] for e in faults.Events(tmp_path).read() if e["event"] == "noticed"] == ["distbench watchdog"]


def test_a_rollback_in_the_same_process_is_an_attempt_of_its_own(tmp_path):
    """Horovod Elastic's survivors roll back without a restart: the loop's next start is an attempt (started when
    the rollback was done, from the committed step), said by whichever survivor is rank 0 now."""
    events = faults.Events(tmp_path)
    first, survivor = faults.Injector("kill:0@12", 0, 0, events), faults.Injector("kill:0@12", 1, 0, events)
    first.started(resumed_from=0)
    events.add("fault", kind="kill", rank=0, step=12)
    survivor.rejoined(0)  # rank 0 died: rank 1 is rank 0 of the world left
    before = time.time()
    survivor.started(resumed_from=10)
    survivor.stepped(11)
    attempts = [e for e in events.read() if e["event"] == "attempt"]
    assert [(a["restart"], a["resumed_from"]) for a in attempts] == [(0, 0), (1, 10)]
    assert attempts[1]["started"] >= before  # not its process's start
    cost = faults.costs("kill:0@12", events.read(), time.time(), 30 * 64)
    assert (cost["attempts"], cost["steps_redone"]) == (2, 2) and 0 <= cost["restarted_s"] <= cost["recovered_s"]


def test_a_run_that_continued_without_a_node_is_recorded_as_launched():
    attempt = {"event": "attempt", "world_size": 4, "nodes": 2}
    shrunk = [attempt, {"event": "fault"}, {**attempt, "world_size": 2, "nodes": 1}]
    assert faults.launched(shrunk, 2, 1, continued=True) == (4, 2)
    assert faults.launched(shrunk, 2, 1, continued=False) == (2, 1)  # resumed by hand at another size: a run of its own
    assert faults.launched([attempt], 2, 1, continued=True) == (4, 2)  # after a failure no --fault asked for too
