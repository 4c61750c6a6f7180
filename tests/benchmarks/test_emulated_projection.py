"""Smoke test of benchmarks/emulated_projection.py's comparison of the two inputs (`profile-table`): from the
committed predictions and sweeps, the table docs/projection.md holds, so that it does not rot. Nothing is launched."""

from benchmarks.emulated_projection import PROFILE_SECTION
from tests.helpers import ROOT, py, run_in


def test_the_profile_table_is_the_one_in_the_docs(tmp_path):
    out = tmp_path / "projection.md"
    run_in(tmp_path, py("-m benchmarks.emulated_projection profile-table --out", out), timeout=120)
    text = out.read_text()
    assert PROFILE_SECTION in text and "**58 cases with the commbench the validation settled on" in text
    for model in (
        "MNIST's ConvNet: 24 cases",
        "ResNet-18 (synthetic 64-pixel images): 22 cases",
        "MiniLM-L6 (MR polarity, 128 tokens): 12 cases",
    ):
        assert model in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "%" in line]
    assert len(rows) == 4 + 66  # by node count, then every case
    docs = (ROOT / "docs" / "projection.md").read_text()
    assert all(row in docs for row in rows)  # the committed predictions and sweeps give the committed table
