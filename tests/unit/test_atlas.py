"""`run.py atlas` (distbench/planning/atlas.py) on a fixture profile: every cell predicted, the fastest and its lead,
the slowest link for the target efficiency, the cells an emulated sweep measured marked, the files valid."""

import json
from pathlib import Path

import pytest

from distbench.errors import UserError
from distbench.launching import link
from distbench.planning import atlas
from tests.unit.test_emulated import fixture


def write_profile(tmp_path, **over):
    """The test_emulated fixture as a profile on a GPU: two modules of 100 MB of gradients each, 10 ms forward and
    20 ms backward (y's gradients ready at 6, x's at 15), steps that vary."""
    p = fixture(**over)
    p["forward"] = {"median_s": 0.010, "steps_s": [0.010, 0.011, 0.009, 0.010]}
    p["backward"] = {"median_s": 0.020, "steps_s": [0.020, 0.021, 0.019, 0.020]}
    p["optimizer"] = {"median_s": 0.002, "steps_s": [0.002, 0.002, 0.002, 0.002]}
    for m in p["modules"]:
        m["grad_bytes"] = m["param_bytes"] = 100_000_000
    p.update(task="fixture", device="cuda:0", threads=1, micro_batch=8)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(p))
    return path


def test_the_grid_predicts_every_cell_names_the_fastest_and_the_link_each_library_needs(tmp_path):
    out = tmp_path / "atlas"
    request = atlas.AtlasRequest(
        [], out, "2,8", "10gbit,400gbit", backends="ddp,horovod", from_profile=write_profile(tmp_path)
    )
    got = atlas.run(request)
    assert sorted((c["nodes"], c["link_rate"]) for c in got["cells"]) == [
        (2, "10gbit"),
        (2, "400gbit"),
        (8, "10gbit"),
        (8, "400gbit"),
    ]
    eff = {(c["nodes"], c["link_rate"], r["backend"]): r["scaling_efficiency"] for c in got["cells"] for r in c["rows"]}
    for b in ("ddp", "horovod"):
        assert eff[2, "400gbit", b] > eff[2, "10gbit", b] > eff[8, "10gbit", b]  # faster links, fewer nodes: better
        assert all(0 < eff[k] <= 1.0 for k in eff)
        # 200 MB of gradients, a 32 ms step: at 10 Gbit/s a ring's 2 (N-1)/N x 200 MB takes 160-280 ms
        assert eff[8, "10gbit", b] < 0.25
        need = got["rate_for_target"][b]
        assert link.parse_rate(need["8"]) >= link.parse_rate(need["2"]) > 10e9  # more nodes need no slower a link
    for c in got["cells"]:
        assert c["fastest"] in ("ddp", "horovod") and c["lead"] >= 1.0 and c["lead_lo"] <= c["lead"] <= c["lead_hi"]
    assert got["computation"].startswith("fixture at micro-batch 8, cuda, from the module profile")
    assert json.loads((out / "atlas.json").read_text())["kind"] == "distbench-atlas"
    text = (out / "atlas.md").read_text()
    assert "**4 of 4 cells are at the link's nominal rate**" in text
    assert "## The slowest link for 90 % efficiency" in text
    assert (out / "efficiency.png").stat().st_size > 0 and (out / "fastest.png").stat().st_size > 0


def test_cells_an_emulated_sweep_measured_are_marked(tmp_path):
    sweep = tmp_path / "emulated"
    sweep.mkdir()
    rec = {
        "status": "ok",
        "task": "fixture",
        "backend": "ddp",
        "nodes": 2,
        "world_size": 2,
        "link_rate": "10gbit",
        "micro_batch_size": 8,
        "samples_per_sec": 200.0,
        "emulated": {"profile": "p.json"},
        "schema_version": 2,
    }
    (sweep / "results.jsonl").write_text(json.dumps(rec) + "\n")
    out = tmp_path / "atlas"
    request = atlas.AtlasRequest(
        [], out, "2", "10gbit", backends="ddp", from_profile=write_profile(tmp_path), checked=[sweep]
    )
    got = atlas.run(request)
    (m,) = got["checked"]
    single = 8 / 0.032  # the profile's step: 32 ms for 8 samples
    assert m["efficiency"] == pytest.approx(200.0 / (2 * single), rel=0.05)
    assert ", measured " in (out / "atlas.md").read_text()


@pytest.mark.parametrize(
    "over,message",
    [
        ({"nodes": "two"}, "--nodes 'two': comma-separated node counts"),
        ({"link_rates": "none"}, "--link-rates 'none'"),
        ({"target": 1.5}, "--target 1.5"),
        ({"from_profile": None}, "give the compare folders of `single` x1 runs, or --from-profile"),
        ({"from_profile": "missing.json"}, "--from-profile missing.json does not exist"),
        ({"micro_batch": 16}, "--micro-batch 16: the module profile"),  # its steps are at 8: they do not scale
    ],
)
def test_a_grid_that_cannot_be_drawn_is_one_line(tmp_path, over, message):
    values = {"nodes": "2", "link_rates": "10gbit", "from_profile": write_profile(tmp_path), **over}
    if isinstance(values["from_profile"], str):
        values["from_profile"] = Path(values["from_profile"])
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("'", "'")):
        atlas.run(atlas.AtlasRequest([], tmp_path / "a", **values))
