"""Where a run's processes go, declared once: the nodes, the processes on each, the link between the nodes (its rate
and how it is made) and the scheduler that starts them.

Every command that places processes (compare, simulate, commbench, project, slurm-script) builds these options from
PLACEMENT (cli/declared.placement_params) and reads what it was given into one `Placement` value; compare's axes
(sweep/configuration.py) take their flag, help and parser from the same declarations, as comma-separated lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from distbench.errors import UserError
from distbench.launching import link

SCHEDULERS = ("local", "slurm")  # this machine (simulated nodes), or job steps of a Slurm allocation (real nodes)


def _positive(flag: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value <= 0:
            raise UserError(f"{flag} must be positive, got {value}")
        return value

    return check


def _one_of(flag: str, allowed: tuple[str, ...]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in allowed:
            raise UserError(f"{flag} {value!r}: one of {', '.join(allowed)}")
        return value

    return check


@dataclass(frozen=True)
class Declared:
    """One placement option: its flag, type, default and help, and its check, which returns the value in the one form
    the records use (a rate: "1000mbit" is "1gbit") or raises one line naming the flag."""

    flag: str
    type: type
    default: Any
    help: str
    check: Callable[[Any], Any]

    def one(self, value) -> Any:
        """A value given on its own (typer has converted it to `type`), checked."""
        return None if value is None else self.check(value)

    def values(self, text: str) -> list:
        """A comma-separated list of values (compare's axes), each converted and checked."""
        items = [v.strip() for v in str(text).split(",") if v.strip()]
        if not items:
            raise UserError(f"{self.flag} is empty")
        try:
            values = [self.type(v) for v in items]
        except ValueError:
            raise UserError(f"{self.flag} must be comma-separated integers, got {text!r}") from None
        return [self.check(v) for v in values]


PLACEMENT = {
    "nodes": Declared(
        "--nodes",
        int,
        1,
        "Nodes: simulated on this machine (each on its own share of the cores, started with the launcher's "
        "multi-node form), real under --scheduler slurm.",
        _positive("--nodes"),
    ),
    "nprocs": Declared(
        "--nprocs", int, 1, "Processes per node (the world size is nodes x processes).", _positive("--nprocs")
    ),
    "link_rate": Declared(
        "--link-rate",
        str,
        link.UNSHAPED,
        "The link's rate as tc writes it (e.g. 10gbit, 1gbit, 100mbit; none: unshaped): the runs go into a private "
        "network namespace whose links are shaped with tc (needs root or user namespaces).",
        link.canonical_rate,
    ),
    "link_mode": Declared(
        "--link-mode",
        str,
        link.MODES[0],
        "How the link is made: shared (one token bucket on loopback for all traffic, a hub) or per-node (each "
        "simulated node in a network namespace of its own with a NIC of --link-rate each way on a switch); "
        "docs/commbench.md.",
        _one_of("--link-mode", link.MODES),
    ),
    "scheduler": Declared(
        "--scheduler",
        str,
        SCHEDULERS[0],
        "Where the processes go: local (this machine; simulated nodes with --nodes) or slurm (job steps over the "
        "allocation this command runs in: real nodes; docs/slurm.md).",
        _one_of("--scheduler", SCHEDULERS),
    ),
}


@dataclass(frozen=True)
class Placement:
    """Where one job's processes go (a sweep's configuration holds the same fields, one value of each axis)."""

    nodes: int = PLACEMENT["nodes"].default
    nprocs: int = PLACEMENT["nprocs"].default
    link_rate: str = PLACEMENT["link_rate"].default
    link_mode: str = PLACEMENT["link_mode"].default
    scheduler: str = PLACEMENT["scheduler"].default

    @classmethod
    def given(cls, values: dict) -> Placement:
        """The placement among a command's values (taken out of them), each checked: one line for a bad one."""
        return cls(**{f.name: PLACEMENT[f.name].one(values.pop(f.name)) for f in fields(cls) if f.name in values})

    @property
    def world_size(self) -> int:
        """Every process of the job: nodes x processes per node."""
        return self.nodes * self.nprocs

    def said(self) -> str:
        """In words: "2 node(s) x 1 process(es), link 100mbit, per-node"."""
        shaped = f"link {self.link_rate}, {self.link_mode}" if self.link_rate != link.UNSHAPED else "link unshaped"
        return f"{self.nodes} node(s) x {self.nprocs} process(es), {shaped}"
