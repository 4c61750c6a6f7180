"""Adding a run option is one edit, and a sweep axis one more (docs/architecture.md, "Where to edit"): a throwaway
option and a throwaway axis are declared here, each by one insertion into a copy of the package, and everything that
should follow from a declaration is checked to carry them: the run's CLI and its checks, resume matching, compare's
options, the plan, the run's arguments, the record's round trip, and the report's label and columns."""

import shutil
import subprocess
import sys

from tests.helpers import ROOT

# one insertion each, at the end of the declarations' fields
OPTION = '    probe_level: int = option(3, "Throwaway option.", checks=(POSITIVE,), resume=True)\n'
AXIS_OPTION = '    probe_mode: str = option("off", "Throwaway axis option.", sweep=AXIS)\n'
AXIS = '    probe_mode: str = axis(sets="probe_mode", name="probe-{}".format, text="probe {}".format)\n'

CHECKS = r"""
import contextlib, csv, io, json, pathlib, sys
from dataclasses import replace

from distbench import cli
from distbench.cli.train import given_options
from distbench.config import RESUME_MUST_MATCH, RunConfig, validate
from distbench.errors import UserError
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.plan import axis_values, plan_runs
from distbench.sweep.report import write_report
from tests.helpers import synthetic_sweep


def help_of(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main([*argv, "--help"])
    return out.getvalue()


assert "--probe-level" in help_of() and "--probe-mode" in help_of()  # run.py's options
assert "--probe-level" in help_of("compare") and "--probe-mode" in help_of("compare")  # forwarded; the axis
assert given_options(["--probe-level", "4", "--probe-mode", "on"]) == {"probe_level": 4, "probe_mode": "on"}
try:
    validate(RunConfig(probe_level=0), 1)
    raise SystemExit("--probe-level 0 passed its check")
except UserError as e:
    assert "--probe-level must be positive" in str(e), e
assert "probe_level" in RESUME_MUST_MATCH

options = {"backend": "ddp", "world_size": "2", "accumulate": "1", "grad_compression": "none", "nodes": "1",
           "link_rate": "none", "link_mode": "shared", "zero_stage": "0", "fault": "none",
           "probe_mode": "off,on"}
planned = [p.config for p in plan_runs("mnist", axis_values(options), 1) if not p.baseline]
assert [c.probe_mode for c in planned] == ["off", "on"], planned
on = planned[1]
assert on.run_args()[-2:] == ["--probe-mode", "on"] and on.name().endswith("probe-on"), on.run_args()
assert SweepConfig.from_record(on.to_record()) == on
assert SweepConfig.from_record({**on.to_record(), "probe_mode": None, "config": {"probe_mode": "on"}}) == on

out = pathlib.Path(sys.argv[1])
records = synthetic_sweep(noise=0.01, drift=[1.0, 1.0])
records += [{**r, "probe_mode": "on"} for r in records if r["backend"] == "ddp"]
with open(out / "results.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
text = write_report([out], out)
assert "probe_mode" in next(csv.reader((out / "summary.csv").open())), "no column"
assert "probe on" in text and "probe off" in text, "no label"
print("carried")
"""


def _copy_with_insertions(dest):
    """distbench's code, with the throwaway declarations inserted: one place for the option, one for the axis."""
    for name in ("distbench", "backends", "models", "data", "benchmarks", "run.py", "tests"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / name)
    _insert(dest / "distbench/config.py", "    def with_task_defaults", OPTION + AXIS_OPTION)
    _insert(dest / "distbench/sweep/configuration.py", "    @classmethod\n    def placed", AXIS)


def _insert(path, before: str, text: str) -> None:
    source = path.read_text()
    assert source.count(before) == 1, f"{path}: where the fields end is not {before!r}"
    path.write_text(source.replace(before, text + "\n" + before))


def test_a_new_option_and_a_new_axis_are_one_declaration_each(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    _copy_with_insertions(tree)
    (tmp_path / "report").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CHECKS, str(tmp_path / "report")], cwd=tree, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "carried" in proc.stdout, proc.stderr[-3000:]
