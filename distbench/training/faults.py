"""Faults on request (`--fault`), and what one cost the run.

A fault is deterministic: one rank, one global step (or every step), on the job's first attempt only, so that a
launcher that restarts the worker group (torchrun's agent with --max-restarts) runs the next attempt clean:

- `kill:RANK@STEP`: the rank SIGKILLs itself after that step (and its checkpoint, if one was due), as a crashed
  process: its sockets close, and the other ranks' next collective fails at once;
- `kill-node:NODE@STEP`: every process of the node does, its launcher's agent first (torchrun's, which would
  otherwise restart them there), as a lost machine: the job continues only without the node;
  `kill-node:NODE@STEP:BACK`: the same, and BACK seconds later the node comes back, its agent started again by the
  job's executor (compare --restarts: sweep/node_return.py), as a repaired machine: the job may grow again;
- `hang:RANK@STEP`: the rank stops issuing collectives after that step and sleeps, alive and holding its sockets, as
  a wedged device leaves a process: only a collective timeout (`--timeout-s`) tells the others;
- `slow:RANK:FACTOR`: a straggler: after each step's forward and backward the rank waits FACTOR - 1 times as long
  as they took, so that its computation takes FACTOR times as long; every rank that exchanges with it waits;
- `link-down:NODE@STEP:SECONDS`: the node's first process takes the node's switch port down after that step, and it
  comes up again SECONDS later (per-node links only: launching/netns.py), as a pulled cable: the processes live
  on, their packets lost meanwhile; the job rides it out (its next step completes once TCP's retransmission gets
  through) or, past --timeout-s, a collective fails.

What a fault cost is told by events (`events.jsonl` in `--checkpoint-dir`, one JSON object a line, appended whole):
the fault as the rank met it, each attempt's start (its rank 0's process creation) and the step it resumed from,
each attempt's first completed step (and the first after a fault the job rode out), and a survivor's failed
collective. The record's `fault` (`costs`) reads them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from distbench.config import NO_FAULT, parse_fault
from distbench.errors import UserError
from distbench.launching import netns, topology
from distbench.process import ACCELERATE, DEEPSPEED, FABRIC, NODE_RETURNED_ENV, NODE_RETURNS_ENV, TORCHRUN
from distbench.records import to_json
from distbench.training.timer import process_start_unix

EVENTS = "events.jsonl"
# the launchers that run an agent on each node, the parent of its workers (kill-node kills it too)
AGENTS = (TORCHRUN, ACCELERATE, DEEPSPEED, FABRIC)


class Events:
    """The run's events file in its checkpoint folder (None: nowhere to keep them, none kept)."""

    def __init__(self, folder: Path | None):
        self.path = None if folder is None else folder / EVENTS

    def add(self, event: str, **fields) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = to_json({"event": event, "t": time.time(), **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one write of a whole line: appends from several ranks never interleave
        finally:
            os.close(fd)

    def read(self) -> list[dict]:
        if self.path is None or not self.path.is_file():
            return []
        events = []
        for line in self.path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill mid-write: not an event
                continue
        return events


class Injector:
    """The fault on its rank, on the first attempt; the events of every rank's attempt."""

    def __init__(
        self, text: str | None, rank: int, restart_count: int, events: Events, on_cpu: bool = True, place=None
    ):
        """`on_cpu`: the rank computes on its CPU (not a device's, not an emulation's waits): a straggler's computation
        is timed by its main thread's CPU time, which a wait for the other ranks' exchange does not advance (DDP's
        and FSDP's backward waits for it); else by the wall clock, that wait included. `place`: the process's
        LaunchEnv (its node, and whether a per-node agent started it), for the node faults."""
        self.clock = time.thread_time if on_cpu else time.perf_counter
        fault = parse_fault(text)
        node, local_rank = (place.node_rank, place.local_rank) if place is not None else (0, 0)
        met = check_here(text, place, events, restart_count)
        self.fault = fault if fault is not None and not met and _mine(fault, rank, node, local_rank) else None
        self.riding: int | None = None  # link-down: the step after which the link went down, until the next one
        self.agent = place is not None and place.launcher in AGENTS  # this process's parent restarts its workers
        self.rank, self.restart_count, self.events = rank, restart_count, events
        self.first_step_said = False
        self.rollbacks = 0  # of the loop in this process (Horovod Elastic continues in the survivors)

    def rejoined(self, rank: int) -> None:
        """The loop starts again in this process, rolled back, as `rank` of the world that survived."""
        self.rank, self.rollbacks, self.first_step_said = rank, self.rollbacks + 1, False

    def started(self, resumed_from: int, world_size: int = 1, nodes: int = 1) -> None:
        """At the attempt's start (rank 0): when its process was made, the step it resumes from and the world it runs
        in. A run that starts from step 0 on its first attempt starts the events afresh."""
        if self.rank != 0:
            return
        fresh = self.restart_count == 0 and self.rollbacks == 0
        if resumed_from == 0 and fresh and self.events.path is not None:
            self.events.path.unlink(missing_ok=True)
        # to the clock tick (psutil's create_time can be 1 s off); after a rollback in this process: now
        started = process_start_unix() if self.rollbacks == 0 else time.time()
        attempt = self.restart_count + self.rollbacks
        said = {"world_size": world_size, "nodes": nodes}
        self.events.add("attempt", restart=attempt, started=started, resumed_from=resumed_from, **said)

    def computed(self, seconds: float) -> None:
        """After a step's forward and backward, which took `seconds` of its `clock`: a straggler waits out its
        factor."""
        if self.fault is not None and self.fault.kind == "slow":
            time.sleep((self.fault.factor - 1.0) * seconds)

    def stepped(self, step: int) -> None:
        """After global step `step` (and its checkpoint): the attempt's first step is an event (rank 0); a kill or
        a hang at this step happens."""
        if self.rank == 0 and not self.first_step_said:
            self.first_step_said = True
            self.events.add("first_step", restart=self.restart_count + self.rollbacks, step=step)
        if self.riding is not None and step > self.riding:  # the job's next step after the link went down
            self.riding = None
            self.events.add("next_step", rank=self.rank, step=step)
        fault = self.fault
        if fault is None or fault.kind == "slow" or fault.step != step:
            return
        self.events.add("fault", kind=fault.kind, rank=fault.rank, step=step)
        if fault.kind == "link-down":  # this process lives on; once (a rollback may train the step again)
            netns.link_down(fault.rank, fault.seconds)
            self.fault, self.riding = None, step
            return
        if fault.kind == "kill-node":
            topology.drop_host()  # Horovod Elastic's discovery no longer lists the node (no other launcher's has one)
        if fault.kind == "kill-node" and self.agent:
            os.kill(os.getppid(), signal.SIGKILL)  # the node's agent: its parent (taskset and ip netns exec exec it)
        if fault.kind in ("kill", "kill-node"):
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: alive, its sockets open, never at another collective; a signal still ends it
            time.sleep(3600)

    def noticed(self, error: BaseException) -> None:
        """A survivor's collective failed (the fault's rank is gone or silent): when it knew."""
        self.events.add(
            "noticed", rank=self.rank, restart=self.restart_count + self.rollbacks, error=type(error).__name__
        )


def job_restarts(restart_count: int) -> int:
    """This process's attempt of the job, from its agent's restart count: on a node that came back (its agent started
    again: sweep/node_return.py) at least 1, since its agent counts from 0 and its workers join a job under way."""
    return max(restart_count, 1) if os.environ.get(NODE_RETURNED_ENV) == "1" else restart_count


def _mine(fault, rank: int, node: int, local_rank: int) -> bool:
    """Whether the process of `rank` (`local_rank` on `node`) meets `fault`: a link-down on its node's first process,
    a kill-node on every process of the node, the others on their rank."""
    if fault.kind == "link-down":
        return fault.rank == node and local_rank == 0
    return fault.rank == (node if fault.kind == "kill-node" else rank)


def check_here(text: str | None, place, events: Events, restart_count: int) -> bool:
    """Whether the run already met its fault (once per run: not again in an attempt that resumed past it, which the
    events say; without a checkpoint folder to keep them, not again in a restarted group, which may have fewer nodes);
    where it has not, a node fault that this process's job cannot meet is one line (run: before anything starts)."""
    met = any(e["event"] == "fault" for e in events.read()) if events.path else restart_count > 0
    fault = parse_fault(text)
    if fault is not None and fault.of_node and not met:
        _check_node(text, fault, place.nodes if place is not None else 1)
    if fault is not None and fault.returns and os.environ.get(NODE_RETURNS_ENV) != "1":
        raise UserError(
            f"--fault {text}: the node comes back when compare --restarts N starts it again (or lists it again "
            "in Horovod Elastic's discovery), as a cluster does a repaired machine; a launch of its own cannot: give "
            "kill-node without a return"
        )
    return met


def _check_node(text: str, fault, nodes: int) -> None:
    """A node fault on a node the job has; a link-down where the node has a link of its own: else one line."""
    if (why := fault.beyond(text, nodes)) is not None:
        raise UserError(why)
    if fault.kind == "link-down" and netns.switch() is None:
        raise UserError(
            f"--fault {text}: the node has no link of its own here; per-node links come with compare or simulate "
            "--link-mode per-node --nodes 2 or more"
        )


WATCHDOG_GRACE_S = 15  # past --timeout-s: the library's own timeout acts first where it has one


class Watchdog:
    """distbench's own: where no training step completes for --timeout-s + WATCHDOG_GRACE_S (armed at the first step;
    not while evaluating or checkpointing, whose collectives have their library's timeout), the job is stalled (a
    hung rank that the library does not notice: Horovod's cycle waits for its tensors for ever): one line, an event,
    and this process ends, so that its launcher ends the job."""

    def __init__(self, limit_s: float, rank: int, events: Events):
        self.limit, self.rank, self.events = limit_s, rank, events
        self.last: float | None = None  # the last beat; None: not armed, or held
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, name="distbench-watchdog", daemon=True).start()

    def beat(self) -> None:
        self.last = time.monotonic()

    @contextlib.contextmanager
    def held(self):
        """Not watching meanwhile (evaluation, a checkpoint); the clock starts again after."""
        armed, self.last = self.last is not None, None
        try:
            yield
        finally:
            self.last = time.monotonic() if armed else None

    def stop(self) -> None:
        self.stopped.set()

    def _watch(self) -> None:
        while not self.stopped.wait(1.0):
            last = self.last
            if last is not None and time.monotonic() - last > self.limit:
                self._fire()

    def _fire(self) -> None:
        self.events.add("noticed", rank=self.rank, error="distbench watchdog")
        print(
            f"error: rank {self.rank}: no training step completed in {self.limit:.0f} s (--timeout-s + "
            f"{WATCHDOG_GRACE_S} s): the job is stalled (a rank hangs?); distbench's watchdog ends this process",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)


def this_launch(events: list[dict]) -> list[dict]:
    """The events since this launch's first attempt (the last attempt numbered 0: a run resumed by hand appends its
    own to the folder's events)."""
    firsts = [i for i, e in enumerate(events) if e["event"] == "attempt" and e.get("restart") == 0]
    return events[firsts[-1] :] if firsts else events


def launched(events: list[dict], world_size: int, nodes: int, continued: bool) -> tuple[int, int]:
    """The world the run was launched with: where its library continued it after a failure (`continued`: a restarted
    group, a rollback in these processes), this launch's first attempt's (a later one may have fewer nodes or ranks:
    a job that continued without a node); else this attempt's `world_size` and `nodes` (a run resumed by hand, at
    another size or not, is a run of its own)."""
    first = next((e for e in this_launch(events) if e["event"] == "attempt" and "world_size" in e), None)
    return (first["world_size"], first["nodes"]) if continued and first else (world_size, nodes)


def unplanned(events: list[dict], now: float, samples: int) -> dict | None:
    """The record's `fault` for a run that no --fault touched but that its library continued after a failure (a node
    that a cluster lost, Slurm took down, ...): when it happened is not known, so its times are from the first
    survivor's failed collective (or, where none failed, the next attempt's start); the steps redone are not known.
    None where the run did not continue."""
    mine = this_launch(events)
    attempts = [e for e in mine if e["event"] == "attempt"]
    if len(attempts) < 2:
        return None
    noticed = [e for e in mine if e["event"] == "noticed"]
    t = noticed[0]["t"] if noticed else attempts[1]["started"]
    firsts = sorted(e["t"] for e in mine if e["event"] == "first_step" and e["t"] > t)
    wall = now - attempts[0]["started"]
    return {
        "spec": NO_FAULT,
        "kind": "unplanned",  # a failure that no --fault asked for
        "met": True,
        "first_noticed_by": noticed[0]["error"] if noticed else None,
        "restarted_s": attempts[1]["started"] - t,
        "recovered_s": firsts[0] - t if firsts else None,
        "steps_redone": None,
        "attempts": len(attempts),
        "run_wall_s": wall,
        "goodput_samples_per_sec": samples / wall if wall > 0 else None,
    }


def costs(text: str | None, events: list[dict], now: float, samples: int, kept: bool = True) -> dict | None:
    """The record's `fault`: the fault asked for, and, where the run met it and continued, what it cost: when the
    first survivor noticed, when the launcher had the next attempt running (every survivor gone by then: the
    agent restarts the whole group), when that attempt completed its first step (or, where the job rode the fault
    out in the same processes, its next step), how many steps were trained again,
    and the whole run's useful samples per second of wall time (its goodput), from the first attempt's start.
    `kept`: whether the run kept events (a --checkpoint-dir); without them whether a kill or a hang was met is not
    known (`met` null), not "not met". A run without a fault that its library continued after one: `unplanned`."""
    fault = parse_fault(text)
    if fault is None:
        return unplanned(events, now, samples) if kept else None
    said = {"spec": text, "kind": fault.kind, "rank": fault.rank, "step": fault.step or None, "factor": fault.factor}
    if fault.kind == "link-down" or fault.returns:
        said["seconds"] = fault.seconds  # down for, or back after
    if fault.kind == "slow":  # every step of the run: what it cost is the step time against a run without it
        return {**said, "met": True}
    if not kept:
        return {**said, "met": None}
    met = next((e for e in events if e["event"] == "fault"), None)
    attempts = [e for e in events if e["event"] == "attempt"]
    if met is None or not attempts:
        return {**said, "met": False}
    t = met["t"]
    after = [a for a in attempts if a["started"] > t]
    firsts = sorted(e["t"] for e in events if e["event"] in ("first_step", "next_step") and e["t"] > t)
    survivor = (lambda e: True) if fault.of_node else (lambda e: e["rank"] != fault.rank)
    noticed = sorted((e["t"] - t, e["error"]) for e in events if e["event"] == "noticed" and e["t"] > t and survivor(e))
    wall = now - attempts[0]["started"]
    return {
        **said,
        "met": True,
        "first_noticed_s": noticed[0][0] if noticed else None,
        "first_noticed_by": noticed[0][1] if noticed else None,  # the failed collective's error, or the watchdog
        "restarted_s": after[0]["started"] - t if after else None,
        "recovered_s": firsts[0] - t if firsts else None,
        "steps_redone": met["step"] - after[0]["resumed_from"] if after else (0 if firsts else None),  # rode it out
        "attempts": len(attempts),
        **(regrown(attempts, events, t + fault.seconds) if fault.returns else {}),
        "run_wall_s": wall,
        "goodput_samples_per_sec": samples / wall if wall > 0 else None,
    }


def regrown(attempts: list[dict], events: list[dict], back: float) -> dict:
    """A lost node's return (kill-node:NODE@STEP:BACK), from the time it came back (`back`): each attempt's world
    size in order (the job's path: 2, 1, 2 where it shrank and grew again), and when the first attempt at the
    launched size after the node's return completed its first step (None: the job did not grow again)."""
    full = attempts[0]["world_size"]
    grown = next((a for a in attempts if a["started"] > back and a["world_size"] == full), None)
    firsts = sorted(e["t"] for e in events if e["event"] == "first_step" and grown and e["t"] > grown["started"])
    return {
        "world_sizes": [a["world_size"] for a in attempts],
        "regrown_s": firsts[0] - back if firsts else None,  # from the node's return to the first step at full size
        "regrown_from": grown["resumed_from"] if grown else None,  # the step the grown job resumed from
    }
