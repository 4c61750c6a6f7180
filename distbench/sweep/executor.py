"""Executors: where and how one configuration's processes start, and its record collected.

The plan (distbench/sweep/plan.py) and the rounds (distbench/sweep/runner.py) know nothing of how processes
start; an executor knows nothing of rounds or statistics. `Executor` is the seam:

- `check(configs)`: refuse, in one line and before any run, what cannot run where this executor runs them;
- `cpus_per_node(nodes)`: the CPUs each of `nodes` nodes has for a run (threads default to them / processes);
- `run(config, args, out_json, log, timeout_s, program=None)`: start `run.py ARGS` (or another program of
  distbench's that writes out_json: the commbench worker) as that configuration, wait for it within the timeout, and
  return its record (or a failure record with the cause), with the command that started it.

`run` is the same for every executor (`run_one` waits and collects the record); what differs is how a run starts,
`start(config, args, program)`, and what the executor adds to its record, `add_facts(record, config)`.

`LocalExecutor` runs on this machine: each backend's usual launcher, as simulated nodes with the launcher's
multi-node form when the configuration has several, over a shaped link when it has one. A cluster scheduler is
another executor.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from distbench.backends import DISTRIBUTED, get_spec
from distbench.config import parse_fault
from distbench.errors import UserError
from distbench.launching import bridge, link, netns, topology
from distbench.launching.commands import restarting_launcher, usual_launcher
from distbench.launching.launch import Horovodrun, Launcher, local_argv, resolve
from distbench.launching.netns import NodeNetwork
from distbench.machine import available_cpus
from distbench.process import LOOPBACK
from distbench.records import read_records
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.node_return import LostNode, node_return, return_error, returned_env, returns

SCHEDULERS = ("local", "slurm")


def executor_for(scheduler: str, slurm_launch: str = "usual", restarts: int = 0) -> Executor:
    """The executor of `--scheduler`: one line for an unknown one, or for Slurm outside an allocation. `restarts`:
    each backend under the launcher that continues its job after a failure (compare --restarts)."""
    if scheduler not in SCHEDULERS:
        raise UserError(f"--scheduler {scheduler!r}: one of {', '.join(SCHEDULERS)}")
    if scheduler == "slurm":
        from distbench.sweep.slurm import SlurmExecutor

        return SlurmExecutor(slurm_launch, restarts=restarts)
    return LocalExecutor(restarts)


@dataclass(frozen=True)
class Started:
    """One run, ready to start: its commands (started together), the variables they get beyond this process's
    environment, the line its record shows, and what else ends it on a timeout or Ctrl-C (a scheduler's step)."""

    commands: list[list[str]]
    env: dict[str, str]
    shown: str
    stop: Callable[[], None] | None = None
    continues: bool = False  # its launchers continue without a node that is lost (compare --restarts): wait_all
    back: LostNode | None = None  # its lost node, back in service (--fault kill-node:NODE@STEP:BACK)


class Executor(ABC):
    """Where and how a configuration's processes start; `run` is every executor's, the rest each one's own."""

    @abstractmethod
    def check(self, configs: list[SweepConfig], emulated: bool = False, dilation: float = 1.0) -> None:
        """Refuse, in one line (UserError) and before any run, what cannot run where this executor runs it
        (`emulated`: the runs compute nothing, --emulate; `dilation`: their links K times slower, --dilation)."""

    @abstractmethod
    def cpus_per_node(self, nodes: int) -> int:
        """The CPUs each of `nodes` nodes has for one run."""

    @abstractmethod
    def start(
        self, config: SweepConfig, args: list[str], program: list[str] | None
    ) -> contextlib.AbstractContextManager[Started]:
        """A context in which `config`'s run can start: what starts it, and whatever it needs while it runs."""

    def add_facts(self, record: dict, config: SweepConfig) -> dict:
        """The record with what this executor knows of the run that the run does not (none by default)."""
        return record

    def run(
        self,
        config: SweepConfig,
        args: list[str],
        out_json: Path,
        log: Path,
        timeout_s: float,
        program: list[str] | None = None,
    ) -> dict:
        """Run `run.py ARGS` (or `program`, what follows python, which writes `out_json`) as `config`, its output in
        `log`, stopped past `timeout_s`: its record, or a failure record whose last line is the cause; either with
        the command that started it."""
        with self.start(config, args, program) as started:
            record = run_one(
                started.commands, out_json, timeout_s, log, started.env, started.stop, started.continues, started.back
            )
        record["command"] = started.shown
        return self.add_facts(record, config)


def launch_config(
    backend: str,
    world_size: int,
    nodes: int,
    args: list[str],
    program: list[str] | None = None,
    net: NodeNetwork | None = None,
    restarts: int = 0,
    takes_back: bool = False,
) -> topology.NodeLaunch:
    """The command(s) that start `run.py --backend BACKEND ARGS` (or `program`, what follows python) with world_size
    processes: the backend's usual launcher, or with `restarts` the one that restarts its workers that many times
    (commands.restarting_launcher; `takes_back`: a lost node that comes back), as `nodes` simulated nodes when there
    are several (each in its own network namespace of `net`, at its own address, when given)."""
    spec = get_spec(backend)
    program = program or spec.program(args)
    launcher = restarting_launcher(backend, restarts, takes_back) if restarts else usual_launcher(backend)
    if nodes == 1:
        launcher = topology.discovering(launcher, [LOOPBACK], world_size)
        return topology.NodeLaunch([local_argv(launcher, program, world_size)], topology.discovery_env(launcher))
    if net is None:
        return topology.node_launch(launcher, program, nodes, world_size // nodes)
    if isinstance(launcher, Horovodrun):  # one horovodrun at the switch; each worker enters its node
        names, per_node = topology.hosts(launcher, nodes), world_size // nodes
        launcher = topology.discovering(launcher, names, per_node)
        (argv,) = launcher.commands([], per_node, names)
        cores = topology.SimulatedNodes.split(nodes, shared=True).env_value()  # checked: LocalExecutor.check
        env = {topology.NODE_CORES_ENV: cores, **topology.discovery_env(launcher)}
        started = topology.NodeLaunch([argv[: argv.index("python")] + net.horovod_worker(program)], env)
    else:
        addrs = [netns.node_addr(i) for i in range(nodes)]
        started = topology.node_launch(launcher, program, nodes, world_size // nodes, addrs, net.wrap)
    return topology.NodeLaunch(started.commands, {**started.env, **net.env()})


def check_continues(launcher: Launcher, nodes: int) -> None:
    """One line where `launcher` cannot continue a job of `nodes` simulated nodes after a failure."""
    if isinstance(launcher, Horovodrun) and nodes < 2:
        raise UserError(
            "--restarts with horovod on one node: Horovod Elastic continues on the hosts left after it blacklists the "
            "failed worker's, and with one there are none (nor can it start elastic on one host without a "
            "--network-interface); give --nodes 2 or more"
        )


def link_error(config: SweepConfig) -> str | None:
    """Why `config`'s link (or a node's fault) cannot be what it says, or None. A per-node link joins nodes: with one
    node its processes talk over their own loopback, and the rate would be recorded for a link that carries nothing.
    A link-down needs a node's link of its own."""
    if config.link_mode == "per-node" and config.nodes == 1 and config.link_rate != link.UNSHAPED:
        return (
            f"--link-mode per-node --link-rate {config.link_rate} with one node: a per-node link joins nodes and "
            "would carry nothing here; give --nodes 2 or more, or --link-mode shared"
        )
    fault = parse_fault(config.fault)
    if fault is not None and fault.kind == "link-down" and not (config.link_mode == "per-node" and config.nodes > 1):
        return (
            f"--fault {config.fault} takes a node's own link down: give --link-mode per-node and --nodes 2 or more "
            "(with one shared link there is no node's link to lose)"
        )
    return fault.beyond(config.fault, config.nodes) if fault is not None else None


class LocalExecutor(Executor):
    """This machine: simulated nodes on their own cores, a shaped loopback in a private network namespace; with
    `restarts`, each backend under the launcher that restarts its workers after a failure (compare --restarts)."""

    dilation = 1.0  # --dilation: the links are shaped at their rate / K (check sets it)

    def __init__(self, restarts: int = 0):
        self.restarts = restarts

    def check(self, configs: list[SweepConfig], emulated: bool = False, dilation: float = 1.0) -> None:
        """Nodes and links that cannot run here: one line, before any run (`emulated`: the runs compute nothing, and
        their nodes may share cores; `dilation`: their links are shaped K times slower). A shaped link re-runs this
        command in a private network namespace, so it comes last."""
        self.dilation = dilation
        for c in configs:
            if (error := link_error(c)) is not None:
                raise UserError(error)
            distributed = self.restarts and c.backend in DISTRIBUTED
            continuing = restarting_launcher(c.backend, self.restarts) if distributed else None
            if continuing is not None:
                check_continues(continuing, c.nodes)
            if (error := return_error(c.fault, continuing)) is not None:
                raise UserError(error)
            if c.nodes > 1:
                topology.SimulatedNodes.split(c.nodes, shared=emulated)  # a core per node that computes
                launcher = usual_launcher(c.backend)
                if c.backend in DISTRIBUTED:
                    topology.hosts(launcher, c.nodes)
        if any(self._per_node(c) for c in configs) and os.geteuid() != 0:
            raise UserError("--link-mode per-node makes a network namespace per node (ip netns add): run it as root")
        if any(link.parse_rate(c.link_rate) is not None or self._per_node(c) for c in configs):
            link.enter_private_namespace()  # returns once inside
        if aliased := next((c for c in configs if self._aliases(c)), None):  # horovodrun's hosts beyond two
            link.enter_private_namespace(f"horovod on {aliased.nodes} simulated nodes (its hosts beyond two)")
        for c in configs if emulated else []:  # many nodes' links on one host: no more than its bridge carries
            if self._per_node(c):
                bridge.check(c.nodes, c.link_rate, dilation)

    @staticmethod
    def _per_node(config: SweepConfig) -> bool:
        return config.link_mode == "per-node" and config.nodes > 1

    @staticmethod
    def _aliases(config: SweepConfig) -> list[str]:
        """The loopback addresses horovodrun's simulated nodes need beyond two (topology.horovod_aliases)."""
        if config.backend not in DISTRIBUTED or not isinstance(usual_launcher(config.backend), Horovodrun):
            return []
        return topology.horovod_aliases(config.nodes)

    def cpus_per_node(self, nodes: int) -> int:
        """Simulated nodes share this machine's usable CPUs (emulated nodes, more than the CPUs: one each)."""
        return max(1, available_cpus() // nodes)

    @contextlib.contextmanager
    def links(self, config: SweepConfig):
        """The links of one run: a namespace per simulated node joined by a switch (per-node), or this namespace's
        loopback shaped (shared; unshaped where the run has no link); yields the node network, or None."""
        rate = link.dilated(config.link_rate, self.dilation)
        if aliases := self._aliases(config):
            link.add_loopback_addresses(aliases)  # check entered the private namespace for them
        if not self._per_node(config):
            if link.inside():
                link.shape(rate)
            yield None
            return
        link.shape(link.UNSHAPED)  # each node's own processes talk over its loopback, unshaped
        net = NodeNetwork(config.nodes, rate).up()
        try:
            yield net
        finally:
            net.down()

    @contextlib.contextmanager
    def start(self, config: SweepConfig, args: list[str], program: list[str] | None = None) -> Iterator[Started]:
        """The backend's usual launcher (as simulated nodes where `config` has several), inside the run's links."""
        with self.links(config) as net:
            restarts = self.restarts if config.backend in DISTRIBUTED else 0
            takes_back = bool(restarts) and returns(config.fault)
            launch = launch_config(
                config.backend, config.world_size, config.nodes, args, program, net, restarts, takes_back
            )
            commands, env = [resolve(c) for c in launch.commands], launch.env
            back = node_return(config.fault, commands, env) if restarts else None  # checked: LocalExecutor.check
            env = returned_env(env) if back is not None else env
            shown = topology.NodeLaunch(launch.commands, env).shell()
            try:
                yield Started(commands, env, shown, continues=restarts > 0, back=back)
            finally:
                topology.discarded(launch.env)

    def run_attached(self, config: SweepConfig, args: list[str], timeout_s: float) -> int:
        """One job in the foreground, its output to this terminal: its exit code. Past the timeout its processes are
        stopped and subprocess.TimeoutExpired raised."""
        with self.start(config, args) as started:
            print(f"running ({config.link_said()}): {started.shown}", file=sys.stderr, flush=True)
            env = {**os.environ, **started.env}
            procs = [subprocess.Popen(cmd, env=env, preexec_fn=own_session(os.getpid())) for cmd in started.commands]
            try:
                return wait_all(procs, timeout_s)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                for p in procs:
                    kill_group(p)
                raise


def tail(text: str, n: int = 12) -> str:
    """The last lines of a failed run's log, ending with the most telling one: distbench's own one-line
    error if there is one, else the last exception line, else the last line (launchers add pages of
    their own failure reports after the cause)."""
    lines = [line for line in text.splitlines() if line.strip()]
    cause = [line for line in lines if re.search(r"(^|:)error: ", line)]
    cause = cause or [line for line in lines if re.match(r"^(\[\w+\]:?\s*(<stderr>:)?)?\w*(Error|Exception): ", line)]
    return "\n".join(lines[-n:] + cause[-1:])


PR_SET_PDEATHSIG = 1  # prctl(2)
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child calls it between fork and exec


def own_session(parent: int) -> Callable[[], None]:
    """What a launcher runs before its program: a session of its own (kill_group stops it with its workers), and
    SIGTERM when `parent` (this process) dies, however it dies, so that no launcher outlives the sweep that started
    it (SIGKILL leaves the sweep no chance to stop them; each launcher stops its own workers on SIGTERM)."""

    def preexec() -> None:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was asked for
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def kill_group(proc: subprocess.Popen) -> None:
    """Stop a run and everything its launcher started (launchers spawn workers in the same session)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


PEER_GRACE_S = 30  # after one agent of a multi-node run fails, how long the others get to fail on their own


def wait_all(
    procs: list[subprocess.Popen], timeout_s: float, continues: bool = False, back: Returning | None = None
) -> int:
    """Wait for every process; the first non-zero exit code, or 0. A process that outlives a failed peer by
    PEER_GRACE_S (an agent waiting at a rendezvous that will never complete) is stopped. `continues`: the launchers
    continue without a lost node (torchrun's --nnodes 1:N, Horovod Elastic): a launcher killed with its node
    (SIGKILL, --fault kill-node) is not the job's failure, and the others get until the timeout. `back`: the lost
    node back in service (its agent started again and added to `procs`, or its host listed again for horovodrun);
    once the job's first agents have ended, an agent started again has PEER_GRACE_S to end and its exit code is not
    the job's (one that came back after the job ended would wait at its rendezvous for
    ever; the record, written or not, says whether the job succeeded)."""
    deadline, failed_at, first, late = time.monotonic() + timeout_s, None, len(procs), False
    # a launcher killed with its node: here, by SIGKILL; srun's step, whose task was: 128 + SIGKILL
    lost = (-signal.SIGKILL, 128 + signal.SIGKILL) if continues else ()
    while True:
        if back is not None:
            back.node.poll(procs, back.start)
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return next((c for c in (codes[:first] if late else codes) if c != 0 and c not in lost), 0)
        if not late and len(procs) > first and all(c is not None for c in codes[:first]):
            late, failed_at = True, time.monotonic()  # the job's first agents are done: the node back may end too
        if failed_at is None and not continues and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S:
            for p in procs:
                kill_group(p)
            continue
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired([p.args for p in procs], timeout_s)
        time.sleep(0.05)


@dataclass(frozen=True)
class Returning:
    """A lost node's return (node_return.LostNode) as wait_all carries it out: how to start a node's agent again."""

    node: LostNode
    start: Callable[[list[str], dict], subprocess.Popen]


def _stop(procs: list[subprocess.Popen], stop) -> None:
    if stop is not None:
        stop()
    for p in procs:
        kill_group(p)


def run_one(
    cmds: list[list[str]],
    out_json: Path,
    timeout_s: float,
    log_path: Path,
    env: dict[str, str] | None = None,
    stop=None,
    continues: bool = False,
    back: LostNode | None = None,
) -> dict:
    """Run one configuration's launcher commands (several: one agent per simulated node) together, with `env`
    added; returns the results record plus `status` and timings, or a failure record. `stop`: what else ends the
    run's processes on a timeout or Ctrl-C, beyond their process groups here (a scheduler's step); `continues`:
    the launchers continue without a lost node (wait_all); `back`: the lost node that comes back, started again."""
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:

        def start(cmd: list[str], added: dict | None = None) -> subprocess.Popen:
            return subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=own_session(os.getpid()),
                text=True,
                env={**os.environ, **(env or {}), **(added or {})},
            )

        procs = []
        try:
            for cmd in cmds:
                procs.append(start(cmd))
        except OSError as e:  # a launcher that is not installed here (a package without its command's script)
            _stop(procs, stop)
            return {"status": "failed", "error": f"cannot start {cmd[0]}: {e.strerror}", "elapsed_s": 0.0}
        try:
            rc = wait_all(procs, timeout_s, continues, Returning(back, start) if back is not None else None)
        except subprocess.TimeoutExpired:
            _stop(procs, stop)
            # the cause last, as in every failure record: what the log said before, then why it ended
            return {
                "status": "failed",
                "error": f"{tail(log_path.read_text())}\ntimed out after {timeout_s:.0f} s".strip(),
            }
        except KeyboardInterrupt:
            _stop(procs, stop)
            raise
    elapsed = time.time() - started
    if rc != 0 or not out_json.exists():
        # the cause last, in full: the report and the progress line show that line
        error = tail(log_path.read_text())
        if rc == 0:
            error += f"\nexited 0 without writing its record {out_json}"
        error = error.strip() or f"exit code {rc}, nothing in its log"
        return {"status": "failed", "returncode": rc, "error": error, "elapsed_s": elapsed}
    (record,) = read_records(out_json)
    record["status"] = "ok"
    record["elapsed_s"] = elapsed
    if record.get("first_step_unix"):
        record["launch_to_first_step_s"] = record["first_step_unix"] - started
    return record
