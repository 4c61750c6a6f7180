"""Slurm: the allocation a command runs in, and each library started across its nodes the way its users start it.

Inside an allocation (`salloc -N 2 ...`, or an sbatch script), every run of a sweep is a job step over the
allocation's first K nodes:

- torchrun on every node, meeting at a c10d rendezvous on the first node:
  `srun --nodes K --ntasks-per-node 1 torchrun --nnodes K --nproc_per_node P --rdzv-backend c10d
  --rdzv-endpoint HEAD:PORT run.py ...`;
- DDP started by srun itself, one task per process (RANK, LOCAL_RANK and WORLD_SIZE from SLURM_PROCID,
  SLURM_LOCALID and SLURM_NTASKS; MASTER_ADDR and MASTER_PORT given): `srun --nodes K --ntasks-per-node P python
  run.py ...`, the form many clusters use;
- `accelerate launch` on every node, each with its own machine rank, which the node's shell fills in
  (`--machine_rank $SLURM_NODEID`, escaped so that it is not expanded where the step is written);
- horovodrun once, on the first node, with `-H` built from the allocation's nodes: on a real cluster it starts the
  other nodes' processes over ssh, as Horovod documents, so ssh between the nodes must work;
- `deepspeed` on every node without ssh (`--no_ssh --node_rank $SLURM_NODEID`), each node writing the same hostfile
  of the allocation's nodes to its own temporary folder first (no shared storage needed), meeting at the first
  node (DeepSpeed's `--launcher slurm` form starts srun itself from one node instead; the per-node form is the one
  that needs neither ssh nor a second scheduler call).

With `compare --restarts N`, the launchers that continue a job run in a step that a task's end does not end
(`--kill-on-bad-exit=0 --no-kill`): torchrun's elastic form on every node (`--nnodes 1:K --max-restarts=N`, the first
node's agent hosting the store: `--rdzv-conf is_host=...`, worked out by each node's shell) for ddp, fsdp, deepspeed
and fabric, and `accelerate launch --max_restarts N` for the accelerate backends.

HEAD is the first node's address as Slurm knows it (`scontrol show node`: NodeAddr), which is how a job finds its
peers on any cluster. Nothing here runs a step: it reads the allocation and writes commands.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from distbench.errors import UserError
from distbench.launching.launch import (
    ACCELERATE,
    DEEPSPEED,
    HOROVODRUN,
    PYTHON,
    SRUN,
    TORCHRUN,
    DeepSpeedLaunch,
    Horovodrun,
    Launcher,
    PerNode,
    ShellWord,
    shell_line,
)
from distbench.process import LOOPBACK

SRUN_KILL = ["--kill-on-bad-exit=1"]  # a task that fails ends its step: the other nodes do not wait on it
# a step whose launchers continue without a lost node: a task that ends (its node lost) does not end the others, nor
# does a node that fails end the job's allocation under it (--no-kill)
SRUN_CONTINUE = ["--kill-on-bad-exit=0", "--no-kill"]


def _run(args: list[str]) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as e:
        raise UserError(f"--scheduler slurm needs Slurm's {args[0]}, which is not installed here") from e
    if proc.returncode != 0:
        raise UserError(f"{' '.join(args)} failed: {' '.join(proc.stderr.split())}")
    return proc.stdout


@dataclass(frozen=True)
class Allocation:
    """The Slurm allocation this process runs in: its job, its nodes (in Slurm's order) and their addresses."""

    job_id: str
    nodes: tuple[str, ...]
    addrs: tuple[str, ...]

    @classmethod
    def current(cls, env: Mapping[str, str] = os.environ) -> Allocation:
        job_id = env.get("SLURM_JOB_ID")
        if not job_id:
            raise UserError(
                "--scheduler slurm runs inside a Slurm allocation (salloc -N 2 ..., or an sbatch script: "
                "`run.py slurm-script` writes one); SLURM_JOB_ID is not set here"
            )
        nodes = tuple(_run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]]).split())
        return cls(job_id, nodes, tuple(node_addr(n) for n in nodes))

    def check(self, nodes: int) -> None:
        if nodes > len(self.nodes):
            raise UserError(
                f"--nodes {nodes}: the allocation (job {self.job_id}) has {len(self.nodes)} node(s): "
                f"{', '.join(self.nodes)}"
            )

    def horovod_hosts(self, nodes: int) -> list[str]:
        """horovodrun's -H names of the first `nodes` nodes: their addresses; where several nodes share one address
        of this machine (a test cluster of one host), the distinct names horovodrun runs locally without ssh."""
        addrs = list(self.addrs[:nodes])
        if len(set(addrs)) < len(addrs):
            if set(addrs) != {LOOPBACK}:
                raise UserError(
                    f"nodes {', '.join(self.nodes[:nodes])} share the address {addrs[0]}: horovodrun "
                    "needs one host per node"
                )
            from distbench.launching.topology import HOROVOD_LOCAL_HOSTS, hosts

            if nodes > len(HOROVOD_LOCAL_HOSTS):  # further loopback names exist only in a local run's own namespace
                raise UserError(
                    f"--nodes {nodes}: these nodes share this machine's address, and horovodrun runs at most "
                    f"{len(HOROVOD_LOCAL_HOSTS)} such hosts without ssh ({', '.join(HOROVOD_LOCAL_HOSTS)})"
                )
            return hosts(HOROVODRUN, nodes)
        return addrs


