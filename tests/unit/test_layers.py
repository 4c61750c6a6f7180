"""The package's layers: a module imports only from its own concern or from a lower layer (docs/architecture.md).

    core (distbench, errors, config, sharding, records, process, machine, torchelastic) < models, data
    < backends, tasks < launching < training < sweep < planning, emulation < cli

Concerns of the same layer (models and data; backends and tasks; planning and emulation) do not import each other. The
libraries' adapters, the models and the data stand at the top of the repository (backends/, models/, data/) and are
imported as distbench.backends, distbench.models and distbench.data, never by their bare names (which would load them
twice); they are checked as the layers they are, their files found through the links distbench/<folder> -> ../<folder>.
The backends stand below launching: what a process was told by its launcher is the core's (distbench/process.py), and
launching reads the registry's launcher names, never the other way round."""

import ast
from pathlib import Path

from tests.helpers import ROOT

# the core's modules: distbench/<name>.py
CORE = ("errors", "config", "sharding", "records", "process", "machine", "torchelastic")
# (concern, its modules' prefix, layer), lowest first
CONCERNS = [
    ("core", ("distbench", *(f"distbench.{name}" for name in CORE)), 0),
    ("models", ("distbench.models",), 1),
    ("data", ("distbench.data",), 1),
    ("backends", ("distbench.backends",), 2),
    ("tasks", ("distbench.tasks",), 2),
    ("launching", ("distbench.launching",), 3),
    ("training", ("distbench.training",), 4),
    ("sweep", ("distbench.sweep",), 5),
    ("planning", ("distbench.planning",), 6),
    ("emulation", ("distbench.emulation",), 6),
    ("cli", ("distbench.cli",), 7),
]


BARE = ("backends", "models", "data")  # the top-level folders, imported only as distbench.<name>


def concern_of(module: str) -> tuple[str, int]:
    """The concern of a distbench module: the one whose prefix matches it the longest."""
    best = max(
        (
            (name, prefix, layer)
            for name, prefixes, layer in CONCERNS
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        key=lambda c: len(c[1]),
    )
    return best[0], best[2]


def imported(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, at the top or inside a function; `from M import N` is the module
    M.N where that is one of `known`, else M."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub if sub in known else node.module))
    return found


def wrong_imports(module: str, source: str, where: str, known: set[str]) -> list[str]:
    """Each import of `source` (the module `module`) that reaches up a layer or sideways into a sibling concern,
    or names a top-level folder by its bare name."""
    mine, my_layer = concern_of(module)
    wrong = []
    for line, target in imported(source, known):
        if target.split(".")[0] in BARE:
            wrong.append(f"{where}:{line}: imports {target} by its bare name; use distbench.{target}")
        elif target == "distbench" or target.startswith("distbench."):
            theirs, layer = concern_of(target)
            if theirs != mine and layer >= my_layer:
                wrong.append(f"{where}:{line}: {mine} (layer {my_layer}) imports {target} ({theirs}, layer {layer})")
    return wrong


def modules() -> list[tuple[str, Path]]:
    """Every module of the package, its top-level folders included, with its file."""
    found = []
    for path in sorted((ROOT / "distbench").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        found.append((".".join(rel.parts).removesuffix(".__init__"), path))
    for folder in BARE:  # reached through the links distbench/<folder> -> ../<folder>, which rglob does not follow
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            found.append(("distbench." + ".".join(rel.parts).removesuffix(".__init__"), path))
    return found


def test_the_top_level_folders_are_scanned_as_their_layers():
    """backends/, models/ and data/ are reached through the links distbench/<folder> -> ../<folder>: every file in
    them is checked, under its distbench name and in its own concern."""
    found = dict(modules())
    for folder in BARE:
        assert (ROOT / "distbench" / folder).resolve() == ROOT / folder
        files = sorted((ROOT / folder).rglob("*.py"))
        assert files, folder
        for path in files:
            rel = path.relative_to(ROOT).with_suffix("")
            name = "distbench." + ".".join(rel.parts).removesuffix(".__init__")
            assert found[name] == path
            assert concern_of(name)[0] == folder
    assert concern_of("distbench.backends.ddp") == ("backends", 2)
    assert concern_of("distbench.launching.launch") == ("launching", 3)


def test_no_module_imports_up_or_sideways():
    found = modules()
    known = {name for name, _ in found}
    wrong = []
    for module, path in found:
        wrong += wrong_imports(module, path.read_text(), str(path.relative_to(ROOT)), known)
    assert wrong == []


def test_the_check_finds_a_planted_upward_import():
    known = {name for name, _ in modules()}
    config = (ROOT / "distbench" / "config.py").read_text()
    planted = config + "\n\ndef _report():\n    from distbench.sweep.report import load\n"
    line = planted.count("\n")
    assert wrong_imports("distbench.config", planted, "distbench/config.py", known) == [
        f"distbench/config.py:{line}: core (layer 0) imports distbench.sweep.report (sweep, layer 5)"
    ]
    assert wrong_imports("distbench.config", "from distbench import cli\n", "distbench/config.py", known) == [
        "distbench/config.py:1: core (layer 0) imports distbench.cli (cli, layer 7)"
    ]
    assert wrong_imports("distbench.data.mnist", "from backends import get_spec\n", "data/mnist.py", known) == [
        "data/mnist.py:1: imports backends by its bare name; use distbench.backends"
    ]
    sideways = wrong_imports("distbench.backends.ddp", "from distbench.tasks import TASKS\n", "backends/ddp.py", known)
    assert sideways == ["backends/ddp.py:1: backends (layer 2) imports distbench.tasks (tasks, layer 2)"]


def test_the_check_fails_on_a_backend_that_imports_launching():
    """The backends stand below launching: a backend module that imports it again (as base.py once imported
    LaunchEnv from distbench.launching.launch) fails the check, at the top or inside a function."""
    known = {name for name, _ in modules()}
    base = (ROOT / "backends" / "base.py").read_text()
    assert wrong_imports("distbench.backends.base", base, "backends/base.py", known) == []
    planted = "from distbench.launching.launch import LaunchEnv\n" + base
    assert wrong_imports("distbench.backends.base", planted, "backends/base.py", known) == [
        "backends/base.py:1: backends (layer 2) imports distbench.launching.launch (launching, layer 3)"
    ]
    registry = (ROOT / "backends" / "__init__.py").read_text()
    planted = registry + "\n\ndef _help():\n    from distbench.launching import commands\n"
    line = planted.count("\n")
    assert wrong_imports("distbench.backends", planted, "backends/__init__.py", known) == [
        f"backends/__init__.py:{line}: backends (layer 2) imports distbench.launching.commands (launching, layer 3)"
    ]
