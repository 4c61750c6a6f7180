"""The set-up (scripts/setup_env.sh): its check reads Horovod's report whole, no pipeline in the set-up can be failed
by a reader that stops early, and a failed step is named and resumed without redoing the steps before it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

# What `horovodrun --check-build` prints, in two writes with a pause between them, as a program that is still
# writing when its reader has seen enough. Set TRAIL_S to keep writing the second part for that long.
REPORT_HEAD = "Horovod v0.28.1:\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [X] PyTorch\n    [ ] MXNet\n"


REPORT_TAIL = "\nAvailable Controllers:\n    [ ] MPI\n    [X] Gloo\n"


STANDIN = f"""#!/usr/bin/env python3
import os, sys, time
sys.stdout.write({REPORT_HEAD!r}.replace("[X] PyTorch", os.environ.get("STANDIN_PYTORCH", "[X] PyTorch")))
sys.stdout.flush()
deadline = time.monotonic() + float(os.environ.get("TRAIL_S", "0.02"))
while True:
    time.sleep(0.01)
    sys.stdout.write({REPORT_TAIL!r})
    sys.stdout.flush()  # BrokenPipeError here once the reader has gone
    if time.monotonic() > deadline:
        break
"""


def _standin_venv(root: Path) -> Path:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    horovodrun = root / "bin" / "horovodrun"
    horovodrun.write_text(STANDIN)
    horovodrun.chmod(0o755)
    return root


def _check(venv: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_env.sh"), str(venv)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )


def test_the_check_passes_on_this_venv():
    proc = subprocess.run(
        ["bash", "scripts/check_env.sh", sys.prefix], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_the_check_reads_the_report_whole_every_time(tmp_path):
    venv = _standin_venv(tmp_path / "venv")
    # the check as it was, against a report still being written when grep has seen "[X] PyTorch": the pipe breaks
    old = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {venv}/bin/horovodrun --check-build | grep -q "
            r"'\[X\] PyTorch'",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TRAIL_S": "5"},
        timeout=60,
    )
    assert old.returncode != 0 and "BrokenPipeError" in old.stderr
    for run in range(50):
        proc = _check(venv)
        assert proc.returncode == 0, f"run {run + 1}: {proc.stderr}"
    missing = _check(venv, STANDIN_PYTORCH="[ ] PyTorch")
    assert missing.returncode == 1 and "lacks PyTorch support" in missing.stderr


def test_no_pipeline_in_the_setup_ends_early():
    """Under pipefail, a reader that stops before its writer is done (grep -q, head, grep -m) fails the pipeline by
    chance; none may stand in the set-up's scripts, the Makefile or CI's script."""
    early_reader = re.compile(r"\|\s*(grep\b[^|]*\s-(\w*[qm]\w*|-quiet|-max-count)\b|head\b)")
    files = [*sorted((ROOT / "scripts").glob("*.sh")), ROOT / "Makefile", ROOT / ".ci" / "run"]
    offenders = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if not line.lstrip().startswith("#") and early_reader.search(line)
    ]
    assert offenders == []


def test_make_test_and_test_gpu_run_every_tier_of_tests():
    """`make test` names the tiers it runs in its two passes, and `make test-gpu` the GPU tier: every folder of tests/
    that holds tests is among them, so that a new tier is not left out of the suite without a word."""

    def named(target: str) -> set[str]:
        recipe = re.search(rf"^{target}: setup\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
        return set(re.findall(r"\btests/(\w+)", recipe))

    tiers = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    assert tiers and named("test") == tiers - {"gpu"} and named("test-gpu") == {"gpu"}


@pytest.fixture
def setup_clone(tmp_path):
    """A checkout of just the set-up (its scripts and pyproject.toml) with its own empty cache, and the venv path it
    would build."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("setup_env.sh", "check_env.sh", "build_horovod.sh"):
        shutil.copy2(ROOT / "scripts" / name, clone / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", clone / "pyproject.toml")
    env = {"PATH": "/usr/bin:/bin", "DISTBENCH_CACHE": str(tmp_path / "cache"), "PYTHON": sys.executable}

    def run(*args):
        return subprocess.run(
            ["bash", "scripts/setup_env.sh", *args], cwd=clone, capture_output=True, text=True, env=env, timeout=120
        )

    venv = Path(run("--print-venv").stdout.strip())
    assert venv.parent == tmp_path / "cache" / "venvs"
    return clone, venv, run


def test_a_failed_step_is_named_and_the_next_run_continues_from_it(setup_clone):
    clone, venv, run = setup_clone
    _standin_venv(venv)
    done = ("venv", "tools", "torch", "packages", "horovod", "deepspeed")  # as if an earlier run had built these
    for name in done:
        (venv / f".step-{name}").touch()
    horovodrun = venv / "bin" / "horovodrun"
    horovodrun.write_text(STANDIN.replace('os.environ.get("STANDIN_PYTORCH", "[X] PyTorch")', '"[ ] PyTorch"'))
    failed = run()
    assert failed.returncode == 1
    assert f"error: set-up step 'check' failed (exit 1); the steps before it are kept in {venv}" in failed.stderr
    assert all((venv / f".step-{name}").exists() for name in done) and not (venv / ".complete").exists()
    assert not (clone / ".venv").exists()

    horovodrun.write_text(STANDIN)  # mended: the next run does the check alone
    again = run()
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stderr.splitlines() if line.startswith("set-up:")] == [
        "set-up: check",
        "set-up: done",
    ]
    assert (venv / ".complete").exists() and (clone / ".venv").resolve() == venv.resolve()
    assert run().stderr == ""  # complete: nothing to do