def node_addr(node: str) -> str:
    """The address Slurm gives a node (NodeAddr), which its peers reach it at."""
    for word in _run(["scontrol", "show", "node", node]).split():
        if word.startswith("NodeAddr="):
            return word.removeprefix("NodeAddr=")
    raise UserError(f"scontrol show node {node} gives no NodeAddr")


def step(nodes: int, tasks_per_node: int, name: str, extra: list[str] = (), continues: bool = False) -> list[str]:
    """An srun that starts a job step of `tasks_per_node` tasks on each of the allocation's first `nodes` nodes.
    `continues`: the launchers continue without a lost node (compare --restarts), and a task that ends does not end
    the step (SRUN_CONTINUE)."""
    return [
        "srun",
        "--nodes",
        str(nodes),
        "--ntasks",
        str(nodes * tasks_per_node),
        "--ntasks-per-node",
        str(tasks_per_node),
        f"--job-name={name}",
        *(SRUN_CONTINUE if continues else SRUN_KILL),
        *extra,
    ]


# each node's rank is its own SLURM_NODEID, expanded by the node's shell, not here
NODE_ID = ShellWord('"$SLURM_NODEID"')
# torchrun: the first node's agent serves the c10d store (on nodes that share an address, every agent would match the
# endpoint, and the one that bound the port first would serve it: a lost node could take the store with it)
IS_HOST = ShellWord('"is_host=$((SLURM_NODEID == 0))"')


def torchrun_step(
    alloc: Allocation, program: list[str], nodes: int, nprocs: int, port: int, name: str, restarts: int = 0
) -> list[str]:
    """torchrun on every node; restarting (`restarts`), its elastic form: --max-restarts, from one node to all of
    them (a node that does not come back shrinks the job), the first node's agent hosting the rendezvous' store."""
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{alloc.addrs[0]}:{port}"]
    if not restarts:
        agent = ["torchrun", "--nnodes", str(nodes), "--nproc_per_node", str(nprocs)]
        return [*step(nodes, 1, name), *agent, *rendezvous, *program]
    agent = ["torchrun", "--nnodes", f"1:{nodes}", "--nproc_per_node", str(nprocs), f"--max-restarts={restarts}"]
    line = shell_line([*agent, *rendezvous, "--rdzv-conf", IS_HOST, *program])
    return [*step(nodes, 1, name, continues=True), "bash", "-c", "exec " + line]


def srun_step(program: list[str], nodes: int, nprocs: int, name: str) -> list[str]:
    """One task per process: the program reads its rank from Slurm (launch.SRUN)."""
    return [*step(nodes, nprocs, name), "python", *program]


def per_node_step(
    launcher: PerNode, alloc: Allocation, program: list[str], nodes: int, nprocs: int, port: int, name: str
) -> list[str]:
    """One launcher per node (accelerate launch), each with its node's rank."""
    line = shell_line(launcher.node_command(program, nprocs, alloc.addrs[:nodes], port, NODE_ID))
    return [*step(nodes, 1, name, continues=restarts_of(launcher) > 0), "bash", "-c", "exec " + line]


