"""Project rules that a script can check: formatting and lint, and models/data free of distribution."""

import re
import sys
from pathlib import Path

from tests.helpers import ROOT, run_cmd


def test_ruff_lint_and_format():
    ruff = [sys.executable, "-m", "ruff"]
    run_cmd([*ruff, "check", "."], timeout=120)
    run_cmd([*ruff, "format", "--check", "."], timeout=120)


def test_models_and_data_know_nothing_about_distribution():
    pattern = re.compile(r"^\s*(import|from)\s+(torch\.distributed|horovod|accelerate)\b", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for d in ("models", "data")
        for p in Path(ROOT, d).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert offenders == []


def test_backend_libraries_are_imported_lazily():
    # importing the CLI, the loop and the registry must not import accelerate or horovod
    code = (
        "import sys, distbench.cli, distbench.training.loop, backends; "
        "print(sorted(m for m in ('accelerate', 'horovod', 'horovod.torch') if m in sys.modules))"
    )
    proc = run_cmd([sys.executable, "-c", code], timeout=120)
    assert proc.stdout.strip() == "[]"
