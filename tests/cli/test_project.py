"""`run.py project` and `run.py commbench` as typed: the documented worked example, and bad input."""

import json
import re

import pytest

from distbench.planning.links import fit_link
from tests.helpers import ROOT, assert_one_line_error, run_here, run_py

FIX = ROOT / "tests" / "fixtures" / "projection"
PROFILED = ROOT / "docs" / "profiles" / "mnist-b32-cpu.json"  # `run.py profile`'s, what --emulate replays
EXAMPLE = [
    "project",
    str(FIX / "sweep"),
    "--commbench",
    str(FIX / "commbench"),
    "--link-rate",
    "100mbit",
    "--profile",
    str(FIX / "profile.json"),
]


def test_project_on_a_recorded_sweep_gives_the_documented_numbers(tmp_path):
    """The worked example of docs/projection.md: the same command prints the same table, row for row."""
    out = tmp_path / "p.json"
    proc = run_py([*EXAMPLE, "--output", str(out)], tmp_path, expect_rc=0)  # as typed, in a fresh process
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "2 x 1" in line]
    assert len(rows) == 4
    doc = (ROOT / "docs" / "projection.md").read_text()
    for row in rows:
        assert row in doc, f"docs/projection.md lacks: {row}"
    predicted = {p["backend"]: p for p in json.loads(out.read_text())}
    assert set(predicted) == {"ddp", "accelerate", "horovod", "fabric"}
    for p in predicted.values():
        assert p["samples_per_sec_lo"] <= p["samples_per_sec"] <= p["samples_per_sec_hi"]
        assert p["step_ms"] == pytest.approx(64 / p["samples_per_sec"] * 1e3)
        assert 0 < p["scaling_efficiency"] < 1
    for wrapping_ddp in ("accelerate", "fabric"):  # DDP's all-reduce
        assert predicted[wrapping_ddp]["samples_per_sec"] == predicted["ddp"]["samples_per_sec"]
    assert (tmp_path / "p.profile.json").is_file()


def test_a_module_profile_is_the_computation_of_the_same_prediction_as_atlas_makes(tmp_path):
    """`project --from-profile`: a module profile in place of the sweeps (its steps the computation, its modules the
    backward's shape, its micro-batch on every process, the cores left free as --emulate leaves them): the numbers
    atlas predicts for the same cell from the same profile, so that the emulator, project and atlas start from one."""
    from distbench.planning import atlas

    out = tmp_path / "p.json"
    plan = ["--nodes", "4", "--link-rate", "1gbit", "--backends", "ddp,deepspeed"]
    proc = run_here(["project", "--from-profile", str(PROFILED), *plan, "--output", str(out)], tmp_path, expect_rc=0)
    assert f"From: the module profile {PROFILED}" in proc.stdout
    rows = {r["backend"]: r for r in json.loads(out.read_text())}
    assert {(r["global_batch_size"], r["micro_batch_size"]) for r in rows.values()} == {(128, 32)}
    for r in rows.values():  # what it rests on, and what a profile leaves out
        assert r["computation"] == "a module profile's forward, backward and optimizer at micro-batch 32"
        assert any(w.startswith("the computation is a module profile's") for w in r["warnings"])
    request = atlas.AtlasRequest([], tmp_path / "a", "4", "1gbit", backends="ddp,deepspeed", from_profile=PROFILED)
    (cell,) = atlas.run(request)["cells"]
    for r in cell["rows"]:
        assert rows[r["backend"]]["step_ms"] == pytest.approx(r["step_ms"], rel=1e-9), r["backend"]
    assert rows["ddp"]["step_ms"] < rows["deepspeed"]["step_ms"]  # DDP overlaps its buckets with backward