def deepspeed_step(alloc: Allocation, program: list[str], nodes: int, nprocs: int, port: int, name: str) -> list[str]:
    # DeepSpeed: each node's hostfile is a copy of its own (node-local; on nodes sharing a folder, one file per node),
    # filled in by the node's shell, not here, and removed when it ends
    hostfile = ShellWord('"${TMPDIR:-/tmp}/distbench-hostfile-$SLURM_JOB_ID.$SLURM_STEP_ID.$SLURM_NODEID"')
    names = " ".join(map(shlex.quote, alloc.nodes[:nodes]))
    write = f"printf '%s slots={nprocs}\\n' {names} > {hostfile}"
    run = shell_line(DeepSpeedLaunch(hostfile).node_command(program, nprocs, alloc.addrs[:nodes], port, NODE_ID))
    return [*step(nodes, 1, name), "bash", "-c", f"trap 'rm -f {hostfile}' EXIT; {write} && {run}"]


def horovod_step(
    alloc: Allocation, program: list[str], nodes: int, nprocs: int, name: str, restarts: int = 0
) -> list[str]:
    # Horovod: one horovodrun on the first node; it starts every node's processes (over ssh on a real cluster)
    where = step(1, 1, name, ["--nodelist", alloc.nodes[0]])
    hosts = alloc.horovod_hosts(nodes)
    if not restarts:
        slots = ",".join(f"{host}:{nprocs}" for host in hosts)
        return [*where, "horovodrun", "-np", str(nodes * nprocs), "-H", slots, "python", *program]
    # Horovod Elastic: the hosts from a discovery script, written by the first node's shell into its own temporary
    # folder (as deepspeed_step's hostfile) and removed when the step ends; horovodrun blacklists a failed host
    from distbench.launching.topology import discovery_script

    script = ShellWord('"${TMPDIR:-/tmp}/distbench-discover-$SLURM_JOB_ID.$SLURM_STEP_ID.sh"')
    text = shlex.quote(discovery_script(hosts, nprocs))
    write = f"printf '%s' {text} > {script} && chmod +x {script}"
    run = shell_line(Horovodrun(restarts, script).commands(program, nprocs, hosts)[0])
    return [*where, "bash", "-c", f"trap 'rm -f {script}' EXIT; {write} && {run}"]


def launch_step(
    launcher: Launcher, alloc: Allocation, program: list[str], nodes: int, nprocs: int, port: int, name: str
) -> list[str]:
    """The job step that starts `program` with `launcher` on the allocation's first `nodes` nodes (with restarts
    where the launcher was made with them: commands.restarting_launcher)."""
    if launcher.name == TORCHRUN.name:
        return torchrun_step(alloc, program, nodes, nprocs, port, name, restarts_of(launcher))
    if launcher.name == ACCELERATE.name:
        return per_node_step(launcher, alloc, program, nodes, nprocs, port, name)
    if launcher.name == HOROVODRUN.name:  # Horovod Elastic's is another instance
        return horovod_step(alloc, program, nodes, nprocs, name, restarts_of(launcher))
    if launcher is DEEPSPEED:
        return deepspeed_step(alloc, program, nodes, nprocs, port, name)
    if launcher in (SRUN, PYTHON):  # one process: a step of one task on the first node
        return srun_step(program, nodes, nprocs, name)
    raise UserError(f"{launcher.name} has no Slurm form here")


def restarts_of(launcher: Launcher) -> int:
    """How many times `launcher` continues a job after a failure (0: the usual launchers)."""
    return getattr(launcher, "restarts", 0)


def steps_named(job_id: str, name: str) -> list[str]:
    """The ids (JOB.STEP) of the job's running steps called `name`."""
    out = subprocess.run(
        ["squeue", "--steps", "--noheader", "--format", "%i %j", "--jobs", job_id],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()[1:] == [name]]


def cancel(job_id: str, name: str) -> None:
    """End every step of the job called `name`, with every process it started on every node."""
    for step_id in steps_named(job_id, name):
        subprocess.run(["scancel", step_id], capture_output=True, timeout=60)
