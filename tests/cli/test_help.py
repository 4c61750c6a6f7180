"""`--help` of each command shows the launch commands and the options; `run.py --help` lists every command."""

import importlib
import re
import sys

import typer

from distbench.cli import COMMANDS
from tests.helpers import run_cmd, run_in, run_py


def test_help_lists_every_launch_command(tmp_path):
    proc = run_py(["--help"], tmp_path, expect_rc=0)
    for cmd in (
        "torchrun --nproc_per_node N run.py --backend ddp",
        "--rdzv-endpoint",
        "accelerate launch --multi_gpu --num_processes N",
        "--num_machines",
        "horovodrun -np N python run.py --backend horovod",
        "-H host1:4,host2:4",
    ):
        assert cmd in proc.stdout, cmd


def test_help_shows_the_knobs():
    proc = run_cmd([sys.executable, "run.py", "--help"], timeout=60)
    assert "--accumulate" in proc.stdout and "--grad-compression" in proc.stdout
    proc = run_cmd([sys.executable, "run.py", "compare", "--help"], timeout=60)
    assert "--accumulate" in proc.stdout and "--grad-compression" in proc.stdout


def test_help_shows_the_multi_node_and_link_options(tmp_path):
    main_help = run_in(tmp_path, [sys.executable, "run.py", "--help"], timeout=60).stdout
    assert (
        re.search(r"^ +simulate +one training job as simulated nodes", main_help, re.M) and "--link-rate" in main_help
    )
    compare_help = run_in(tmp_path, [sys.executable, "run.py", "compare", "--help"], timeout=60).stdout
    simulate_help = run_in(tmp_path, [sys.executable, "run.py", "simulate", "--help"], timeout=60).stdout
    for option in ("--nodes", "--link-rate"):
        assert option in compare_help and option in simulate_help


def test_help_lists_every_command(tmp_path):
    main_help = run_py(["--help"], tmp_path, expect_rc=0).stdout
    listed = re.findall(r"^ +([a-z-]+) +\S", main_help.split("Commands", 1)[1].split("Launch commands", 1)[0], re.M)
    assert (
        listed
        == list(COMMANDS)
        == [
            "compare",
            "simulate",
            "report",
            "check-task",
            "commbench",
            "project",
            "atlas",
            "profile",
            "slurm-script",
        ]
    )


def test_the_list_of_commands_is_every_command_the_apps_hold():
    """A command added to an app without its line in COMMANDS (or the reverse) fails here, so that the help, the
    dispatch and the suggestion for a misspelled command know every command."""
    held = set()
    for name, cmd in COMMANDS.items():
        module, function = cmd.app.split(":")
        app = typer.main.get_command(getattr(importlib.import_module(module), function)())
        held |= set(app.commands) if cmd.grouped else {name}
    assert held == set(COMMANDS)
