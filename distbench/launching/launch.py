"""Launchers: how processes are started, one node or several.

One `Launcher` per launcher (plain python, torchrun, accelerate launch, horovodrun, variables set by hand, srun's
own tasks). Each builds its real command lines (one node or several). The help text (`run.py --help`) and the
commands that `compare`, the benchmarks and the tests run come from the same `commands()`: the help leaves out the
loopback rendezvous that a local run adds, and writes placeholders where a user fills in numbers.

What a launcher tells the processes it starts, and reading it (`LaunchEnv`, `current()`), is the core's
(distbench/process.py), so that the backends, below launching, can use it; a launcher here carries the name that
module gives it. No distributed library is imported here.
"""

from __future__ import annotations

import ipaddress
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

    def commands(
        self, program: Program, nprocs: int | str, hosts: list[str] | None = None, port: int | str | None = None
    ) -> list[list[str]]:
        """The command lines that start `program` (what follows `python`) with `nprocs` processes per node on
        `hosts` (None: the launcher's own defaults, as the help shows them), meeting at `port` on the first host.
        `nprocs` may be a placeholder ("N") where only the form is shown."""
        raise NotImplementedError


class Python(Launcher):
    """Plain python: one process, on one node."""

    name = process.PYTHON

    def commands(self, program, nprocs, hosts=None, port=None):
        if nprocs not in (1, "1") or (hosts and len(hosts) > 1):
            raise ValueError(f"plain python runs one process, not {nprocs} on {len(hosts or [1])} node(s)")
        return [["python", *program]]


class Torchrun(Launcher):
    """torchrun: an agent on every node; static rendezvous on one node, c10d across several."""

    name = process.TORCHRUN
    several_nodes_note = "(the same on each machine)"

    def commands(self, program, nprocs, hosts=None, port=None):
        agent = ["torchrun", "--nproc_per_node", str(nprocs)]
        if not hosts:
            return [[*agent, *program]]
        if len(hosts) == 1:  # torchrun's static rendezvous on the given address
            return [[*agent, "--master_addr", hosts[0], "--master_port", str(port), *program]]
        # several nodes: one agent per node, meeting at the c10d rendezvous on the first node
        rendezvous = ["--nnodes", str(len(hosts)), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts[0]}:{port}"]
        return [[*agent, *rendezvous, *_rendezvous_host(hosts, i), *program] for i in range(len(hosts))]


def _rendezvous_host(hosts: list, i: int) -> list[str]:
    """torchrun finds the agent that serves the c10d store by matching the endpoint to its machine's host name, and
    tells the workers the store's address by that name; a node whose name does not resolve to its link's address (a
    simulated node in a network namespace of its own) is told both: the first node hosts, the others do not, and
    each node's address is its own (--local-addr). Where every node is one address (loopback), the names stand."""
    distinct = len(set(hosts)) == len(hosts)
    try:
        addresses = all(ipaddress.ip_address(h) for h in hosts)
    except ValueError:
        addresses = False
    return ["--rdzv-conf", f"is_host={int(i == 0)}", "--local-addr", hosts[i]] if distinct and addresses else []


class AccelerateLaunch(Launcher):
    """accelerate launch: one per node, each with its machine rank (it runs torchrun's agent)."""

    name = process.ACCELERATE
    several_nodes_note = "(on machine R: --machine_rank R)"

    def commands(self, program, nprocs, hosts=None, port=None):
        nodes = len(hosts or [None])
        if nodes == 1 and nprocs in (1, "1"):
            return [["python", *program]]  # accelerate launch with one process is plain python
        total = str(nprocs) if nodes == 1 else str(int(nprocs) * nodes)  # --num_processes counts all nodes
        # Accelerate: the precision and compiler settings are given, so a user's `accelerate config` file
        # cannot change what is compared.
        fixed = ["--mixed_precision", "no", "--dynamo_backend", "no"]
        if not hosts:
            return [["accelerate", "launch", "--multi_gpu", "--num_processes", total, *fixed, *program]]
        rendezvous = ["--main_process_ip", hosts[0], "--main_process_port", str(port)]
        return [
            [
                "accelerate",
                "launch",
                "--multi_gpu",
                "--num_processes",
                total,
                "--num_machines",
                str(nodes),
                "--machine_rank",
                str(rank),
                *fixed,
                *rendezvous,
                *program,
            ]
            for rank in range(nodes)
        ]


