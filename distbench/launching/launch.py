"""Launchers: how processes are started, one node or several.

One `Launcher` per launcher (plain python, torchrun, accelerate launch, horovodrun, deepspeed, fabric run, variables
set by hand, srun's own tasks). Each builds its real command lines (one node or several). The help text (`run.py
--help`) and the commands that `compare`, the benchmarks and the tests run come from the same `commands()`: the help
leaves out the loopback rendezvous that a local run adds, and writes placeholders where a user fills in numbers.

What a launcher tells the processes it starts, and reading it (`LaunchEnv`, `current()`), is the core's
(distbench/process.py), so that the backends, below launching, can use it; a launcher here carries the name that
module gives it. No distributed library is imported here.
"""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import sys
from pathlib import Path

from distbench import process
from distbench.process import LOOPBACK, free_port

BIN = Path(sys.executable).parent


Program = list[str]  # what follows `python`: ["run.py", *args] or ["-m", "package.module", *args]


class Launcher:
    """A way to start N processes per node on one or several nodes.

    `commands(program, nprocs, hosts, port)` returns the command lines to run, one per node for launchers
    that run an agent on each node (torchrun, accelerate launch), one for all nodes for horovodrun. With
    `hosts=None` the launcher's own rendezvous defaults are used (the form shown in help); a local run
    passes `hosts=[LOOPBACK]` and a free port. Executables are named as a user types them; `resolve()`
    turns the names into this environment's paths.
    """

    name: str = ""  # the launcher's name (distbench/process.py), as the registry lists it and the record keeps it
    several_nodes_note: str = ""  # how the several-node command is used, for the help text
    in_slurm_step: bool = True  # whether it runs inside a Slurm job step (launching/slurm.py); if not: srun's tasks

    def commands(
        self, program: Program, nprocs: int | str, hosts: list[str] | None = None, port: int | str | None = None
    ) -> list[list[str]]:
        """The command lines that start `program` (what follows `python`) with `nprocs` processes per node on
        `hosts` (None: the launcher's own defaults, as the help shows them), meeting at `port` on the first host.
        `nprocs` may be a placeholder ("N") where only the form is shown."""
        raise NotImplementedError


class PerNode(Launcher):
    """A launcher started once on every node, each told its node's rank (accelerate launch, deepspeed, fabric run):
    `commands` for several hosts is `node_command` for each rank; a Slurm job step runs `node_command` once per node
    with the rank its shell expands (launching/slurm.py)."""

    def commands(self, program, nprocs, hosts=None, port=None):
        if not hosts or len(hosts) == 1:
            return [self.one_node(program, nprocs, hosts[0] if hosts else None, port)]
        return [self.node_command(program, nprocs, hosts, port, str(rank)) for rank in range(len(hosts))]

    def one_node(self, program: Program, nprocs: int | str, host: str | None, port: int | str | None) -> list[str]:
        """The command on one machine, meeting at `host`:`port` (None: the launcher's defaults)."""
        raise NotImplementedError

    def node_command(
        self, program: Program, nprocs: int | str, hosts: list[str], port: int | str, node_rank: str
    ) -> list[str]:
        """The command on the node of rank `node_rank` (a number, or a word the node's shell expands: ShellWord) of
        `hosts`, meeting at `port` on the first."""
        raise NotImplementedError


class ShellWord(str):
    """A command's argument that the shell running it expands ("$SLURM_NODEID"): written unquoted (`shell_line`)."""


def shell_line(argv: list[str]) -> str:
    """`argv` as one shell line: every argument quoted but ShellWords."""
    return " ".join(word if isinstance(word, ShellWord) else shlex.quote(word) for word in argv)


class Python(Launcher):
    """Plain python: one process, on one node."""

    name = process.PYTHON

    def commands(self, program, nprocs, hosts=None, port=None):
        if nprocs not in (1, "1") or (hosts and len(hosts) > 1):
            raise ValueError(f"plain python runs one process, not {nprocs} on {len(hosts or [1])} node(s)")
        return [["python", *program]]


