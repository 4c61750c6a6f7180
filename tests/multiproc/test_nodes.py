"""A shaped link, for real. Simulated nodes under each launcher's multi-node form: test_links (behind per-node
links) and test_continue (without a link)."""

import json

import pytest

from distbench.launching import link
from tests.helpers import py, run_in


@pytest.mark.multiproc
@pytest.mark.alone  # an unshaped all-reduce's speed, which another run beside it would change
@pytest.mark.timeout(200)
def test_a_shaped_link_slows_an_all_reduce_to_its_rate(tmp_path):
    """A 4 MB all-reduce between 2 processes: at least 0.3 s over 100 Mbit/s (4 MB x 8 / 1e8 = 0.34 s even if
    only one rank's bytes crossed), far less unshaped; the host's own namespace is left as it was."""
    outer = link.netns()
    proc = run_in(tmp_path, py("-m benchmarks.linkcheck check --rates none,100mbit --mb 4 --repeats 3"), timeout=180)
    rows = {r["rate"]: r for r in json.loads(proc.stdout.strip().splitlines()[0])}
    print({rate: r["seconds"] for rate, r in rows.items()})
    assert min(rows["100mbit"]["seconds"]) >= 0.3
    assert max(rows["none"]["seconds"]) < 0.15
    assert link.netns() == outer


@pytest.mark.multiproc
@pytest.mark.alone  # a rate, which another run beside it would change
@pytest.mark.timeout(300)
def test_simulate_runs_one_job_over_a_shaped_link_and_records_the_rate(tmp_path):
    out = tmp_path / "r.json"
    cmd = py(
        "run.py simulate --backend ddp --nodes 2 --link-rate 100mbit -- --max-steps 12 --no-progress --output", out
    )
    proc = run_in(tmp_path, cmd, timeout=240)
    rec = json.loads(out.read_text())
    assert rec["link_rate"] == "100mbit" and rec["topology"]["nodes"] == 2
    # the link, rate and mode, in the running line and the last line
    assert "running (link 100mbit, shared): " in proc.stderr
    assert proc.stderr.rstrip().endswith("simulated ddp as 2 node(s) x 1 process(es), link 100mbit, shared: done")
    # the ConvNet's 1.2 MB of gradients, both ranks' bytes through one 12.5 MB/s bucket: under 600 samples/s
    assert rec["samples_per_sec"] < 600 and rec["written_bytes_per_step"] > 1e6