class Horovodrun(Launcher):
    """horovodrun: one command for every node; it starts the other nodes' processes itself."""

    name = process.HOROVODRUN
    several_nodes_note = "(once, on host1)"

    def commands(self, program, nprocs, hosts=None, port=None):
        # Horovod: one horovodrun for every node; it starts the remote ones (ssh, or directly for a host
        # whose address is this machine's). The port is its own choice.
        if not hosts:
            return [["horovodrun", "-np", str(nprocs), "python", *program]]
        total = str(int(nprocs) * len(hosts)) if len(hosts) > 1 else str(nprocs)
        slots = ",".join(f"{host}:{nprocs}" for host in hosts)
        return [["horovodrun", "-np", total, "-H", slots, "python", *program]]


class DeepSpeedLaunch(Launcher):
    """deepspeed: DeepSpeed's own launcher; on one machine `--num_gpus N` processes (on a CPU, --num_gpus counts
    processes), each told torch's variables and its own (process.py). On several, its launch on each node by itself
    (--no_ssh) with the node's rank, every node reading the same hostfile (`hostfile`: its path)."""

    name = process.DEEPSPEED
    several_nodes_note = "(on node R, without ssh; `hostfile` lists each node: `host1 slots=4`)"

    def __init__(self, hostfile: str = "hostfile"):
        self.hostfile = hostfile

    def commands(self, program, nprocs, hosts=None, port=None):
        # DeepSpeed: --no_local_rank, or it appends --local_rank=N to the program's arguments
        runner = ["deepspeed", "--num_gpus", str(nprocs), "--no_local_rank"]
        if not hosts:
            return [[*runner, *module_or_script(program)]]
        meet = ["--master_addr", hosts[0], "--master_port", str(port)]
        if len(hosts) == 1:
            return [[*runner, *meet, *module_or_script(program)]]
        # DeepSpeed: with --no_ssh the hostfile's names only key each node's slots (its world_info); the workers
        # meet at --master_addr, so a node's name need not resolve
        per_node = [*runner, "--hostfile", self.hostfile, "--no_ssh", *meet]
        return [[*per_node, "--node_rank", str(i), *module_or_script(program)] for i in range(len(hosts))]


def hostfile_lines(names: list[str], nprocs: int | str) -> str:
    """A DeepSpeed hostfile: each node's name and its processes (`slots`), in node-rank order."""
    return "".join(f"{name} slots={nprocs}\n" for name in names)


def module_or_script(program: Program) -> list[str]:
    """What follows `deepspeed`'s own options: the script and its arguments, or `--module pkg.mod ARGS`."""
    return ["--module", *program[1:]] if program[0] == "-m" else list(program)


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


PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, BY_HAND, SRUN, DEEPSPEED = (
    Python(),
    Torchrun(),
    AccelerateLaunch(),
    Horovodrun(),
    ByHand(),
    Srun(),
    DeepSpeedLaunch(),
)
# every launcher by its name: what launching reads of a backend registry entry (distbench/launching/commands.py)
LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher for launcher in (PYTHON, TORCHRUN, ACCELERATE, HOROVODRUN, BY_HAND, SRUN, DEEPSPEED)
}


def resolve(argv: list[str]) -> list[str]:
    """A command as `commands()` writes it, with this environment's python and launchers."""
    argv = list(argv)
    if "python" in argv:  # the interpreter that runs the program (the first "python": later ones are its own)
        argv[argv.index("python")] = sys.executable
    # the launcher, after what a simulated node puts in front of it (`ip netns exec NS`, `taskset -c CORES`)
    start = 4 if argv[0] == "ip" else 0
    start += 3 if argv[start] == "taskset" else 0
    if argv[start] in ("torchrun", "accelerate", "horovodrun", "deepspeed"):
        argv[start] = str(BIN / argv[start])
    if argv[0] == "ip":
        argv[0] = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin") or "ip"
    return argv


def local_argv(launcher: Launcher, program: Program, nprocs: int) -> list[str]:
    """The one command that starts `program` with nprocs processes on this machine, rendezvous on loopback,
    as a user types it (`resolve` it to run it)."""
    (argv,) = launcher.commands(program, nprocs, hosts=[LOOPBACK], port=free_port())
    return argv
