"""The Slurm executor: every run of a sweep is a job step over the allocation's nodes, each library started the way
its users start it on Slurm (distbench/launching/slurm.py says how), with `--nodes K` real nodes and `--nprocs P`
processes on each.

A step has the sweep's per-run timeout; a step that fails or hangs (a task killed, a node lost) is ended with every
process it started on every node (srun --kill-on-bad-exit, then scancel of the step by its name), recorded as failed,
and the sweep goes on; Ctrl-C cancels the running step. The record gains the scheduler's facts: the job, the step,
the nodes' names and addresses, and each rank's node.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from pathlib import Path

from distbench.backends import get_spec
from distbench.errors import UserError
from distbench.launching import link, slurm, topology
from distbench.launching.launch import BIN, HOROVODRUN, SRUN, Launcher, free_port
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.executor import run_one

# How each run is started on Slurm: "usual", each backend's usual launcher (torchrun, accelerate launch, horovodrun)
# in its Slurm form; "srun", one srun task per process for the backends srun can start (ddp), the usual for the rest.
LAUNCH_FORMS = ("usual", "srun")


class SlurmExecutor:
    def __init__(self, launch_form: str = "usual", alloc: slurm.Allocation | None = None):
        if launch_form not in LAUNCH_FORMS:
            raise UserError(f"--slurm-launch {launch_form!r}: one of {', '.join(LAUNCH_FORMS)}")
        self.alloc = alloc or slurm.Allocation.current()
        self.launch_form = launch_form
        self._node_cores: list[list[int]] | None = None

    def check(self, configs: list[SweepConfig]) -> None:
        for c in configs:
            self.alloc.check(c.nodes)
            if c.link_rate != link.UNSHAPED:
                raise UserError(
                    f"--link-rate {c.link_rate} shapes this machine's loopback; under --scheduler slurm "
                    "the runs cross the cluster's own network (give none)"
                )
            if self.launcher(c.backend) is HOROVODRUN:
                self.alloc.horovod_hosts(c.nodes)

    def node_cores(self) -> list[list[int]]:
        """The cores a task of each node may use, in node order (one probe step over the whole allocation)."""
        if self._node_cores is None:
            probe = "import os; print(os.environ['SLURM_NODEID'], *sorted(os.sched_getaffinity(0)))"
            cmd = [*slurm.step(len(self.alloc.nodes), 1, "distbench-probe"), "python", "-c", probe]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=self._env({}))
            if proc.returncode != 0:
                raise UserError(f"the probe step of job {self.alloc.job_id} failed: {' '.join(proc.stderr.split())}")
            rows = sorted([int(x) for x in line.split()] for line in proc.stdout.splitlines() if line.strip())
            self._node_cores = [row[1:] for row in rows]
        return self._node_cores

    def cpus_per_node(self, nodes: int) -> int:
        return min(len(cores) for cores in self.node_cores()[:nodes])

    def launcher(self, backend: str) -> Launcher:
        launchers = get_spec(backend).launchers
        return SRUN if self.launch_form == "srun" and SRUN in launchers else launchers[0]

    def command(
        self, config: SweepConfig, args: list[str], name: str, program: list[str] | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The srun that starts this configuration as a job step, and the variables it adds."""
        launcher, port = self.launcher(config.backend), free_port()
        program = program or get_spec(config.backend).program(args)
        cmd = slurm.launch_step(launcher, self.alloc, program, config.nodes, config.nprocs, port, name)
        if launcher is SRUN:  # srun's own tasks meet at the first node
            return cmd, {"MASTER_ADDR": self.alloc.addrs[0], "MASTER_PORT": str(port)}
        if launcher is HOROVODRUN:
            # Horovod: every process confines itself to its node's cores (the ones Slurm gave that node's tasks);
            # several nodes on one host would otherwise run all of horovodrun's processes on the first node's
            cores = topology.SimulatedNodes(tuple(tuple(c) for c in self.node_cores()[: config.nodes]))
            return cmd, {topology.NODE_CORES_ENV: cores.env_value()}
        return cmd, {}

    def _env(self, added: dict[str, str]) -> dict[str, str]:
        # srun passes this environment to its tasks: the launchers and python are this environment's
        return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **added}

    def run(
        self,
        config: SweepConfig,
        args: list[str],
        out_json: Path,
        log: Path,
        timeout_s: float,
        program: list[str] | None = None,
    ) -> dict:
        name = f"distbench-{uuid.uuid4().hex[:12]}"
        cmd, added = self.command(config, args, name, program)
        record = run_one(
            [cmd], out_json, timeout_s, log, self._env(added), stop=lambda: slurm.cancel(self.alloc.job_id, name)
        )
        slurm.cancel(self.alloc.job_id, name)  # a step whose srun ended: nothing of it left on any node
        record["command"] = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in added.items()), *map(shlex.quote, cmd)])
        record["scheduler"] = self.facts(record, config.nodes)
        return record

    def facts(self, record: dict, nodes: int) -> dict:
        """The scheduler's facts of a run: its job, the nodes' names and addresses, each rank's node; the training
        process's own (its step, its CPUs and GPUs) merged in."""
        facts = {
            "name": "slurm",
            "job_id": self.alloc.job_id,
            "nodes": list(self.alloc.nodes[:nodes]),
            "node_addrs": list(self.alloc.addrs[:nodes]),
        }
        ranks = (record.get("topology") or {}).get("rank_nodes")
        if ranks is not None:
            facts["rank_nodes"] = [self.alloc.nodes[i] for i in ranks]
        return {**(record.get("scheduler") or {}), **facts}