class Torchrun(Launcher):
    """torchrun: an agent on every node; static rendezvous on one node, c10d across several. With `restarts`, the
    agent restarts the worker group up to that many times after a worker fails (`--max-restarts`), meeting at a c10d
    rendezvous on one node too, as torchrun's elastic form does; on several, from one node to all of them
    (`--nnodes 1:N`), so that the job continues without a node that does not come back."""

    name = process.TORCHRUN
    several_nodes_note = "(the same on each machine)"

    def __init__(self, restarts: int = 0):
        self.restarts = restarts

    def commands(self, program, nprocs, hosts=None, port=None):
        agent = ["torchrun", "--nproc_per_node", str(nprocs)]
        agent += [f"--max-restarts={self.restarts}"] if self.restarts else []
        if not hosts:
            return [[*agent, *program]]
        if len(hosts) == 1 and self.restarts:
            return [[*agent, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts[0]}:{port}", *program]]
        if len(hosts) == 1:  # torchrun's static rendezvous on the given address
            return [[*agent, "--master_addr", hosts[0], "--master_port", str(port), *program]]
        # several nodes: one agent per node, meeting at the c10d rendezvous on the first node; restarting, down to
        # one node (--nnodes 1:N, torchrun's elastic form): a node that does not come back shrinks the job
        nnodes = f"1:{len(hosts)}" if self.restarts else str(len(hosts))
        rendezvous = ["--nnodes", nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts[0]}:{port}"]
        return [[*agent, *rendezvous, *_rendezvous_host(hosts, i), *program] for i in range(len(hosts))]


def _rendezvous_host(hosts: list, i: int) -> list[str]:
    """torchrun finds the agent that serves the c10d store by matching the endpoint to its machine's host name, and
    tells the workers the store's address by that name; simulated nodes are told which: the first, as on a cluster
    whose endpoint is its first node. Where every node is one address (loopback), every agent would match, and the
    one that bound the port first would serve the store: a node that went down could take it with it. A node whose
    name does not resolve to its link's address (in a network namespace of its own) is told its address besides
    (--local-addr). Host names (the help's form) stand."""
    try:
        addresses = all(ipaddress.ip_address(h) for h in hosts)
    except ValueError:
        return []
    if not addresses:
        return []
    host = ["--rdzv-conf", f"is_host={int(i == 0)}"]
    return [*host, "--local-addr", hosts[i]] if len(set(hosts)) == len(hosts) else host


class AccelerateLaunch(PerNode):
    """accelerate launch: one per node, each with its machine rank (it runs torchrun's agent)."""

    name = process.ACCELERATE
    several_nodes_note = "(on machine R: --machine_rank R)"
    # Accelerate: the precision and compiler settings are given, so a user's `accelerate config` file cannot change
    # what is compared.
    FIXED = ("--mixed_precision", "no", "--dynamo_backend", "no")

    def __init__(self, restarts: int = 0):
        self.restarts = restarts  # --max_restarts: torchrun's agent, which accelerate launch runs, restarts the group

    def _launch(self) -> list[str]:
        return ["accelerate", "launch", *(["--max_restarts", str(self.restarts)] if self.restarts else [])]

    def one_node(self, program, nprocs, host, port):
        if nprocs in (1, "1"):
            return ["python", *program]  # accelerate launch with one process is plain python
        meet = ["--main_process_ip", host, "--main_process_port", str(port)] if host else []
        return [*self._launch(), "--multi_gpu", "--num_processes", str(nprocs), *self.FIXED, *meet, *program]

    def node_command(self, program, nprocs, hosts, port, node_rank):
        total = str(int(nprocs) * len(hosts))  # --num_processes counts every node's
        several = ["--num_processes", total, "--num_machines", str(len(hosts)), "--machine_rank", node_rank]
        meet = ["--main_process_ip", hosts[0], "--main_process_port", str(port)]
        return [*self._launch(), "--multi_gpu", *several, *self.FIXED, *meet, *program]


class Horovodrun(Launcher):
    """horovodrun: one command for every node; it starts the other nodes' processes itself. With `restarts`, Horovod
    Elastic: the job continues after a worker fails, over the hosts that the discovery script (`discovery`: its path)
    lists and horovodrun has not blacklisted (a failed worker's host is), from --max-np processes down to one node's
    (--min-np), through at most `restarts` resets (--reset-limit). `takes_back`: a blacklisted host is taken back once
    the discovery lists it again after its cool-down (--blacklist-cooldown-range; without it, never)."""

    name = process.HOROVODRUN
    several_nodes_note = "(once, on host1)"
    # Horovod: a failed host's cool-down is the lower limit x 2^(times blacklisted), plus up to the lower limit, at
    # most the upper (horovod/runner/elastic/discovery.py): from 1 s, 2-3 s after its first failure
    COOLDOWN_S = ("1", "60")

    def __init__(self, restarts: int = 0, discovery: str = "./discover_hosts.sh", takes_back: bool = False):
        self.restarts, self.discovery, self.takes_back = restarts, discovery, takes_back

    def commands(self, program, nprocs, hosts=None, port=None):
        # Horovod: one horovodrun for every node; it starts the remote ones (ssh, or directly for a host
        # whose address is this machine's). The port is its own choice.
        if not hosts:
            return [["horovodrun", "-np", str(nprocs), *self.elastic(nprocs, "N"), "python", *program]]
        total = str(int(nprocs) * len(hosts)) if len(hosts) > 1 else str(nprocs)
        if self.restarts:  # the discovery script lists the hosts
            return [["horovodrun", "-np", total, *self.elastic(nprocs, total), "python", *program]]
        slots = ",".join(f"{host}:{nprocs}" for host in hosts)
        return [["horovodrun", "-np", total, "-H", slots, "python", *program]]

    def elastic(self, per_node: int | str, total: str) -> list[str]:
        """Horovod Elastic's options (none without `restarts`)."""
        if not self.restarts:
            return []
        sizes = ["--min-np", str(per_node), "--max-np", total, "--reset-limit", str(self.restarts)]
        back = ["--blacklist-cooldown-range", *self.COOLDOWN_S] if self.takes_back else []
        return [*sizes, *back, "--host-discovery-script", self.discovery]


class DeepSpeedLaunch(PerNode):
    """deepspeed: DeepSpeed's own launcher; on one machine `--num_gpus N` processes (on a CPU, --num_gpus counts
    processes), each told torch's variables and its own (process.py). On several, its launch on each node by itself
    (--no_ssh) with the node's rank, every node reading the same hostfile (`hostfile`: its path)."""

    name = process.DEEPSPEED
    several_nodes_note = "(on node R, without ssh; `hostfile` lists each node: `host1 slots=4`)"

    def __init__(self, hostfile: str = "hostfile"):
        self.hostfile = hostfile

    def one_node(self, program, nprocs, host, port):
        # DeepSpeed: --no_local_rank, or it appends --local_rank=N to the program's arguments
        meet = ["--master_addr", host, "--master_port", str(port)] if host else []
        return ["deepspeed", "--num_gpus", str(nprocs), "--no_local_rank", *meet, *module_or_script(program)]

    def node_command(self, program, nprocs, hosts, port, node_rank):
        # DeepSpeed: with --no_ssh the hostfile's names only key each node's slots (its world_info); the workers
        # meet at --master_addr, so a node's name need not resolve
        runner = ["deepspeed", "--num_gpus", str(nprocs), "--no_local_rank", "--hostfile", self.hostfile, "--no_ssh"]
        meet = ["--master_addr", hosts[0], "--master_port", str(port)]
        return [*runner, *meet, "--node_rank", node_rank, *module_or_script(program)]


def hostfile_lines(names: list[str], nprocs: int | str) -> str:
    """A DeepSpeed hostfile: each node's name and its processes (`slots`), in node-rank order."""
    return "".join(f"{name} slots={nprocs}\n" for name in names)


def module_or_script(program: Program) -> list[str]:
    """What follows `deepspeed`'s own options: the script and its arguments, or `--module pkg.mod ARGS`."""
    return ["--module", *program[1:]] if program[0] == "-m" else list(program)


class FabricRun(PerNode):
    """fabric run: Lightning Fabric's own launcher (lightning_fabric.cli), which runs torchrun's agent with a static
    rendezvous at --main-address:--main-port; one per node, each with its --node-rank."""

    name = process.FABRIC
    several_nodes_note = "(on machine R: --node-rank R)"
    # Fabric: inside a Slurm job step the Fabric object takes Slurm's variables for its own (its SLURMEnvironment is
    # tried before torchrun's), so the step's one task per node would be its processes; on Slurm, Fabric's users
    # start one task per process with srun (the backend's SRUN launcher)
    in_slurm_step = False

    def one_node(self, program, nprocs, host, port):
        meet = ["--main-address", host, "--main-port", str(port)] if host else []
        return ["fabric", "run", "--devices", str(nprocs), *meet, *_script_then_args(program)]

    def node_command(self, program, nprocs, hosts, port, node_rank):
        several = ["--num-nodes", str(len(hosts)), "--node-rank", node_rank]
        meet = ["--main-address", hosts[0], "--main-port", str(port)]
        return ["fabric", "run", "--devices", str(nprocs), *several, *meet, *_script_then_args(program)]


def _script_then_args(program: Program) -> list[str]:
    """What follows `fabric run`'s options: the script, then `--` and its arguments (Fabric's CLI would otherwise
    take the program's --precision for its own). Fabric runs a script by its path only: a module runs through
    run.py, which runs it as `python -m` does."""
    script, *args = ["run.py", *program] if program[0] == "-m" else program
    return [script, "--", *args]


class ByHand(Launcher):
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for each process by the user or a scheduler (srun)."""

    name = process.BY_HAND

    def commands(self, program, nprocs, hosts=None, port=None):
        hosts, n = hosts or ["HOST0"], int(nprocs)
        return [
            [
                "env",
                f"RANK={node * n + local}",
                f"WORLD_SIZE={n * len(hosts)}",
                f"LOCAL_RANK={local}",
                f"LOCAL_WORLD_SIZE={n}",
                f"MASTER_ADDR={hosts[0]}",
                f"MASTER_PORT={port or 29500}",
                "python",
                *program,
            ]
            for node in range(len(hosts))
            for local in range(n)
        ]


class Srun(Launcher):
    """srun's own tasks, one per process: SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (the run needs MASTER_ADDR and
    MASTER_PORT besides)."""

    name = process.SRUN
    several_nodes_note = "(in an allocation; MASTER_ADDR/MASTER_PORT: the first node's)"

    def commands(self, program, nprocs, hosts=None, port=None):
        nodes = len(hosts or [None])
        return [["srun", "--nodes", str(nodes), "--ntasks-per-node", str(nprocs), "python", *program]]


PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, BY_HAND, SRUN, DEEPSPEED, FABRIC = (
    Python(),
    Torchrun(),
    AccelerateLaunch(),
    Horovodrun(),
    ByHand(),
    Srun(),
    DeepSpeedLaunch(),
    FabricRun(),
)
# every launcher by its name: what launching reads of a backend registry entry (distbench/launching/commands.py)
LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher for launcher in (PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, BY_HAND, SRUN, DEEPSPEED, FABRIC)
}


def resolve(argv: list[str]) -> list[str]:
    """A command as `commands()` writes it, with this environment's python and launchers."""
    argv = list(argv)
    if "python" in argv:  # the interpreter that runs the program (the first "python": later ones are its own)
        argv[argv.index("python")] = sys.executable
    # the launcher, after what a simulated node puts in front of it (`ip netns exec NS`, `taskset -c CORES`)
    start = 4 if argv[0] == "ip" else 0
    start += 3 if argv[start] == "taskset" else 0
    if argv[start] in ("torchrun", "accelerate", "horovodrun", "deepspeed", "fabric"):
        argv[start] = str(BIN / argv[start])
    if argv[0] == "ip":
        argv[0] = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin") or "ip"
    return argv


def local_argv(launcher: Launcher, program: Program, nprocs: int) -> list[str]:
    """The one command that starts `program` with nprocs processes on this machine, rendezvous on loopback,
    as a user types it (`resolve` it to run it)."""
    (argv,) = launcher.commands(program, nprocs, hosts=[LOOPBACK], port=free_port())
    return argv
