"""The run's options are declared once (distbench/config.py): the CLI, validation, resume matching and compare's
forwarding follow from the declarations, and the README's option table lists exactly them."""

import re

from distbench.config import FIELDS, FORWARDED, RESUME_MUST_MATCH, RunConfig, flag, to_args
from tests.helpers import ROOT


def _readme_table_flags() -> set[str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| option | meaning |") :].split("\n\n")[0]
    first_cells = [row.split("|")[1] for row in table.splitlines()[2:]]
    return {f for cell in first_cells for f in re.findall(r"--[a-z][a-z0-9-]*", cell)}


def test_the_readme_lists_every_option_and_no_other():
    declared = {flag(name) for name in FIELDS}
    switches = {f.metadata["flag"].split("/")[1] for f in FIELDS.values() if f.metadata["flag"]}  # --no-x forms
    listed = _readme_table_flags()
    assert declared - listed == set(), "options missing from the README's table"
    assert listed - declared - switches == set(), "the README's table lists options that do not exist"


def test_a_sweep_forwards_options_in_their_declared_form():
    assert to_args({"max_steps": 20, "schedule": False, "pin_cores": True, "lr": None, "precision": "bf16"}) == [
        *"--max-steps 20 --no-schedule --pin-cores --precision bf16".split()
    ]
    assert "task" in FORWARDED and "output" not in FORWARDED and "accumulate" not in FORWARDED  # set per run, axis
    assert set(RESUME_MUST_MATCH) >= {"task", "batch_size", "seed", "lr", "accumulate", "grad_compression"}
    assert RunConfig().to_dict()["output"] == "results/runs.jsonl"
