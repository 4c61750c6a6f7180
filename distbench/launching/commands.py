"""Each backend's launch commands: the launchers its registry entry names, as command lines.

The backend registry (backends/__init__.py) names the launchers that may start each backend, the usual one first;
it knows them only by name, since the backends stand below launching. This module reads those entries: the
launchers themselves (`launchers_of`, `usual_launcher`), the command that starts a backend's run (`typed_command`,
`command`), the one line that refuses a launcher a backend cannot join (`check_launch`) and the launch commands
of `run.py --help` (`launch_help`).
"""

from __future__ import annotations

from distbench.backends import REGISTRY, get_spec
from distbench.errors import UserError
from distbench.launching.launch import (
    ACCELERATE,
    BY_HAND,
    HOROVODRUN,
    LAUNCHERS,
    PYTHON,
    TORCHRUN,
    AccelerateLaunch,
    Horovodrun,
    Launcher,
    Torchrun,
    local_argv,
    resolve,
)
from distbench.process import LaunchEnv


def launchers_of(backend: str) -> tuple[Launcher, ...]:
    """The launchers that may start `backend`, its users' usual one first."""
    return tuple(LAUNCHERS[name] for name in get_spec(backend).launchers)


def usual_launcher(backend: str) -> Launcher:
    """The launcher that `backend`'s users usually start it with: what `compare` and the benchmarks run."""
    return launchers_of(backend)[0]


def restarting_launcher(backend: str, restarts: int, takes_back: bool = False) -> Launcher:
    """The launcher that continues `backend`'s job after a failure, up to `restarts` times, as its users run it:
    accelerate launch's --max_restarts for the Accelerate backends; torchrun's --max-restarts for the others that
    torchrun starts (DeepSpeed's and Fabric's users restart under torchrun's agent: their own launchers restart
    nothing); horovodrun's elastic form for Horovod (Horovod Elastic: the survivors continue, no restart), which
    takes a lost host back where `takes_back` (torchrun's agents take a waiting node in unasked)."""
    launchers = launchers_of(backend)
    if ACCELERATE in launchers:
        return AccelerateLaunch(restarts)
    if TORCHRUN in launchers:
        return Torchrun(restarts)
    if HOROVODRUN in launchers:
        return Horovodrun(restarts, takes_back=takes_back)
    raise UserError(
        f"--restarts {restarts}: {backend} has no launcher that continues after a failure "
        f"({', '.join(launcher.name for launcher in launchers)})"
    )


def _one_node_form(launcher: Launcher, program: list[str]) -> list[str]:
    """`launcher`'s one-node command as a user types it, N processes (plain python: its one)."""
    (argv,) = launcher.commands(program, 1 if launcher is PYTHON else "N")
    return argv


def check_launch(backend: str, launch: LaunchEnv) -> None:
    """Refuse, in one line naming the usual command, a launcher whose world `backend` would not see correctly
    (before any setup)."""
    spec = get_spec(backend)
    if not spec.may_join(launch):
        usual = _one_node_form(usual_launcher(backend), spec.program([]))
        raise UserError(
            f"--backend {backend} was started by {launch.launcher} with {launch.world_size} process(es), "
            f"which it cannot join; start it with: {' '.join(usual)}"
        )


def typed_command(backend: str, nprocs: int, args: list[str], launcher: Launcher | None = None) -> list[str]:
    """`run.py --backend BACKEND ARGS` with nprocs processes on this machine, started by the backend's
    usual launcher (or the one given), as a user types it."""
    return local_argv(launcher or usual_launcher(backend), get_spec(backend).program(args), nprocs)


def command(backend: str, nprocs: int, args: list[str], launcher: Launcher | None = None) -> list[str]:
    """typed_command with this environment's python and launchers: ready to run."""
    return resolve(typed_command(backend, nprocs, args, launcher))


def launch_help() -> str:
    """Every backend's launch commands for `run.py --help`: N processes on one machine, then 2 machines of
    4 processes; each block marked \\b so that click keeps it as it is."""
    lines = ["Launch commands (N processes on one machine; several machines):", ""]
    width = max(len(name) for name in REGISTRY) + 1
    for spec in REGISTRY.values():
        usual, *others = launchers_of(spec.name)
        block = [" ".join(_one_node_form(usual, spec.program([])))]
        if spec.distributed:
            several = usual.commands(spec.program([]), 4, hosts=["host1", "host2"], port=29500)[0]
            block.append(f"{' '.join(several)}   {usual.several_nodes_note}")
            block += [
                f"(also: {' '.join(other.commands(spec.program([]), 'N')[0])})"
                for other in others
                if other not in (BY_HAND, PYTHON)
            ]
        lines += ["\b", f"{spec.name:<{width}} {block[0]}", *(f"{'':<{width}} {more}" for more in block[1:]), ""]
    by_hand = [spec.name for spec in REGISTRY.values() if BY_HAND.name in spec.launchers]
    lines += [
        "\b",
        f"{'':<{width}} {', '.join(by_hand[:-1])} and {by_hand[-1]} also join a world whose RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT are set for each process (mpirun, a script of your own); "
        "under Slurm: `run.py slurm-script`.",
        "",
    ]
    return "\n".join(lines)
