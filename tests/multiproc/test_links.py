"""Per-node links (distbench/launching/netns.py) for real: full duplex at their rate, every library across them, and
nothing left behind."""

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbench.backends import ALL_REDUCING, REGISTRY
from distbench.launching import netns
from distbench.training import fairness
from tests.helpers import ROOT, assert_one_process_per_node_on_its_cores, child_env, py, run_in


def node_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return [name for name in listed if name.startswith("dbn-")]


@pytest.mark.alone  # a rate, which another run beside it would change
@pytest.mark.timeout(200)
def test_a_per_node_link_carries_its_rate_each_way_at_once(tmp_path):
    """4 MB from node 0 to node 1 takes at least 4 MB / 100 Mbit/s less one token bucket (10 ms); 4 MB each way at
    the same time takes about as long as one alone (a hub, one queue for both, would take twice as long)."""
    proc = run_in(tmp_path, py("-m benchmarks.linkcheck duplex --rate 100mbit --mb 4 --repeats 3"), timeout=180)
    row = json.loads(proc.stdout.strip().splitlines()[0])
    alone, both = statistics.median(row["alone_s"]), statistics.median(row["both_s"])
    print(f"floor {row['floor_s']:.3f} s, one way {alone:.3f} s, both ways {both:.3f} s")
    assert alone >= row["floor_s"] - 0.01
    assert both / alone < 1.4
    assert not node_namespaces()  # alone: no other run makes any


