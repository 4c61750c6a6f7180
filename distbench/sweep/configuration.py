"""One configuration of a sweep: the axes a sweep varies, each declared once.

Each field of `SweepConfig` is one axis (the task too: a report may hold several sweeps). Its declaration, made with
`axis(...)`, says everything that follows from it:

- `record`: the record field that carries it (threads: `threads_per_process`), read back with the default a
  record from before the axis existed had;
- `sets`: the run option (config.py's RunConfig field) that puts a run on its value: its compare option, parser,
  help and default follow from that option's declaration, and `run_args` passes it;
- `placed`: the placement field (launching/placement.py) it is: its option, parser, help and default follow from
  there (`--nprocs` is per node: the world size is nodes x processes per node, the one derived axis);
- `option`, `help`, `parse`: the `compare` option that sweeps an axis that is neither (the backends); `swept=False`:
  compare takes no list of it (the task; threads, which the sweep sets from --threads or the cores);
- `reference`: its value in the reference configuration (`single` x1: one process, one node, no link, nothing
  compressed), or KEEP where the reference takes the configuration's own;
- `held`: whether a verdict holds it equal between the two configurations it compares (two backends at different
  world sizes measure the world size, not the library);
- `name` and `text`: how it reads in a run's full name (file names, sweep.json) and in a report's short label,
  where it is shown only when it varies;
- `order`: how configurations are listed.

Adding an axis is one field here (and the run option it sets, if it is new): the plan, the executor, the records,
the report's keys, labels, order, verdicts and plots follow (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from distbench.backends import DISTRIBUTED, NAMES, REFERENCE, REGISTRY
from distbench.config import FIELDS, NO_FAULT, GradCompression, flag, to_args
from distbench.errors import UserError
from distbench.launching import link
from distbench.launching.placement import PLACEMENT, Placement

KEEP = object()  # the reference keeps the configuration's own value on this axis


def _csv(text: str, option: str) -> list[str]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items:
        raise UserError(f"{option} is empty")
    return items


def positive_ints(text: str, option: str) -> list[int]:
    """A comma-separated list of positive integers (commbench's --sizes), one line naming `option` if it is not."""
    try:
        values = [int(v) for v in _csv(text, option)]
    except ValueError as e:
        raise UserError(f"{option} must be comma-separated integers, got {text!r}") from e
    if any(v <= 0 for v in values):
        raise UserError(f"{option} values must be positive")
    return values


def _backends(text: str, option: str) -> list[str]:
    from distbench.backends import get_spec

    values = _csv(text, option)
    for name in values:
        get_spec(name)  # an unknown name is one line
    return values


def _one_of(allowed) -> Callable[[str, str], list[str]]:
    """The parser of a comma-separated list whose every value is one of `allowed`."""

    def parse(text: str, option: str) -> list[str]:
        values = _csv(text, option)
        for v in values:
            if v not in allowed:
                raise UserError(f"{option}: {v!r} is not one of {', '.join(allowed)}")
        return values

    return parse


def _run_option_values(name: str) -> Callable[[str, str], list]:
    """The parser of a comma-separated list of run option `name`'s values: of its type, each one of its choices and
    passing its checks, as config.py declares them."""
    declared = FIELDS[name]
    kind, choices = type(declared.default), declared.metadata["choices"]

    def parse(text: str, option: str) -> list:
        values = _one_of(tuple(choices.__members__))(text, option) if choices else _csv(text, option)
        try:
            values = [kind(v) for v in values]
        except ValueError:
            raise UserError(f"{option} must be comma-separated integers, got {text!r}") from None
        for v in values:
            for check in declared.metadata["checks"]:
                if (error := check.error(option, v)) is not None:
                    raise UserError(error)
        return values

    return parse


def _rate_order(rate: str) -> float:
    """Unshaped first, then the fastest link to the slowest."""
    try:
        bits = link.parse_rate(rate)
    except UserError:  # a record from elsewhere with a rate this version cannot read: last
        return 0.0
    return -(bits or float("inf"))


def axis(
    default=None,
    *,
    sets: str | None = None,
    placed: str | None = None,
    swept: bool = True,
    only: Callable[[str], bool] | None = None,
    record: str | None = None,
    option: str | None = None,
    help: str = "",
    parse: Callable[[str, str], list] | None = None,
    reference: Any = KEEP,
    held: bool = False,
    name: Callable[[Any], str] | None = None,
    text: Callable[[Any], str] | None = None,
    order: Callable[[Any], Any] = lambda v: v,
) -> Any:
    """A SweepConfig field with its declaration (the module docstring). An axis that `sets` a run option (config.py)
    or is a `placed` field (launching/placement.py) takes its compare option, parser, help and default from that
    declaration; `swept`: compare takes a list of its values (else the sweep sets it itself); `only`: the backends
    it applies to (the others run at its default alone: a sweep over it does not multiply their runs)."""
    if sets is not None:
        default = FIELDS[sets].default
        option, parse = flag(sets), _run_option_values(sets)
        help = "Comma-separated, a sweep axis: " + FIELDS[sets].metadata["help"]
    elif placed is not None:
        declared = PLACEMENT[placed]
        default = declared.default if default is None else default
        option, help = declared.flag, "Comma-separated, a sweep axis. " + declared.help
        parse = lambda text, _option: declared.values(text)  # noqa: E731
    meta = {
        "sets": sets,
        "only": only,
        "record": record,
        "option": option if swept else None,
        "help": help,
        "parse": parse,
        "reference": reference,
        "held": held,
        "name": name,
        "text": text,
        "order": order,
    }
    return field(default=default, metadata=meta)


_COMPRESSION_ORDER = list(GradCompression.__members__)


@dataclass(frozen=True)
class SweepConfig:
    """What one run of a sweep is: its task and its value on every axis."""

    task: str = axis(swept=False, held=True)
    backend: str = axis(  # the backend's own program names it (registry: spec.program), not run_args
        option="--backends",
        help="Comma-separated backends.",
        parse=_backends,
        reference=REFERENCE,
        order=lambda b: NAMES.index(b) if b in NAMES else len(NAMES),
    )
    world_size: int = axis(placed="nprocs", reference=1, held=True)  # --nprocs is per node: x nodes
    threads: int = axis(
        sets="threads",
        swept=False,
        record="threads_per_process",
        held=True,
        name=lambda t: f"t{t}",
        text=lambda t: f"t{t}",
    )
    accumulate: int = axis(sets="accumulate", name=lambda k: f"acc{k}", text=lambda k: f"acc{k}")
    grad_compression: str = axis(
        sets="grad_compression",
        only=lambda b: b in REGISTRY and REGISTRY[b].compresses,
        reference=GradCompression.none.value,
        name=str,
        text=str,
        order=lambda c: _COMPRESSION_ORDER.index(c) if c in _COMPRESSION_ORDER else 99,
    )
    nodes: int = axis(
        placed="nodes",
        reference=1,
        held=True,
        name=lambda k: f"{k}nodes" if k > 1 else "",
        text=lambda k: f"{k} node{'s' if k > 1 else ''}",
    )
    link_rate: str = axis(
        placed="link_rate",
        reference=link.UNSHAPED,
        held=True,
        name=lambda r: f"link-{r}" if r != link.UNSHAPED else "",
        text=lambda r: "unshaped" if r == link.UNSHAPED else f"@{r}",
        order=_rate_order,
    )
    link_mode: str = axis(
        placed="link_mode",
        reference=link.MODES[0],
        held=True,
        name=lambda m: "" if m == link.MODES[0] else m,
        text=lambda m: f"{m} link",
    )
    zero_stage: int = axis(
        sets="zero_stage",
        only=lambda b: b in REGISTRY and REGISTRY[b].zero_stages,
        reference=0,
        name=lambda k: f"zero{k}" if k else "",
        text="ZeRO-{}".format,
    )
    fault: str = axis(
        sets="fault",
        record="fault_spec",  # a run's own record: its config's; `fault` there is what the fault cost
        only=lambda b: b in DISTRIBUTED,
        reference=NO_FAULT,
        held=True,
        order=lambda f: (f != NO_FAULT, f),  # in the report: each configuration without a fault, then with
        name=lambda f: "" if f == NO_FAULT else "fault-" + f.replace(":", "-").replace("@", "at"),
        text=lambda f: "no fault" if f == NO_FAULT else f"fault {f}",
    )

    @classmethod
    def placed(cls, backend: str, placement: Placement, **axes) -> SweepConfig:
        """The configuration of `backend` placed as `placement` says (a single job's: simulate, commbench)."""
        where = {"world_size": placement.world_size, "nodes": placement.nodes}
        return cls(backend=backend, **where, link_rate=placement.link_rate, link_mode=placement.link_mode, **axes)

    # ---- identity ------------------------------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        """Every axis's value, in declared order."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def sort_key(self) -> tuple:
        """Configurations are listed axis by axis in their declared order: backend (the registry's order), world size,
        threads, accumulation, compression (none first), nodes, link (unshaped first, then fastest to slowest)."""
        return tuple(f.metadata["order"](getattr(self, f.name)) for f in fields(self) if f.name != "task")

    def held(self) -> tuple:
        """What a verdict holds equal between two configurations: the work, the threads, the topology, the link."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.metadata["held"])

    def reference(self) -> SweepConfig:
        """The configuration speed-up and efficiency are measured against: `single` x1 with this task, threads and
        accumulation (one node, unshaped: it exchanges nothing)."""
        fixed = {f.name: f.metadata["reference"] for f in fields(self) if f.metadata["reference"] is not KEEP}
        return replace(self, **fixed)

    @property
    def is_reference(self) -> bool:
        """Whether this is the reference configuration itself."""
        return self == self.reference()

    def applies(self, f) -> bool:
        """Whether the axis `f` applies to this configuration's backend (its `only`)."""
        return f.metadata["only"] is None or f.metadata["only"](self.backend)

    def as_run(self) -> SweepConfig:
        """This configuration as its backend runs it: an axis that does not apply to the backend (`only`) at its
        default (a sweep over ZeRO stages runs ddp once, at stage 0)."""
        return replace(self, **{f.name: f.default for f in fields(self) if not self.applies(f)})

    def runs_here(self) -> bool:
        """A reference backend's configuration exists only as the reference itself (`single` has no second process,
        node, link or compression)."""
        return self.backend in DISTRIBUTED or self.is_reference

    # ---- names ---------------------------------------------------------------------------------------------------
    @property
    def nprocs(self) -> int:
        """Processes per node."""
        return self.world_size // self.nodes

    def name(self) -> str:
        """The full name of a run's configuration: "ddp x2 t1 acc1 none 2nodes link-100mbit" (file names, progress,
        sweep.json)."""
        parts = [f"{self.backend} x{self.world_size}"]
        parts += [f.metadata["name"](getattr(self, f.name)) for f in fields(self) if f.metadata["name"]]
        return " ".join(p for p in parts if p)

    def texts(self) -> dict[str, str]:
        """Each shown axis beyond backend and world size as a report's label writes it."""
        return {f.name: f.metadata["text"](getattr(self, f.name)) for f in fields(self) if f.metadata["text"]}

    # ---- the record ----------------------------------------------------------------------------------------------
    def to_record(self) -> dict:
        """Its axes as the record's fields name them (threads: threads_per_process)."""
        return {f.metadata["record"] or f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_record(cls, rec: dict) -> SweepConfig:
        """The configuration a record ran: an axis that sets a run option as the record's own `config` says (what the
        run was given), else its record field; a record from before an axis existed had that axis's default."""
        config = rec.get("config") or {}
        values = {}
        for f in fields(cls):
            value = rec.get(f.metadata["record"] or f.name, f.default)
            if f.metadata["sets"] and config.get(f.metadata["sets"]) is not None:
                value = config[f.metadata["sets"]]
            values[f.name] = value
        return cls(**values)

    def differences(self, ran: SweepConfig) -> list[str]:
        """How the configuration a run recorded (`ran`, what its processes found) differs from this one, planned:
        "link_rate: planned 100mbit, the run's 1gbit" for each axis (a link's rate read back from the kernel may
        differ from the one given by tc's rounding: link.same_rate)."""
        said = []
        for f in fields(self):
            planned, found = getattr(self, f.name), getattr(ran, f.name)
            if planned != found and not (f.name == "link_rate" and link.same_rate(planned, found)):
                said.append(f"{f.name}: planned {planned}, the run's {found}")
        return said

    def run_values(self) -> dict:
        """The run options this configuration sets, as RunConfig's fields: each axis that `sets` one (the backend's
        program names the backend, the launcher and the link make the rest), but one that does not apply to its backend
        (`only`: left at the option's default)."""
        return {
            f.metadata["sets"]: getattr(self, f.name) for f in fields(self) if f.metadata["sets"] and self.applies(f)
        }

    def run_args(self) -> list[str]:
        """The run.py options that put a run on this configuration."""
        return to_args(self.run_values())

    def link_said(self) -> str:
        """The link its ranks talk over, in words: "link 100mbit, per-node" or "link unshaped (loopback)"."""
        if self.link_rate == link.UNSHAPED:
            return "link unshaped (loopback)" if self.link_mode == link.MODES[0] else f"link unshaped, {self.link_mode}"
        return f"link {self.link_rate}, {self.link_mode}"


AXES = {f.name: f for f in fields(SweepConfig)}
SWEPT = tuple(name for name, f in AXES.items() if f.metadata["option"])  # the axes compare takes a list of