def test_deepspeeds_zero_stages_on_the_worked_example(tmp_path):
    """docs/projection.md's worked example for DeepSpeed's engine (its all-reduce here the fixture's ddp records,
    renamed): backward ends at 23.08 ms, then one all-reduce of all 1,201,704 bytes, 101.44 ms; ZeRO-0 then the whole
    optimizer (2 ms): 126.5 ms; ZeRO-1 half of it and the all-gather of the parameters, half the all-reduce: 176.2 ms.
    The row says its stage."""
    commbench = tmp_path / "cb"
    commbench.mkdir()
    records = (FIX / "commbench" / "commbench.jsonl").read_text()
    (commbench / "commbench.jsonl").write_text(records.replace('"backend": "ddp"', '"backend": "deepspeed"'))
    args = [*EXAMPLE[:2], "--commbench", str(commbench), *EXAMPLE[4:], "--backends", "deepspeed"]
    rows = {}
    for stage, step_ms in ((0, 126.52), (1, 176.24)):
        out = tmp_path / f"zero{stage}.json"
        proc = run_here([*args, "--zero-stage", str(stage), "--output", str(out)], tmp_path, expect_rc=0)
        # the fixture's commbench did not time under load, which DeepSpeed's collectives on CPU nodes take
        said = "commbench fit of deepspeed (timed on an idle core: not measured under load)"
        assert f"| deepspeed ZeRO-{stage} | 2 x 1 | {said} |" in proc.stdout
        (rows[stage],) = json.loads(out.read_text())
        assert rows[stage]["zero_stage"] == stage and rows[stage]["step_ms"] == pytest.approx(step_ms, abs=0.05)
    # ZeRO-1's engine measured on one node (--node-sweep, --node-commbench): 6 and 5 ms a step beyond stage 0 in two
    # rounds, less the node's norm all-reduce and all-gather (the fixture's times / 100); then stage 0's 126.52 ms,
    # that work, the link's norm (its fit at 4 bytes) and its all-gather (half the all-reduce: 50.72 ms); none of it
    # is the half optimizer of the model without the engine
    node_sweep, node_cb = tmp_path / "node-sweep", tmp_path / "node-cb"
    node_sweep.mkdir()
    node_cb.mkdir()
    run = {"task": "mnist", "backend": "deepspeed", "world_size": 2, "nodes": 1, "status": "ok"}
    runs = [
        run | {"global_batch_size": 64, "round": n, "config": {"zero_stage": k}, "samples_per_sec": 64e3 / ms}
        for n, by_stage in ((1, (20.0, 26.0)), (2, (20.0, 25.0)))
        for k, ms in enumerate(by_stage)
    ]
    node_sweep.joinpath("results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    ddp = [r for r in map(json.loads, records.splitlines()) if r["backend"] == "ddp"]
    fast = [r | {"backend": "deepspeed", "nodes": 1, "link_rate": "none", "time_s": r["time_s"] / 100} for r in ddp]
    node_recs = fast + [r | {"collective": "all-gather"} for r in fast]
    node_cb.joinpath("commbench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in node_recs))
    out = tmp_path / "engine.json"
    engine = ["--node-sweep", str(node_sweep), "--node-commbench", str(node_cb)]
    proc = run_here([*args, "--zero-stage", "1", *engine, "--output", str(out)], tmp_path, expect_rc=0)
    assert "ZeRO-1's engine beyond stage 0 measured on one node at 2 processes (2 round(s)" in proc.stderr
    (row,) = json.loads(out.read_text())
    node = fit_link(fast, "node")
    assert row["engine_ms"] == pytest.approx(5.5 - 1e3 * (node.allreduce_s(4, 2) + node.allreduce_s(1_201_704, 2)))
    gather_ms = rows[1]["step_ms"] - rows[0]["step_ms"] + 1.0  # the model without the engine: less half of 2 ms
    norm_ms = 1e3 * fit_link(ddp, "link").allreduce_s(4, 2)
    link_ms = norm_ms + gather_ms  # and what stage 0's step took on the node beyond the model there, at every stage
    assert row["step_ms"] == pytest.approx(rows[0]["step_ms"] + row["engine_ms"] + link_ms + row["stage0_node_ms"])


def test_more_nodes_on_the_same_link_predict_more_time_on_it(tmp_path):
    """A ring all-reduce moves 2(n-1)/n of the gradients over each link: more at 4 nodes than at 2."""
    step = {}
    for nodes in (2, 4):
        out = tmp_path / f"{nodes}.json"
        profile = tmp_path / "profile.json"
        raw = json.loads((FIX / "profile.json").read_text())
        profile.write_text(json.dumps({**raw, "micro_batch": 64 // nodes}))
        args = [*EXAMPLE[:-1], str(profile), "--nodes", str(nodes), "--output", str(out)]
        run_here(args, tmp_path, expect_rc=0)
        step[nodes] = {p["backend"]: p["step_ms"] for p in json.loads(out.read_text())}
    assert all(step[4][b] > step[2][b] for b in step[2])


def test_single_runs_at_the_micro_batch_in_a_second_folder_are_its_measured_computation(tmp_path):
    """The fixture's runs again at batch 32 (the plan's micro-batch), forward+backward 30 ms where the profile scales
    batch 64's 40 ms to 22: the prediction takes 30, says so, and is slower than the example's."""
    micro_dir = tmp_path / "micro"
    micro_dir.mkdir()
    recs = [json.loads(line) for line in (FIX / "sweep" / "results.jsonl").read_text().splitlines()]
    for r in recs:
        r.update(global_batch_size=32, per_rank_batch_size=32, micro_batch_size=32)
        r["step_breakdown_ms"] = {**r["step_breakdown_ms"], "forward_backward_ms": 30.0}
    (micro_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    scaled, measured = tmp_path / "scaled.json", tmp_path / "measured.json"
    run_here([*EXAMPLE, "--output", str(scaled)], tmp_path, expect_rc=0)
    args = [EXAMPLE[0], EXAMPLE[1], str(micro_dir), *EXAMPLE[2:], "--output", str(measured)]
    proc = run_here(args, tmp_path, expect_rc=0)
    assert "as the 3 run(s) at micro-batch 32 measured it" in proc.stdout
    slow = {p["backend"]: p for p in json.loads(measured.read_text())}
    fast = {p["backend"]: p for p in json.loads(scaled.read_text())}
    for b in fast:
        assert slow[b]["computation"] == "measured at micro-batch 32" and slow[b]["step_ms"] > fast[b]["step_ms"]
        assert slow[b]["reference_samples_per_sec"] == fast[b]["reference_samples_per_sec"]  # still batch 64's


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["project", "/no/such/sweep", "--link-rate", "100mbit"], "not a compare folder"),
        (["project", str(FIX / "commbench"), "--link-rate", "100mbit"], "not a compare folder"),
        (["project", str(FIX / "sweep"), "--link-rate", "10parsecs"], "is not a rate"),
        (["project", str(FIX / "sweep"), "--link-rate", "none"], "no nominal rate"),
        (["project", str(FIX / "sweep")], "give --link-rate"),
        (["project", str(FIX / "sweep"), "--commbench", str(FIX / "sweep"), "--link-rate", "1gbit"], "no commbench"),
        (
            ["project", str(FIX / "sweep"), "--commbench", str(FIX / "commbench"), "--link-rate", "1gbit"],
            "not one link",
        ),
        (["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--nodes", "3"], "does not split"),
        (["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--grad-compression", "zip"], "--grad-compression"),
        (["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--backends", "single"], "--backends"),
        (
            ["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--backends", "deepspeed", "--zero-stage", "3"],
            "ZeRO-3 only with its engine measured on one node",
        ),
        ([*EXAMPLE, "--nodes", "4"], "measured at micro-batch 32"),
        (
            ["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--backends", "deepspeed", "--zero-stage", "1"]
            + ["--node-sweep", str(FIX / "sweep"), "--node-commbench", str(FIX / "commbench")],
            "timed no deepspeed or deepspeed all-gather",
        ),
        (
            ["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--backends", "deepspeed", "--zero-stage", "3"]
            + ["--node-sweep", str(FIX / "sweep"), "--node-commbench", "/no/such/cb"],
            "--node-commbench /no/such/cb: no commbench.jsonl",
        ),
        (
            ["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--profile", str(FIX / "sweep" / "results.jsonl")],
            "not a profile",
        ),
        (["project", "--link-rate", "1gbit"], "give the compare folders of `single` x1 runs, or --from-profile"),
        (
            ["project", str(FIX / "sweep"), "--from-profile", str(PROFILED), "--link-rate", "1gbit"],
            "give the compare folders of `single` x1 runs, or --from-profile PROFILE, not both",
        ),
        (
            ["project", "--from-profile", str(PROFILED), "--profile", str(FIX / "profile.json")]
            + ["--link-rate", "1gbit"],
            "--profile and --from-profile",
        ),
        (
            ["project", "--from-profile", str(PROFILED), "--link-rate", "1gbit", "--batch-size", "32"],
            "was measured at micro-batch 32, this plan's is 16",
        ),
        (
            ["project", "--from-profile", str(PROFILED), "--link-rate", "1gbit", "--backends", "fsdp"],
            "does not say which gradients each of the task's FSDP units holds",
        ),
        (
            ["project", str(FIX / "sweep"), "--link-rate", "1gbit", "--backends", "fsdp", "--accumulate", "2"],
            "--accumulate 2: project has no model of FSDP2's gradient accumulation",
        ),
        (
            ["commbench", "--backends", "fsdp", "--grad-compression", "none,fp16"],
            "times FSDP2's collectives uncompressed",
        ),
        (["commbench", "--link-mode", "mesh"], "--link-mode"),
        (["commbench", "--backends", "single"], "--backends"),
        (["commbench", "--link-rate", "fast"], "is not a rate"),
        (["commbench", "--nodes", "1", "--nprocs", "1"], "at least 2 processes"),
    ],
)
def test_bad_commbench_or_project_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    if args[0] == "commbench":
        args = [*args, "--out", str(tmp_path / "cb")]
    elif "--output" not in args:
        args = [*args, "--output", str(tmp_path / "p.json")]
    assert_one_line_error(run_here(args, tmp_path), fragment)
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "cb").exists()


def test_a_sweep_without_single_runs_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    lines = (FIX / "sweep" / "results.jsonl").read_text().splitlines()
    ddp = [json.dumps({**json.loads(line), "backend": "ddp", "world_size": 2}) for line in lines]
    (sweep / "results.jsonl").write_text("\n".join(ddp) + "\n")
    proc = run_here(["project", str(sweep), "--link-rate", "1gbit", "--output", str(tmp_path / "p.json")], tmp_path)
    assert_one_line_error(proc, "no successful `single` x1 run")


LOOPBACK = FIX / "commbench-loopback"  # 1 node x 2 ranks on loopback, 4 KiB and 1 MiB: as seen on main (issue 34)


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_project_from_a_1_x_2_commbench_to_16_x_4_says_it_extrapolates(tmp_path):
    """It says what it extrapolates from and to, before its table, and warns of each step beyond the measurements:
    64 ranks and 16 nodes from 2 ranks on one node, a bucket larger than any size timed, a fit that is not physical, a
    micro-batch not run. Its intervals
    hold the point strictly inside (on main: `143.6 (65.0-143.6)`), its efficiencies show two significant digits (on
    main: `0.00`), its output is strict JSON."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({**json.loads((FIX / "profile.json").read_text()), "micro_batch": 1}))
    out = tmp_path / "p.json"
    args = ["project", str(FIX / "sweep"), "--commbench", str(LOOPBACK), "--nodes", "16", "--nprocs", "4"]
    proc = run_here([*args, "--profile", str(profile), "--output", str(out)], tmp_path, expect_rc=0)
    said = proc.stdout.splitlines()
    assert said[0].startswith("From: 3 `single` x1 run(s) of mnist") and "at global batch 64, 1 thread(s)" in said[0]
    assert "a commbench of 1 node(s) x 2 process(es) (2 ranks), link none (shared)" in said[0]
    assert said[1].startswith("To: 16 node(s) x 4 process(es) (64 ranks), global batch 64 (micro-batch 1 x 1)")
    assert said[2].startswith("| backend |")
    for warning in (
        "warning: 64 ranks, beyond the 2 the commbench measured",
        "warning: 16 nodes, beyond the 1 the commbench measured (one node: its ranks talked over its loopback",
        "warning: DDP's largest bucket (1.1 MiB) is larger than any message the commbench timed (1 MiB): its time "
        "is the fit carried beyond what was measured",
        "warning: forward+backward at micro-batch 1 is batch 64's scaled by the profile, not measured",
        "warning: commbench fit of ddp: not physical (2 size(s) (4 KiB, 1 MiB)",
        "warning: commbench fit of ddp (the computation it takes): not physical (",
    ):
        assert warning in proc.stderr
    rows = {p["backend"]: p for p in _strict(out.read_text())}
    for p in rows.values():
        assert p["samples_per_sec_lo"] < p["samples_per_sec"] < p["samples_per_sec_hi"]
        assert p["scaling_efficiency_lo"] < p["scaling_efficiency"] < p["scaling_efficiency_hi"]
        assert p["commbench"] == {"world_size": 2, "nodes": 1, "nprocs": 2, "link_mode": "shared", "dilation": 1.0}
        assert any("64 ranks" in w for w in p["warnings"])
    _strict((tmp_path / "p.profile.json").read_text())
    for line in [line for line in said if line.startswith("| ddp ")]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        point, ends = cells[4].split(" (")
        lo, hi = ends.rstrip(")").split("-")
        assert lo != point != hi
        assert re.fullmatch(r"0\.0*[1-9][0-9]", cells[5]), cells[5]  # two significant digits
        assert float(cells[5]) == pytest.approx(rows["ddp"]["scaling_efficiency"], rel=0.05)


def _folder(tmp_path, name: str, text: str):
    folder = tmp_path / name
    folder.mkdir()
    (folder / ("results.jsonl" if name.startswith("sweep") else "commbench.jsonl")).write_text(text)
    return folder


def test_an_input_folder_of_the_wrong_content_is_one_line(tmp_path):
    """On main each of these ended in a traceback (`KeyError: 'backend'`)."""
    sweep_lines = (FIX / "sweep" / "results.jsonl").read_text()
    bare = "".join(
        json.dumps({k: v for k, v in json.loads(line).items() if k != "environment"}) + "\n"
        for line in sweep_lines.splitlines()
    )
    torn = _folder(tmp_path, "sweep-torn", sweep_lines)
    (torn / "sweep.json").write_text("{ not json")
    cases = [
        ("--commbench", _folder(tmp_path, "cb-garbage", "garbage\n"), "holds no record (line 1: not a whole JSON"),
        ("--commbench", _folder(tmp_path, "cb-nobackend", '{"link_rate": "none"}\n'), "is not a commbench record"),
        ("--commbench", _folder(tmp_path, "cb-sweep", sweep_lines), "(size_bytes, time_s missing"),
        ("sweep", _folder(tmp_path, "sweep-bare", bare), "not what compare writes (a record lacks 'environment')"),
        ("sweep", torn, "not what compare writes (JSONDecodeError"),
    ]
    for where, folder, fragment in cases:
        sweep, commbench = (folder, LOOPBACK) if where == "sweep" else (FIX / "sweep", folder)
        args = ["project", str(sweep), "--commbench", str(commbench), "--output", str(tmp_path / "p.json")]
        assert_one_line_error(run_here(args, tmp_path), fragment)
        assert not (tmp_path / "p.json").exists()
