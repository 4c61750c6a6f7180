"""`run.py report`: against a baseline sweep, and from a results file cut short."""

import json
import sys

from tests.helpers import cut_short, run_in, synthetic_sweep


def test_report_baseline_command_writes_the_verdicts(tmp_path):
    """`run.py report --baseline OLD NEW` end to end, on sweep folders of synthetic records."""
    import sys

    for name, scale, seed in (("old", 1.0, 1), ("new", 1.3, 2)):
        folder = tmp_path / name
        folder.mkdir()
        records = [
            {**r, "samples_per_sec": r["samples_per_sec"] * scale}
            for r in synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=seed)
        ]
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = run_in(
        tmp_path,
        [sys.executable, "run.py", "report", "--baseline", str(tmp_path / "old"), str(tmp_path / "new")],
        timeout=120,
    )
    text = (tmp_path / "new" / "report.md").read_text()
    assert "## Against the baseline sweep" in text and "mnist: ddp x2 (new) is 1.3" in text
    assert "x ddp x2 (baseline) (95 % CI 1.2" in text and proc.stdout.startswith("# distbench comparison")
    missing = run_in(
        tmp_path,
        [sys.executable, "run.py", "report", "--baseline", str(tmp_path / "nope"), str(tmp_path / "new")],
        timeout=60,
        expect_rc=2,
    )
    assert "holds no results.jsonl" in missing.stderr

    # a baseline of other steps compares different work: refused in one line, nothing written, unless allowed
    short = tmp_path / "short"
    short.mkdir()
    records = [{**r, "steps": 5} for r in synthetic_sweep(noise=0.02, drift=[1.0] * 5, seed=3)]
    (short / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    compare = [sys.executable, "run.py", "report", "--baseline", str(short), str(tmp_path / "new")]
    (tmp_path / "new" / "report.md").unlink()
    refused = run_in(tmp_path, compare, timeout=60, expect_rc=2)
    assert refused.stderr.strip().splitlines() == [
        f"error: the baseline {short} and {tmp_path / 'new'} are not comparable: steps 5 (baseline) vs 60; give "
        "--allow-different to compare them anyway (nothing was written)"
    ]
    assert not (tmp_path / "new" / "report.md").exists()
    run_in(tmp_path, [*compare, "--allow-different"], timeout=120)
    allowed = (tmp_path / "new" / "report.md").read_text()
    assert "- steps: 5 vs 60 **(makes them incomparable: compared anyway, `--allow-different`)**" in allowed


def test_the_report_is_rebuilt_from_every_complete_record_and_names_the_skipped_line(tmp_path):
    records = synthetic_sweep(noise=0.01, drift=[1.0] * 5)
    (tmp_path / "results.jsonl").write_bytes(cut_short(records) + b"\n" + b'["not a record"]\n')
    proc = run_in(tmp_path, [sys.executable, "run.py", "report", str(tmp_path)], timeout=120)
    assert "Traceback" not in proc.stderr
    assert f"line {len(records)}: not a whole JSON record" in proc.stderr and "a JSON list, not a record" in proc.stderr
    text = (tmp_path / "report.md").read_text()
    assert "## Skipped lines" in text and f"line {len(records)}: not a whole JSON record" in text
    with open(tmp_path / "runs.csv") as f:
        assert len(f.read().splitlines()) == 1 + len(records) - 1  # the header and every complete record


def test_a_results_file_with_no_complete_record_is_one_line_and_keeps_the_old_report(tmp_path):
    (tmp_path / "results.jsonl").write_bytes(b'{"backend": "ddp", "wor')
    (tmp_path / "report.md").write_text("kept")
    proc = run_in(tmp_path, [sys.executable, "run.py", "report", str(tmp_path)], timeout=120, expect_rc=2)
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no complete record to report" in proc.stderr and "line 1: not a whole JSON record" in proc.stderr
    assert (tmp_path / "report.md").read_text() == "kept"