@pytest.mark.alone  # rates, which another run beside it would change
@pytest.mark.timeout(400)
def test_commbench_times_every_library_across_per_node_links(tmp_path):
    """Each library with its fp16 compression, on CPU ranks also under load, on a 100 Mbit/s link per node. 4 MiB of
    float32 gradient sent in 16 bits moves half the bytes: its bus bandwidth, counted on the 4 MiB as nccl-tests
    counts it, is about twice the link's rate (measured: 1.9x; well above the link's rate: the compression ran; not
    far above twice it, the token bucket's burst allowed for: the link carried it). Fabric, which has no compression of
    its own, runs once as is: at about the link's rate (measured: 0.92x). (Uncompressed across a shaped link:
    test_nodes, the shaped all-reduce; each library's bytes on the wire as is and in 16 bits: test_knobs.)"""
    out = tmp_path / "cb"
    cmd = py(
        "run.py commbench --nodes 2 --nprocs 1 --link-rate 100mbit --link-mode per-node --repeats 2 "
        "--sizes 65536,4194304 --grad-compression fp16 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=480)
    recs = [json.loads(line) for line in (out / "commbench.jsonl").read_text().splitlines()]
    assert sorted({r["backend"] for r in recs}) == sorted(ALL_REDUCING)
    assert len(recs) == len(ALL_REDUCING) * 2 * 2 and {r["link_mode"] for r in recs} == {"per-node"}  # 2 sizes x 2
    assert all(r["loaded_time_s"] > 0 and r["loaded_cpu_s"] == r["loaded_cpu_s"] for r in recs)  # measured
    rows = list(csv.DictReader((out / "summary.csv").open()))
    big = {(r["backend"], r["grad_compression"]): r for r in rows if int(r["size_bytes"]) == 4194304}
    # a library without compression of its own (fabric) runs once, as is: at about the link's rate
    ways = {b: ("fp16", 1.3, 2.3) if REGISTRY[b].compresses else ("none", 0.6, 1.15) for b in ALL_REDUCING}
    assert set(big) == {(b, way[0]) for b, way in ways.items()}
    for backend, (sent, low, high) in ways.items():  # a 4 MiB ring all-reduce at 2 ranks: 4 MiB over each link
        print(backend, sent, float(big[backend, sent]["busbw_Bps"]) / 1e6, "MB/s over a link of 12.5 MB/s")
        assert low * 12.5e6 < float(big[backend, sent]["busbw_Bps"]) < high * 12.5e6, backend
    fit = json.loads((out / "fit.json").read_text(), parse_constant=lambda c: pytest.fail(f"fit.json holds {c}"))
    # two sizes: a line fits any two points, so no fit is called physical (its values null, the reason said)
    assert set(fit) == set(ALL_REDUCING)
    half = [fit[b]["compressed"]["fp16"] for b, way in ways.items() if way[0] == "fp16"]
    assert all(f["beta_s_per_byte"] is None and "loaded_cpu_beta_s_per_byte" in f for f in half)
    assert all(not f["physical"] and f["why"].startswith("2 size(s)") for f in half)
    assert (out / "commbench.md").is_file() and (out / "busbw.png").is_file()
    assert not node_namespaces()


@pytest.mark.alone  # rates, which another run beside it would change
@pytest.mark.timeout(200)
def test_a_dilated_commbench_times_the_link_it_emulates(tmp_path):
    """--dilation 4 on 100 Mbit/s per-node links: shaped at 25 Mbit/s, every time divided back by 4, so a 4 MiB
    all-reduce's bus bandwidth is the emulated link's, about 12.5 MB/s (undivided: a quarter of it; unshaped: far
    above), the time as measured kept at four times; nothing timed under load; the report says the dilation."""
    out = tmp_path / "cb"
    cmd = py(
        "run.py commbench --backends ddp --nodes 2 --nprocs 1 --link-rate 100mbit --link-mode per-node --repeats 2 "
        "--sizes 4194304 --dilation 4 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=180)
    recs = [json.loads(line) for line in (out / "commbench.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and {(r["link_rate"], r["link_rate_shaped"], r["dilation"]) for r in recs} == {
        ("100mbit", "25mbit", 4.0)
    }
    for r in recs:
        print(f"busbw {r['busbw_Bps'] / 1e6:.2f} MB/s, emulating a link of 12.5 MB/s")
        assert 0.6 * 12.5e6 < r["busbw_Bps"] < 1.15 * 12.5e6
        assert r["dilated_time_s"] == pytest.approx(4 * r["time_s"]) and "loaded_time_s" not in r
    assert "At dilation 4 (--dilation)" in (out / "commbench.md").read_text()
    assert json.loads((out / "fit.json").read_text())["ddp"]["dilation"] == 4.0
    assert not node_namespaces()


LAUNCHERS = ["ddp", "accelerate", "horovod", "deepspeed", "fabric"]  # a backend started by each launcher


@pytest.mark.timeout(600)
def test_compare_trains_every_library_on_per_node_links(tmp_path, mnist_run):
    """Each launcher's multi-node form on 2 simulated nodes x 1 process, each node in its own namespace behind a
    1 Gbit/s link (torchrun: ddp; accelerate launch: accelerate; horovodrun: horovod, which enters the nodes its own
    way; deepspeed: a launch per node without ssh, from one hostfile; fabric run: one per node, torchrun's static
    rendezvous; fsdp and accelerate-fsdp start as ddp and accelerate do, accelerate-deepspeed as accelerate): each
    reproduces its own 1 node x 2 run (mnist_run's first steps: the same batch, dropout off), with each rank on its
    node's cores, and each record's link as its processes found their namespace (the sweep fails a run whose link is
    not the planned one). (test_continue's sweep runs ddp and accelerate on 2 simulated nodes without a link.)"""
    out, before = tmp_path / "sweep", set(node_namespaces())
    cmd = py(
        f"run.py compare --backends {','.join(LAUNCHERS)} --nodes 2 --nprocs 1 --link-mode per-node "
        "--link-rate 1gbit --max-steps 8 --dropout 0 --out",
        out,
    )
    run_in(tmp_path, cmd, timeout=560)
    everything = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    recs = [r for r in everything if r["backend"] in LAUNCHERS]  # and compare's single-process reference
    assert sorted(r["backend"] for r in recs) == sorted(LAUNCHERS) and len(everything) == len(recs) + 1
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert (r["link_mode"], r["link_rate"], r["topology"]["nodes"]) == ("per-node", "1gbit", 2)
        one_node = mnist_run(r["backend"], 2)["loss_history"][:8]
        diff = max(abs(a - b) for a, b in zip(r["loss_history"], one_node, strict=True))
        print(f"{r['backend']} 2 nodes x 1 over per-node links vs 1 node x 2: max per-step loss difference {diff:.3e}")
        assert diff < fairness.LOSS_TOLERANCE and r["eval_count"] == 500, r["backend"]
        assert r["launcher"] == REGISTRY[r["backend"]].launchers[0]
        assert_one_process_per_node_on_its_cores(r)
    assert not set(node_namespaces()) - before  # its own removed (`make test` runs no other that makes any beside it)


def processes_with(mark: str) -> list[str]:
    """The processes whose environment holds `mark`, each as its command line."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone meanwhile
            continue
    return found


@pytest.mark.alone  # every node namespace of this machine: none other may be made meanwhile
@pytest.mark.timeout(200)
def test_the_namespaces_of_a_killed_run_are_removed_by_the_next(tmp_path):
    """SIGKILL leaves a run no chance to clean up, and named namespaces outlive their process: the next run that
    makes node namespaces removes those whose process is gone. Its launchers, each in a session of its own, are
    stopped when it dies and stop their workers (before, two torchrun agents were still alive after the suite)."""
    cmd = py(
        "run.py commbench --backends ddp --nodes 2 --nprocs 1 --link-rate 100mbit --link-mode per-node "
        "--repeats 200 --sizes 4194304 --out",
        tmp_path / "cb",
    )
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(tmp_path), start_new_session=True)
    mine, mark = f"dbn-{proc.pid}-", f"DISTBENCH_CACHE={tmp_path / 'cache'}"  # the mark: in each of its processes
    deadline = time.monotonic() + 90
    while sum("bin/torchrun " in c for c in processes_with(mark)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # until each node's agent runs
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert any(n.startswith(mine) for n in node_namespaces())  # left behind
    deadline = time.monotonic() + 30
    while (left := processes_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"the launchers outlived the run: {left}"  # each stopped when the run died (own_session)
    run_in(tmp_path, py("-m benchmarks.linkcheck duplex --rate 100mbit --mb 0.5 --repeats 1"), timeout=120)
    assert not node_namespaces()
    assert not (netns.ETC_NETNS.exists() and any(p.name.startswith(mine) for p in netns.ETC_NETNS.iterdir()))


CYCLE = """
import subprocess
from distbench.launching import link, netns

link.enter_private_namespace()
for _ in range(2):
    net = netns.NodeNetwork(2, "100mbit").up()
    subprocess.Popen(net.wrap(0, ["sleep", "3"]))  # still inside node 0 when its network goes down
    net.down()
print("up again")
"""


@pytest.mark.alone  # node namespaces: none other may be made meanwhile
@pytest.mark.timeout(60)
def test_a_node_network_goes_down_at_once_though_a_process_is_still_inside_a_node(tmp_path):
    """A namespace's deletion frees the veth end inside it only once its last process has gone; the next network of
    the same process (the bridge's measurement, then the run) met the old pair's names ("File exists") until down()
    deleted each pair by its switch end, which removes both ends at once."""
    script = tmp_path / "cycle.py"  # a file: entering the private namespace runs this command again
    script.write_text(CYCLE)
    env = child_env(tmp_path, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True)
    assert (proc.returncode, proc.stdout.strip()) == (0, b"up again"), proc.stderr.decode()[-2000:]
