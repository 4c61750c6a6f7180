"""Smoke tests of benchmarks/accuracy.py, benchmarks/bert_accuracy.py, benchmarks/startup.py and
benchmarks/profile_check.py, so that they do not rot. No speed assertions: only that they run end to end and write
their tables."""

import sys

import pytest

from tests.helpers import py, run_in


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_accuracy_benchmark_runs(tmp_path):
    out = tmp_path / "acc.md"
    run_in(
        tmp_path, py("-m benchmarks.accuracy --seeds 0 --backends single,ddp --epochs 1 --out", str(out)), timeout=300
    )
    text = out.read_text()
    assert "| single | 1 | 0 |" in text and "| ddp | 2 | 0 |" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_bert_accuracy_benchmark_runs(tmp_path, mr_dir):
    out = tmp_path / "bert.md"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bert_accuracy",
        "--data-dir",
        str(mr_dir),
        "--seeds",
        "0,1",
        "--recipe",
        "--model tiny-random --max-steps 2",
        "--out",
        str(out),
    ]
    run_in(tmp_path, cmd, timeout=400)
    text = out.read_text()
    assert "| 0 | " in text and "| 1 | " in text and "/ 1066 |" in text
    assert "**Median over 2 seeds:" in text


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_startup_benchmark_writes_its_section(tmp_path):
    """The floors and distbench under one launcher (plain python: the cheapest), the section replaced in place."""
    text = section_written(tmp_path, "benchmarks.startup", ["--rounds", "1", "--backends", "single"], 120)
    assert "## Other\n\nkept" in text and "| single x1 | python |" in text
    assert "| backend | launcher | imports | process group | data | build | first step | total |" in text


@pytest.mark.timeout(300)
def test_profile_check_writes_its_section_and_says_what_the_ratios_show(tmp_path):
    from benchmarks.profile_check import verdict

    text = section_written(tmp_path, "benchmarks.profile_check", ["--pairs", "1", "--steps", "3"], 240)
    assert "## Other\n\nkept" in text and "| 1 | " in text and "Median ratio" in text
    assert verdict([0.97, 1.02]).startswith("the pairs fall on both sides of 1")
    assert "longer than the run's in every pair" in verdict([1.1, 1.2])
    assert "shorter than the run's in every pair" in verdict([0.8, 0.9])


def section_written(tmp_path, module: str, args: list[str], timeout: int) -> str:
    """The document a benchmark writes its section into (`--out`), after it ran: one other section in it before."""
    out = tmp_path / "doc.md"
    out.write_text("# Doc\n\n## Other\n\nkept\n")
    run_in(tmp_path, [sys.executable, "-m", module, *args, "--out", str(out)], timeout=timeout)
    return out.read_text()
