"""commbench's arithmetic and the projection's models, against values worked out by hand (docs/projection.md)."""

import csv
import dataclasses
import json

import pytest

from distbench.errors import UserError
from distbench.planning import bandwidth as bw
from distbench.planning import commbench as cb
from distbench.planning import commbench_report as cr
from distbench.planning import links as lk
from distbench.planning import profile as pf
from distbench.planning import projection as pj
from distbench.planning import projection_report as pr
from distbench.planning import reference as rf
from distbench.planning import timeline as tl
from tests.helpers import FOUND

MiB = 2**20


def test_algbw_and_busbw_are_the_definitions_of_nccl_tests():
    """algbw = S / t; busbw = algbw x 2(n-1)/n: 64 MiB in 0.5 s."""
    assert bw.algbw(64 * MiB, 0.5) == 134_217_728.0
    assert bw.busbw(64 * MiB, 0.5, 2) == 134_217_728.0  # x 1
    assert bw.busbw(64 * MiB, 0.5, 4) == 201_326_592.0  # x 1.5
    assert bw.busbw(64 * MiB, 0.5, 8) == 234_881_024.0  # x 1.75
    assert bw.busbw(64 * MiB, 0.5, 1) == 0.0  # one rank moves nothing


def test_the_fit_follows_the_large_messages_where_small_ones_pass_faster_than_the_rate():
    """As on a token-bucket link: messages up to the burst (here 64 KiB) pass at twice the rate; the slope must still
    be the rate's within 4 % (gradient buckets are the large messages); a relative-error fit (1/t^2) is not."""
    sizes = [4096 * 4**i for i in range(8)]
    line = [2e-3 + 8e-8 * s for s in sizes]
    seconds = [2e-3 + 4e-8 * s if s <= 65536 else t for s, t in zip(sizes, line, strict=True)]
    fit = bw.fit(sizes, seconds)
    assert fit.beta_s_per_byte == pytest.approx(8e-8, rel=0.04)
    for s, t in zip(sizes[5:], line[5:], strict=True):
        assert fit.seconds(s) == pytest.approx(t, rel=0.04)


def test_the_fit_recovers_latency_and_bandwidth():
    sizes = list(cb.DEFAULT_SIZES)
    fit = bw.fit(sizes, [2e-3 + 8e-9 * s for s in sizes])
    assert fit.alpha_s == pytest.approx(2e-3) and fit.beta_s_per_byte == pytest.approx(8e-9)
    assert fit.bus_bandwidth(2) == pytest.approx(125e6)  # 2(n-1)/(n beta)
    assert fit.bus_bandwidth(4) == pytest.approx(187.5e6)


def test_a_summary_row_has_the_median_and_its_bandwidths():
    recs = [
        {
            "backend": "ddp",
            "size_bytes": 4 * MiB,
            "world_size": 2,
            "nodes": 2,
            "link_rate": "100mbit",
            "link_mode": "per-node",
            "time_s": t,
        }
        for t in (0.40, 0.30, 0.35)
    ]
    (row,) = cr.summarize(recs)
    assert row["time_s"] == 0.35 and row["repeats"] == 3
    assert row["algbw_Bps"] == row["busbw_Bps"] == pytest.approx(4 * MiB / 0.35)


def test_a_ring_all_reduce_is_carried_from_the_measured_world_size():
    """Measured at 2 ranks: t = 1 ms + 10 ns/B. At 4 ranks: 3x the latency steps, 1.5x the bytes per link."""
    link = lk.Link(1e-3, 1e-8, 2, "test")
    assert link.allreduce_s(1e6, 2) == pytest.approx(1e-3 + 1e-2)
    assert link.allreduce_s(1e6, 4) == pytest.approx(3e-3 + 1.5e-2)
    assert link.allreduce_s(1e6, 1) == 0.0


def test_a_nominal_link_moves_its_rate_and_has_no_latency():
    link = lk.Link.nominal("100mbit")
    assert link.allreduce_s(12.5e6, 2) == pytest.approx(1.0)  # 12.5 MB at 12.5 MB/s
    assert link.allreduce_s(12.5e6, 4) == pytest.approx(1.5)
    assert link.allreduce_s(0, 8) == 0.0
    with pytest.raises(UserError, match="no nominal rate"):
        lk.Link.nominal("none")


# Three gradients, ready at a quarter, half and all of backward; 20 ms of forward+backward at the micro-batch
# (40 ms at the reference batch x 0.5), a quarter of it forward: forward 5 ms, backward 15 ms; data 2 ms at batch
# 64 -> 1 ms at 32; optimizer 4 ms. Backward starts at 1 + 5 = 6 ms. On 100 Mbit/s at 2 ranks a byte takes 80 ns.
PROFILE = pf.Profile(
    grad_bytes=[4_000_000, 400, 2_000_000],
    ready=[0.25, 0.5, 1.0],
    forward_share=0.25,
    micro_over_reference=0.5,
    micro_batch=32,
)
PHASES = rf.Phases(data=2.0, forward_backward=40.0, optimizer=4.0)
PLAN = tl.Plan(nodes=2, nprocs=1, batch_size=64, accumulate=1, compression="none")


def _computation(plan=PLAN):
    return tl.Computation.of(PHASES, PROFILE, 64, plan)


def test_the_computation_of_a_micro_batch():
    comp = _computation()
    assert (comp.data, comp.forward, comp.backward, comp.optimizer) == pytest.approx((1e-3, 5e-3, 15e-3, 4e-3))
    assert comp.backward_start == pytest.approx(6e-3)
    acc2 = _computation(tl.Plan(2, 1, 64, 2, "none"))  # 2 micro-batches: data twice, one whole forward+backward
    assert acc2.backward_start == pytest.approx(2 * 0.5e-3 + 20e-3 + 5e-3)


def test_a_measured_micro_batch_replaces_the_scaled_one():
    """Where the sweep ran the micro-batch, its data and forward+backward are taken as measured (the optimizer stays
    the reference's: it does not depend on the batch)."""
    micro = rf.Phases(data=1.5, forward_backward=24.0, optimizer=9.0)
    comp = tl.Computation.of(PHASES, PROFILE, 64, PLAN, micro)
    assert (comp.data, comp.forward, comp.backward, comp.optimizer) == pytest.approx((1.5e-3, 6e-3, 18e-3, 4e-3))


def test_ddp_all_reduces_each_bucket_when_its_last_gradient_is_ready():
    """torch's assignment: the 4 MB gradient alone (over the 1 MB first bucket), then 400 B + 2 MB. Bucket 1 ready
    at 6 + 15/4 = 9.75 ms, done at 9.75 + 320 = 329.75 ms; bucket 2 (ready at 21 ms) waits for the link, done at
    329.75 + 160.032 = 489.782 ms; the optimizer's 4 ms after."""
    assert tl.ddp_buckets(PROFILE, 1.0) == [[0], [1, 2]]
    step = tl.ddp_step(_computation(), PROFILE, lk.Link.nominal("100mbit"), PLAN, cap_mb=1.0)
    assert step == pytest.approx(0.493782)
    fp16 = tl.Plan(2, 1, 64, 1, "fp16")
    half = tl.ddp_step(_computation(fp16), PROFILE, lk.Link.nominal("100mbit", "fp16"), fp16, 1.0)
    assert half == pytest.approx(0.009750 + (0.160 + 0.080016) + 0.004)  # fp16: half the bytes on the link


def test_horovod_fuses_what_is_ready_at_each_cycle():
    """The 4 MB gradient, ready at 9.75 ms, goes alone (at the 10 ms wake-up nothing else is ready): done at
    329.75 ms; by then the other two are ready and go fused: 160.032 ms more. commbench's latency (it times Horovod's
    all-reduce from the enqueue: the cycle's wait and the negotiation are in it) is paid once per fused all-reduce."""
    step = tl.horovod_step(_computation(), PROFILE, lk.Link.nominal("100mbit"), PLAN)
    assert step == pytest.approx(0.493782)
    slow = lk.Link(1e-3, 8e-8, 2, "test")  # the same bandwidth, 1 ms latency
    assert tl.horovod_step(_computation(), PROFILE, slow, PLAN) == pytest.approx(0.493782 + 2 * 1e-3)


def test_zero_all_reduces_after_backward_and_stages_1_and_2_gather_the_parameters():
    """DeepSpeed's engine: the 6,000,400 bytes of gradients in one bucket after backward (6 + 15 = 21 ms), 480.032 ms
    at 80 ns/B; stage 0 then the whole optimizer (4 ms); stages 1 and 2 a half of it (2 ms) and the all-gather of the
    parameters, half an all-reduce of as many bytes: 240.016 ms."""
    link_ = lk.Link.nominal("100mbit")
    step = {k: tl.zero_step(_computation(), PROFILE, link_, dataclasses.replace(PLAN, zero_stage=k)) for k in (0, 1, 2)}
    assert step[0] == pytest.approx(0.021 + 0.480032 + 0.004)
    assert step[1] == step[2] == pytest.approx(0.021 + 0.480032 + 0.002 + 0.240016)
    assert tl.step_s("deepspeed", _computation(), PROFILE, link_, PLAN, 1.0) == step[0]  # the registry's model
    # a model of more than one bucket (5e8 elements): one all-reduce per bucket, each paying the latency
    big = dataclasses.replace(PROFILE, grad_bytes=[3_000_000_000], ready=[1.0])
    slow = lk.Link(1e-3, 0.0, 2, "test")
    assert tl.zero_step(_computation(), big, slow, PLAN) == pytest.approx(0.021 + 2 * 1e-3 + 0.004)


def test_stages_1_and_2_take_the_all_gather_commbench_timed_and_the_norms_all_reduce():
    """With DeepSpeed's all-gather timed (2 ms + 100 ns/B at 2 ranks), stages 1 and 2 pay after the gradients'
    all-reduce the norm's (one float: 1 ms + 4 x 80 ns), half the optimizer and the all-gather of the 6,000,400 bytes
    (2 + 600.04 ms); stage 0 is as before. A ring all-gather at 4 ranks: 3 latencies and 3/4 of the bytes, against
    1/2 at the 2 it was measured at."""
    gather = lk.Link(2e-3, 1e-7, 2, "gather")
    link_ = dataclasses.replace(lk.Link(1e-3, 8e-8, 2, "test"), gather=gather)
    step = {k: tl.zero_step(_computation(), PROFILE, link_, dataclasses.replace(PLAN, zero_stage=k)) for k in (0, 1, 2)}
    reduced = 0.021 + 1e-3 + 0.480032
    assert step[0] == pytest.approx(reduced + 0.004)
    assert step[1] == step[2] == pytest.approx(reduced + (1e-3 + 4 * 8e-8) + 0.002 + (2e-3 + 0.60004))
    assert gather.allgather_s(1e6, 4) == pytest.approx(3 * 2e-3 + 1e-7 * 1e6 * 0.75 / 0.5)
    assert gather.allgather_s(1e6, 1) == 0.0


def test_zero_3_exchanges_each_parameter_and_reduce_scatters_in_place_of_the_all_reduce():
    """Beyond a stage-0 step, ZeRO-3 exchanges the norm (1 ms + 4 x 80 ns), each of the 3 parameters all-gathered
    (3 x 2 ms + 100 ns/B x 6,000,400 B), the gradients reduce-scattered (1 ms + 50 ns/B x 6,000,400 B), and not stage
    0's all-reduce (1 ms + 80 ns/B x 6,000,400 B); stages 1-2 the norm and one all-gather of all the bytes."""
    gather, scatter = lk.Link(2e-3, 1e-7, 2, "gather"), lk.Link(1e-3, 5e-8, 2, "scatter")
    link_ = dataclasses.replace(lk.Link(1e-3, 8e-8, 2, "test"), gather=gather, scatter=scatter)
    norm = 1e-3 + 4 * 8e-8
    expected = norm + (6e-3 + 0.60004) + (1e-3 + 0.30002) - (1e-3 + 0.480032)
    assert tl.zero_exchanges_s(link_, PROFILE, 3, 2) == pytest.approx(expected)
    assert tl.zero_exchanges_s(link_, PROFILE, 2, 2) == pytest.approx(norm + 2e-3 + 0.60004)
    step = tl.zero_step(_computation(), PROFILE, link_, dataclasses.replace(PLAN, zero_stage=3), 0.005)
    assert step == pytest.approx(tl.zero_step(_computation(), PROFILE, link_, PLAN) + 0.005 + expected)


def test_fsdp_gathers_each_unit_twice_the_root_once_and_reduce_scatters_each_then_steps_its_shard():
    """FSDP2 on a host its collectives block: two units (4,000,000 and 400 B) all-gathered before forward and again
    before backward, the root (the other 2,000,000 B) once; each of the three reduce-scattered after its backward; none
    overlapped: the computation (21 ms), that sum and half the optimizer (2 ms). All-gather 2 ms + 100 ns/B and
    reduce-scatter 1 ms + 50 ns/B at the 2 ranks measured; without them, half a ring all-reduce each."""
    gather, scatter = lk.Link(2e-3, 1e-7, 2, "gather"), lk.Link(1e-3, 5e-8, 2, "scatter")
    link_ = dataclasses.replace(scatter, gather=gather, scatter=scatter)
    units = dataclasses.replace(PROFILE, shard_units=[4_000_000, 400])
    gathers = 2 * (2e-3 + 0.4) + 2 * (2e-3 + 4e-5) + (2e-3 + 0.2)
    scatters = (1e-3 + 0.2) + (1e-3 + 2e-5) + (1e-3 + 0.1)
    assert tl.fsdp_step(_computation(), units, link_, PLAN) == pytest.approx(0.021 + gathers + scatters + 0.002)
    ring = lk.Link(1e-3, 8e-8, 2, "ring")  # no fit of either: each half a ring all-reduce
    halves = sum(k * ring.allreduce_s(b, 2) / 2 for k, b in ((3, 4_000_000), (3, 400), (2, 2_000_000)))
    assert tl.fsdp_step(_computation(), units, ring, PLAN) == pytest.approx(0.021 + halves + 0.002)
    with pytest.raises(UserError, match="does not say which gradients each of the task's FSDP units"):
        tl.fsdp_step(_computation(), PROFILE, link_, PLAN)
    with pytest.raises(UserError, match="--accumulate 2: project has no model of FSDP2's"):
        tl.fsdp_step(_computation(), units, link_, dataclasses.replace(PLAN, accumulate=2))


def test_a_shard_unit_holds_the_gradients_of_the_modules_inside_it_and_the_root_the_rest():
    """Each owner's bytes go to the first unit (inner before outer) that is it or holds it; the others to the root."""
    owners = [("conv1", 10), ("layer1.0.conv", 20), ("layer1.1", 5), ("layer10", 3), ("fc", 7)]
    assert pf.unit_bytes(owners, ["layer1"]) == [25]
    assert pf.unit_bytes(owners, ["layer1.0", "layer1", "fc"]) == [20, 5, 7]
    assert pf.unit_bytes(owners, []) == []


def _engine_inputs(tmp_path, steps_ms, nodes=1):
    """A compare folder of deepspeed at 2 processes on one node, ZeRO stages 0 and 1 at `steps_ms` per round, and a
    commbench of its collectives on `nodes` node(s): all-reduce 0.5 ms + 0.1 ns/B, the all-gather 1 ms + 0.1 ns/B,
    each twice that timed under load."""
    sweep, node = tmp_path / "engine", tmp_path / "node"
    sweep.mkdir(parents=True)
    node.mkdir()
    recs = []
    for n, by_stage in enumerate(steps_ms, 1):
        for stage, ms in enumerate(by_stage):
            rec = {"task": "mnist", "backend": "deepspeed", "world_size": 2, "nodes": 1, "status": "ok", "round": n}
            recs.append(rec | {"config": {"zero_stage": stage}, "global_batch_size": 64, "samples_per_sec": 64e3 / ms})
    recs.append(recs[-1] | {"world_size": 4, "samples_per_sec": 1.0})  # another world size: not paired with these
    (sweep / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    bench = []
    for collective, alpha in (("all-reduce", 5e-4), ("all-gather", 1e-3)):
        for r in _loopback_records([(4096, 1.0), (MiB, 2.0)]):
            t = alpha + 1e-10 * r["size_bytes"]
            rec = r | {"backend": "deepspeed", "collective": collective, "nodes": nodes}
            bench.append(rec | {"time_s": t, "loaded_time_s": 2 * t})
    (node / cr.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in bench))
    return sweep, node


def test_with_the_engine_measured_on_one_node_stages_1_and_2_are_stage_0_and_its_work(tmp_path):
    """Measured at 2 processes on one node, ZeRO-1 took 6 and 5 ms a step more than stage 0 in two rounds (median
    5.5); its norm's all-reduce there (0.5 ms + 4 x 0.1 ns) and all-gather of the 6,000,400 bytes (1 + 0.60004 ms)
    come off: 3.39996 ms of the engine's own work. On the planned link stage 1 is then stage 0's step (with the whole
    optimizer), that work, the link's norm (1 ms + 4 x 80 ns) and its all-gather (2 + 600.04 ms)."""
    from distbench.planning import engine as en

    sweep, node = _engine_inputs(tmp_path, [(20.0, 26.0), (20.0, 25.0)])
    engine = en.load_engine(sweep, node, "deepspeed", 1)
    assert engine.world == 2 and sorted(engine.extra_s[1]) == pytest.approx([5e-3, 6e-3])
    term = engine.term_s(1, PROFILE)
    assert term == pytest.approx(5.5e-3 - (5e-4 + 4e-10) - (1e-3 + 0.60004e-3))
    gather = lk.Link(2e-3, 1e-7, 2, "gather")
    link_ = dataclasses.replace(lk.Link(1e-3, 8e-8, 2, "test"), gather=gather)
    zero1 = dataclasses.replace(PLAN, zero_stage=1)
    step0 = tl.zero_step(_computation(), PROFILE, link_, PLAN)
    step1 = tl.zero_step(_computation(), PROFILE, link_, zero1, term)
    assert step1 == pytest.approx(step0 + term + (1e-3 + 4 * 8e-8) + (2e-3 + 0.60004))
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES, PHASES], [1000.0, 1000.0])
    _, links = lk.load_links(node, None)  # as the planned link here: only the engine matters
    projection = pj.Projection(ref, PROFILE, zero1, links, "none", 1.0, {"deepspeed": engine})
    predicted = projection.predict("deepspeed")
    assert predicted["engine_ms"] == pytest.approx(term * 1e3)
    assert tl.ZERO_GATHER_FOUND not in predicted["warnings"] and tl.ZERO_LOADED_FOUND in predicted["warnings"]
    assert any(w.startswith("ZeRO-1's engine beyond stage 0 measured on one node at 2") for w in predicted["warnings"])
    # stage 0's own step there (20 ms in both rounds) less what zero_step gives for it on the node's link, added to
    # every stage's step on the planned one
    comp = tl.Computation.of(PHASES, PROFILE, 64, zero1)
    node_link = engine.node()
    there = tl.zero_step(comp, PROFILE, node_link, dataclasses.replace(PLAN, nodes=1, nprocs=2))
    assert predicted["stage0_node_ms"] == pytest.approx(1e3 * (20e-3 - there))
    planned = tl.zero_step(comp, PROFILE, projection.link_for("deepspeed"), zero1, term)
    assert predicted["step_ms"] == pytest.approx(1e3 * planned + predicted["stage0_node_ms"])
    assert any(
        w.startswith("deepspeed's stage-0 step measured on one node at 2 processes (2 run(s)):")
        for w in predicted["warnings"]
    )
    small, node = _engine_inputs(tmp_path / "small", [(20.0, 20.5)])  # 0.5 ms, less than its collectives take
    held = en.load_engine(small, node, "deepspeed", 1)
    assert held.term_s(1, PROFILE) == 0.0
    assert "more than the 0.50 ms measured: not physical, taken as 0" in held.said(1, PROFILE)
    cases = (({"nodes": 2}, 1, "not one node"), ({}, 2, "no one-node deepspeed runs at 2 processes"))
    cases += (({}, 3, "timed no deepspeed reduce-scatter"),)  # ZeRO-3's, which this commbench did not time
    for bad, stage, match in cases:
        sweep, node = _engine_inputs(tmp_path / str(len(match)), [(20.0, 26.0)], **bad)
        with pytest.raises(UserError, match=match):
            en.load_engine(sweep, node, "deepspeed", stage)


def test_deepspeeds_collectives_on_cpu_nodes_take_commbenchs_time_under_load(tmp_path):
    """commbench timed each collective idle (t) and beside a computation on the core (2t: `_loopback_records`).
    On CPU nodes (cores_shared) DeepSpeed's all-reduce and all-gather, on the planned link and on the engine's node,
    are fitted to the time under load and say so; DDP's to the idle time (its charge on backward is apart); on a plan
    whose cores are free (GPUs) DeepSpeed's too. A commbench that did not time under load: idle, and said."""
    from distbench.planning import engine as en

    sweep, node = _engine_inputs(tmp_path, [(20.0, 26.0)])
    _, links = lk.load_links(node, None)
    links["ddp"] = _loopback_records([(4096, 0.5), (MiB, 0.6)])
    idle, loaded = (lk.fit_link(links["deepspeed"], "d", under_load=u) for u in (False, True))
    assert loaded.allreduce_s(MiB, 2) == pytest.approx(2 * idle.allreduce_s(MiB, 2))
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    for shared in (True, False):
        plan = dataclasses.replace(PLAN, zero_stage=1, cores_shared=shared)
        projection = pj.Projection(ref, PROFILE, plan, links, "none", 1.0)
        ds, ddp = projection.link_for("deepspeed"), projection.link_for("ddp")
        factor = 2 if shared else 1
        assert ds.allreduce_s(MiB, 2) == pytest.approx(factor * idle.allreduce_s(MiB, 2))
        assert ds.gather.source.endswith("all-gather timed under load") == shared
        assert ds.source.endswith("timed under load") == shared and "under load" not in ddp.source
        assert ddp.allreduce_s(MiB, 2) == pytest.approx(lk.fit_link(links["ddp"], "").allreduce_s(MiB, 2))
        engine = en.load_engine(sweep, node, "deepspeed", 1, tl.timed_under_load("deepspeed", plan))
        assert engine.node().allreduce_s(MiB, 2) == pytest.approx(factor * idle.allreduce_s(MiB, 2))
        assert ("timed under load" in engine.said(1, PROFILE)) == shared  # the warning says how it was taken
    unloaded = [{k: v for k, v in r.items() if k != "loaded_time_s"} for r in links["deepspeed"]]
    fallback = lk.fit_link(unloaded, "d", under_load=True)
    assert fallback.allreduce_s(MiB, 2) == pytest.approx(idle.allreduce_s(MiB, 2))
    assert fallback.source == "d (timed on an idle core: not measured under load)"


def test_a_commbench_of_more_ranks_than_twice_its_cores_is_said_to_rest_on_the_host():
    """At 8 ranks on 2 cores commbench's fits made predictions 15-41 % too slow (docs/projection.md): a prediction
    from such a commbench says so; at 4 ranks on 2 cores, or with no cores recorded, it does not."""
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])

    def said(world, load):
        recs = [r | {"world_size": world, **load} for r in _loopback_records([(4096, 1.0), (MiB, 2.0)])]
        return pj.Projection(ref, PROFILE, PLAN, {"ddp": recs}, "none", 1.0).warnings("ddp")

    crowded = pj.CROWDED_SAID.format(world=8, cores=2)
    assert crowded in said(8, {"machine_load": {"avg_1m_before": 1.0, "avg_1m_after": 1.0, "cores": 2}})
    assert not any("ranks on" in w for w in said(4, {"machine_load": {"cores": 2}}) + said(8, {}))
    # dilated K times (commbench --dilation), the host's costs are divided by K: K times as many ranks
    assert not any("ranks on" in w for w in said(8, {"machine_load": {"cores": 2}, "dilation": 4.0}))
    assert crowded.replace("8 ranks", "32 ranks") in said(32, {"machine_load": {"cores": 2}, "dilation": 4.0})


def test_a_dilated_commbench_times_the_link_it_emulates_and_says_so():
    """commbench --dilation K: the worker's times divided back by K, the time as measured kept; the records, the fit
    and the report say the dilation; a prediction for CPU nodes (whose cores compute the step) from it says that it
    is an emulated cluster's link, one for an emulated cluster does not."""
    from distbench.planning import worker

    measured = {"time_s": [0.4, 0.8], "cpu_s": [0.04, 0.08]}
    back = worker.undilated(measured, 4.0)
    assert back == {"time_s": [0.1, 0.2], "cpu_s": [0.01, 0.02], "dilated_time_s": [0.4, 0.8]}
    assert worker.undilated(measured, 1.0) is measured
    sizes = (4096, 2**18, 2**20)
    per_size = {str(s): worker.undilated({"time_s": [4 * (1e-3 + 1e-8 * s)] * 3}, 4.0) for s in sizes}
    result = {**FOUND, "launcher": "torchrun", "dilation": 4.0, "link_rate": "100mbit", "link_rate_shaped": "25mbit"}
    config = cb.Bench(["ddp"], list(sizes), 1, 2, "100mbit", "shared", 3, 1, 60.0, dilation=4.0).configs()[0]
    recs = cb.records(result | {"measured": {"all-reduce": per_size}}, config, 1)
    assert {(r["dilation"], r["link_rate"], r["link_rate_shaped"]) for r in recs} == {(4.0, "100mbit", "25mbit")}
    assert all(r["dilated_time_s"] == pytest.approx(4 * r["time_s"]) for r in recs)
    rows = cr.summarize(recs)
    fitted = cr.fits(rows)["ddp"]
    assert fitted["dilation"] == 4.0 and fitted["alpha_s"] == pytest.approx(1e-3)  # the emulated link's
    assert "At dilation 4 (--dilation): the links shaped 4 times slower than 100mbit" in cr.markdown(rows, {}, "c")
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    for shared in (True, False):
        plan = dataclasses.replace(PLAN, cores_shared=shared)
        said = pj.Projection(ref, PROFILE, plan, {"ddp": recs}, "none", 1.0).warnings("ddp")
        assert (pj.DILATED_SAID.format(k=4.0) in said) == shared
    assert cb.Bench(["ddp"], [4096], 1, 2, "100mbit", "shared", 1, 1, 60.0, dilation=4.0).program(config, "o")[-4:] == [
        "--dilation",
        "4.0",
        "--output",
        "o",
    ]


def test_commbench_keeps_the_all_gather_apart_from_the_all_reduce(tmp_path):
    """A worker's result of both collectives: records naming each, the all-gather's busbw (n-1)/n of its algbw,
    fits and links apart (`deepspeed all-gather`), and a projection at ZeRO-2 that takes it and says so."""
    times = {"all-reduce": (2e-3, 1e-8), "all-gather": (1e-3, 5e-9)}  # alpha, beta
    sizes = (4096, 2**20, 2**24)
    measured = {c: {str(s): {"time_s": [a + b * s]} for s in sizes} for c, (a, b) in times.items()}
    result = {**FOUND, "launcher": "deepspeed", "measured": measured}
    config = cb.Bench(["deepspeed"], [4096], 1, 2, "none", "shared", 1, 1, 60.0).configs()[0]
    recs = cb.records(result, config, 1)
    gathers = [r for r in recs if r["collective"] == "all-gather"]
    assert len(gathers) == len(recs) / 2 == 3 and {cr.series(r)[0] for r in gathers} == {"deepspeed all-gather"}
    assert gathers[0]["busbw_Bps"] == pytest.approx(gathers[0]["algbw_Bps"] / 2)
    fitted = cr.fits(cr.summarize(recs))
    assert set(fitted) == {"deepspeed", "deepspeed all-gather"}
    assert fitted["deepspeed all-gather"]["beta_s_per_byte"] == pytest.approx(5e-9)
    folder = tmp_path
    (folder / cr.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    _, links = lk.load_links(folder, None)
    assert {k: len(v) for k, v in links.items()} == {"deepspeed": 3, "deepspeed all-gather": 3}
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    zero2 = pj.Projection(ref, PROFILE, dataclasses.replace(PLAN, zero_stage=2), links, "none", 1.0)
    link_ = zero2.link_for("deepspeed")
    assert link_.gather.allgather_s(2**20, 2) == pytest.approx(1e-3 + 5e-9 * 2**20)
    predicted = zero2.predict("deepspeed")
    assert predicted["all_gather"] == "commbench fit of deepspeed all-gather"
    assert tl.ZERO_GATHER_FOUND in predicted["warnings"] and tl.ZERO_FOUND not in predicted["warnings"]
    assert predicted["samples_per_sec_lo"] is None or predicted["samples_per_sec_lo"] <= predicted["samples_per_sec"]


def test_project_refuses_what_its_zero_model_does_not_cover():
    from distbench.planning import project as pjt

    def request(**changes):
        given = dict(sweep_dirs=[], output=None, nodes=2, nprocs=1, link_rate="100mbit", commbench=None, accumulate=1)
        given.update(backends="ddp,deepspeed", grad_compression="none", batch_size=0, profile=None)
        return pjt.ProjectRequest(**{**given, **changes})

    with pytest.raises(UserError, match="^--zero-stage 3: project models ZeRO-3 only with its engine measured"):
        pjt._check_zero(request(zero_stage=3), ["ddp", "deepspeed"])
    with pytest.raises(UserError, match="^--zero-stage 4: DeepSpeed's ZeRO stages are 0, 1, 2, 3"):
        pjt._check_zero(request(zero_stage=4), ["ddp", "deepspeed"])
    with pytest.raises(UserError, match="^--zero-stage 2: only the DeepSpeed backends have ZeRO stages"):
        pjt._check_zero(request(zero_stage=2), ["ddp"])
    with pytest.raises(UserError, match="^--grad-compression fp16: project models deepspeed uncompressed only"):
        pjt._check_zero(request(grad_compression="fp16"), ["ddp", "deepspeed"])
    pjt._check_zero(request(zero_stage=2), ["ddp", "deepspeed"])  # fine
    for given, names in ((dict(node_sweep="s", node_commbench="c"), ["ddp"]), (dict(node_sweep="s"), ["deepspeed"])):
        with pytest.raises(UserError, match="^--node-sweep and --node-commbench measure DeepSpeed's engine: give both"):
            pjt._engines(request(**given), names, PLAN)
    assert cb.backend_names("deepspeed,ddp") == ["deepspeed", "ddp"]


def test_a_step_is_never_shorter_than_its_computation():
    fast = lk.Link(0.0, 1e-15, 2, "test")
    comp = _computation()
    for step in (tl.ddp_step(comp, PROFILE, fast, PLAN, 1.0), tl.horovod_step(comp, PROFILE, fast, PLAN)):
        assert step >= 1e-3 + 20e-3 + 4e-3


def test_on_cpu_nodes_the_all_reduces_take_their_cpu_time_from_backward():
    """A link fast enough to hide every transfer, but each all-reduce costs the rank 1 ms + 1 ns/B of CPU: on a CPU
    node that time is not overlapped. Buckets of 4,000,000 and 2,000,400 bytes: 5 + 3.0004 ms after backward's
    21 ms end, then the optimizer's 4 ms."""
    link = lk.Link(0.0, 1e-12, 2, "test", cpu_alpha_s=1e-3, cpu_beta_s_per_byte=1e-9)
    shared = tl.Plan(2, 1, 64, 1, "none", cores_shared=True)
    assert tl.ddp_step(_computation(), PROFILE, link, shared, 1.0) == pytest.approx(0.0330004)
    assert tl.ddp_step(_computation(), PROFILE, link, PLAN, 1.0) == pytest.approx(0.025, abs=1e-5)  # a GPU node
    # Horovod: the link is free when each gradient is ready (9.75, 13.5, 21 ms), so three all-reduces, not fused:
    # 9.0004 ms of CPU
    assert tl.horovod_step(_computation(), PROFILE, link, shared) == pytest.approx(0.021 + 0.0090004 + 0.004)


def test_the_expected_slowest_of_n_ranks():
    """E[max of n standard normals], the textbook values."""
    assert [round(tl.expected_max_normal(n), 4) for n in (1, 2, 3, 4, 16)] == [0.0, 0.5642, 0.8463, 1.0294, 1.766]


def test_every_exchange_waits_for_the_slowest_rank():
    """A step time that varies by 4 ms (p50 20, p90 25.1264 ms: 5.1264 / 1.2816) makes the slowest of 2 ranks
    0.5642 x 4 = 2.2568 ms late, of 4 ranks 4.118 ms; with 4 micro-batches, twice that (sqrt 4)."""
    jittery = rf.Phases(2.0, 40.0, 4.0, jitter=4.0)
    assert rf._phases(
        {
            "step_breakdown_ms": {"data_ms": 2.0, "forward_backward_ms": 40.0, "optimizer_ms": 4.0},
            "step_time_ms": {"p50": 20.0, "p90": 25.1264},
        }
    ).jitter == pytest.approx(4.0)
    micro = rf.Phases(1.0, 20.0, 4.0, jitter=4.0)  # measured at the micro-batch
    for plan, late in (
        (PLAN, 2.2568e-3),
        (tl.Plan(4, 1, 128, 1, "none"), 4.1177e-3),
        (tl.Plan(2, 1, 256, 4, "none"), 2 * 2.2568e-3),
        (tl.Plan(1, 1, 32, 1, "none"), 0.0),
    ):
        comp = tl.Computation.of(jittery, PROFILE, 64, plan, micro)
        assert comp.lockstep == pytest.approx(late, rel=1e-4)
    # scaled from the reference batch, the jitter scales as forward+backward does (x 0.5 here)
    assert tl.Computation.of(jittery, PROFILE, 64, PLAN).lockstep == pytest.approx(2.2568e-3 / 2, rel=1e-4)
    late = tl.Computation.of(jittery, PROFILE, 64, PLAN, micro)
    on_time = tl.Computation.of(rf.Phases(2.0, 40.0, 4.0), PROFILE, 64, PLAN, rf.Phases(1.0, 20.0, 4.0))
    fast = lk.Link(0.0, 1e-15, 2, "test")
    step = tl.ddp_step(late, PROFILE, fast, PLAN, 1.0)
    assert step - tl.ddp_step(on_time, PROFILE, fast, PLAN, 1.0) == pytest.approx(2.2568e-3, rel=1e-4)


def _record(size, compression, time_s, cpu_s, loaded_cpu_s=None):
    rec = {"backend": "ddp", "size_bytes": size, "world_size": 2, "time_s": time_s, "cpu_s": cpu_s}
    rec |= {"grad_compression": compression} if compression else {}
    return rec | ({"loaded_cpu_s": loaded_cpu_s} if loaded_cpu_s is not None else {})


def test_the_cpu_charge_is_what_commbench_measured_under_load():
    """t = 1 ms + 10 ns/B; idle CPU 0.5 ms + 5 ns/B; taken under load 2 ms + 1 ns/B: the charge is the last; the
    idle CPU time, where no load was taken, and the source says so where the cores are shared."""
    recs = [_record(s, None, 1e-3 + 1e-8 * s, 5e-4 + 5e-9 * s, 2e-3 + 1e-9 * s) for s in (4096, 2**20, 2**24)]
    link = lk.fit_link(recs, "test")
    assert link.cpu_s(2**20, 2) == pytest.approx(2e-3 + 1e-9 * 2**20)
    idle = lk.fit_link([{k: v for k, v in r.items() if k != "loaded_cpu_s"} for r in recs], "test")
    assert idle.cpu_s(2**20, 2) == pytest.approx(5e-4 + 5e-9 * 2**20) and "idle core" in idle.source
    # where the node's computation leaves its cores free (a GPU node, an emulated one), nothing is under load
    free = lk.fit_link([{k: v for k, v in r.items() if k != "loaded_cpu_s"} for r in recs], "test", cores_shared=False)
    assert free.source == "test" and free.cpu_s(2**20, 2) == idle.cpu_s(2**20, 2)


def test_a_compression_commbench_timed_is_taken_as_timed():
    """Where commbench timed fp16 (S = the float32 gradient's bytes), the plan's fp16 uses that fit at the whole
    gradient size; where it did not, the uncompressed fit at half the size."""
    plain = [_record(s, "none", 1e-3 + 1e-8 * s, 0.0) for s in (4096, 2**20, 2**24)]
    fp16 = [_record(s, "fp16", 3e-3 + 9e-9 * s, 0.0) for s in (4096, 2**20, 2**24)]
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    both = pj.Projection(ref, PROFILE, tl.Plan(2, 1, 64, 1, "fp16"), {"ddp": plain + fp16}, "100mbit", 1.0)
    timed = both.link_for("ddp")
    assert timed.wire_fraction == 1.0 and timed.allreduce_s(2**20, 2) == pytest.approx(3e-3 + 9e-9 * 2**20)
    assert "ddp fp16" in timed.source
    only_plain = pj.with_plan(both, compression="fp16")
    only_plain = pj.Projection(ref, PROFILE, only_plain.plan, {"ddp": plain}, "100mbit", 1.0)
    halved = only_plain.link_for("ddp")
    assert halved.wire_fraction == 0.5 and "at fp16's size" in halved.source
    with pytest.raises(UserError, match="neither with bf16 nor uncompressed"):
        pj.with_plan(pj.Projection(ref, PROFILE, PLAN, {"ddp": fp16}, "100mbit", 1.0), compression="bf16").link_for(
            "ddp"
        )


def test_the_computation_an_all_reduce_takes_from_a_busy_core():
    """The load ends a product every 0.1 ms alone (the baseline, 0-10 ms); during a 10 ms all-reduce (20-30 ms) it
    ends one every 0.25 ms: it did 4 ms of its work in 10 ms, so the all-reduce took 6 ms. The product under way at
    each edge counts in proportion."""
    from distbench.planning.worker import Load, taken

    load = Load.__new__(Load)  # its clock alone, no thread
    load.ends = [i * 1e-4 for i in range(101)] + [20e-3 + i * 2.5e-4 for i in range(41)] + [31e-3]
    assert taken(load, (20e-3, 30e-3), (0.0, 10e-3)) == pytest.approx(6e-3)
    assert taken(load, (20.05e-3, 29.95e-3), (0.0, 10e-3)) == pytest.approx(9.9e-3 - 9.9e-3 * 0.4)
    assert load.work(0.55e-3) == pytest.approx(5.5)


# ---- fits that know their limits, valid JSON, the load said as measured (issue 34) ----------------------------


def strict_json(text: str):
    """JSON as the standard has it: NaN and Infinity, which Python's json reads and writes, refused."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _loopback_records(sizes_and_ms, loaded_ms=None):
    """Records of a commbench of 1 node x 2 ranks on loopback, 3 repeats per size, as `records` writes them."""
    out = []
    for size, ms in sizes_and_ms:
        for i, t in enumerate((ms * 0.98, ms, ms * 1.02)):
            rec = {"backend": "ddp", "grad_compression": "none", "world_size": 2, "nodes": 1, "nprocs": 2}
            rec |= {"link_rate": "none", "link_mode": "shared", "size_bytes": size, "repeat": i + 1, "round": 1}
            rec |= {"time_s": t / 1e3, "cpu_s": t / 2e3, "loaded_time_s": 2 * t / 1e3}
            rec |= {"loaded_cpu_s": (loaded_ms or {}).get(size, t / 2) / 1e3}
            out.append(rec | {"algbw_Bps": bw.algbw(size, t / 1e3), "busbw_Bps": bw.busbw(size, t / 1e3, 2)})
    return out


def test_a_commbench_of_two_sizes_on_loopback_writes_valid_json_and_says_its_fit_is_not_physical(tmp_path):
    """As seen on main: 4 KiB in 3.5 ms, 1 MiB in 1.2 ms, a negative cost taken under load. The fit was beta 0 and
    bus bandwidth Infinity (not JSON). Now: not physical, every reason said, values null; the measurements kept."""
    recs = _loopback_records([(4096, 3.5), (MiB, 1.2)], loaded_ms={4096: -9.991})
    text = cr.write(recs, tmp_path, "python run.py commbench --sizes 4096,1048576")
    f = strict_json((tmp_path / cr.FIT).read_text())["ddp"]
    assert f["physical"] is False and f["alpha_s"] is None and f["beta_s_per_byte"] is None
    assert f["bus_bandwidth_Bps"] is None
    assert "2 size(s)" in f["why"] and "beta" in f["why"]
    assert f["loaded_cpu_physical"] is False and "not above 0 at 4 KiB" in f["loaded_cpu_why"]
    assert "ddp: fit not physical (time): 2 size(s) (4 KiB, 1 MiB)" in text and "inf" not in text
    assert "| ddp | 4 KiB | 3.500 " in text and "-9.991 |" in text  # what was measured, as measured
    assert len(list(csv.DictReader((tmp_path / cr.SUMMARY).open()))) == 2


def test_what_makes_a_fit_physical():
    """At least 3 sizes, every median above 0, beta > 0, alpha >= 0, and sizes on both sides of alpha/beta."""
    sizes = [4096 * 4**i for i in range(6)]  # 4 KiB to 4 MiB
    line = [1e-3 + 1e-8 * s for s in sizes]  # n1/2 = 100 kB
    assert bw.unphysical(sizes, line) is None
    assert "2 size(s)" in bw.unphysical(sizes[:2], line[:2])
    assert "beta" in bw.unphysical(sizes, line[::-1])  # the larger messages faster
    burst = [2e-4 if s < 1e5 else -2e-3 + 1e-8 * s for s in sizes]  # small messages through a token bucket's burst
    assert "alpha -0.171 ms < 0: the line gives messages under 20.4 KiB" in bw.unphysical(sizes, burst)
    assert "beyond the smallest size, 4 KiB; add smaller" in bw.unphysical(sizes, [1e-6 + 1e-8 * s for s in sizes])
    assert "beyond the largest size, 4 MiB; add larger" in bw.unphysical(sizes, [1.0 + 1e-9 * s for s in sizes])
    dipped = [t if s != 16384 else -1e-3 for s, t in zip(sizes, line, strict=True)]
    assert "not above 0 at 16 KiB" in bw.unphysical(sizes, dipped)


def test_fit_json_holds_the_time_under_load_fitted_as_the_time():
    """t = 1 ms + 10 ns/B idle, twice that with a computation on the core (`_loopback_records`): fit.json and the
    report's fit table hold both lines (the loaded one is what DeepSpeed's collectives on CPU nodes take)."""
    sizes = [4096 * 4**i for i in range(6)]
    rows = cr.summarize(_loopback_records([(s, 1 + 1e-5 * s) for s in sizes]))
    f = cr.fits(rows)["ddp"]
    assert f["physical"] and f["loaded_physical"]
    assert (f["loaded_alpha_s"], f["loaded_beta_s_per_byte"]) == pytest.approx((2e-3, 2e-8))
    assert (f["alpha_s"], f["beta_s_per_byte"]) == pytest.approx((1e-3, 1e-8))
    assert "| ddp | 1.000 | 10.000 | 100.0 | 2.000, 20.000 | " in cr.markdown(rows, cr.fits(rows), "cmd")


def test_the_report_says_the_load_it_measured_not_an_idle_core():
    recs = _loopback_records([(4096 * 4**i, 1 + i) for i in range(4)])
    for rec in recs:
        rec["machine_load"] = {"avg_1m_before": 2.4, "avg_1m_after": 2.1, "cores": 2}
    text = cr.markdown(cr.summarize(recs), cr.fits(cr.summarize(recs)), "cmd", recs)
    assert "load average was 2.40 before the first launch and 2.10 after the last" in text
    assert "idle" not in text


def test_commbench_records_the_load_around_each_launch_as_valid_json(tmp_path, monkeypatch):
    """Through `run` with an executor that returns the worker's result: each record carries the load average
    before and after its launch, and commbench.jsonl is strict JSON."""
    loads = iter([(1.5,), (2.5,)])
    monkeypatch.setattr(cb.os, "getloadavg", lambda: next(loads))

    class Worker:
        def check(self, configs, emulated=False, dilation=1.0):
            pass

        def run(self, config, args, out_json, log, timeout_s, program):
            measured = {"time_s": [1e-3], "cpu_s": [5e-4], "loaded_time_s": [2e-3], "loaded_cpu_s": [-1e-4]}
            return {"status": "ok", **FOUND, "launcher": "torchrun", "measured": {"all-reduce": {"4096": measured}}}

    bench = cb.Bench(["ddp"], [4096], 1, 2, "none", "shared", 1, 1, 60.0)
    (rec,) = cb.measure(Worker(), bench, tmp_path)
    (line,) = (tmp_path / cr.RECORDS).read_text().splitlines()
    assert strict_json(line) == rec and rec["machine_load"]["avg_1m_before"] == 1.5
    assert rec["machine_load"]["avg_1m_after"] == 2.5


def test_an_interval_holds_its_point_strictly_inside():
    """Resamples tied with the point (an input without spread, a fit held at 0) put an end of the 2.5-97.5 % range
    on it, as in `143.6 (65.0-143.6)`: that end moves to the nearest resample beyond it; with none beyond, none."""
    tied = [65.0] * 10 + [100.0] * 150 + [143.6] * 39 + [150.0]
    assert pj.interval(143.6, tied)[:2] == (65.0, 150.0)
    assert pj.interval(100.0, [90.0] * 100 + [100.0] * 90 + [110.0] * 10)[:2] == (90.0, 110.0)
    assert pj.interval(143.6, [65.0] * 100 + [143.6] * 100) == (None, None, "no resample above")
    assert pj.interval(5.0, [5.0] * 200) == (None, None, "its inputs do not vary")
    spread = [float(i) for i in range(200)]
    assert pj.interval(100.0, spread)[:2] == (5.0, 194.0)  # the 2.5-97.5 % range, as before, where nothing ties


def test_the_table_reads_the_interval_apart_from_the_point_and_the_efficiency_to_two_digits():
    row = {"backend": "ddp", "nodes": 16, "nprocs": 4, "link": "x", "step_ms": 445.7, "samples_per_sec": 143.58}
    row |= {"samples_per_sec_lo": 65.0, "samples_per_sec_hi": 143.61, "scaling_efficiency": 0.00138}
    assert "| 143.58 (65.00-143.61) | 0.0014 |" in pr.table([row])
    wide = row | {"samples_per_sec_hi": 150.0, "scaling_efficiency": 0.17}
    assert "| 143.6 (65.0-150.0) | 0.17 |" in pr.table([wide])
    none = row | {"samples_per_sec_lo": None, "samples_per_sec_hi": None, "no_interval": "its inputs do not vary"}
    assert "| 143.6 (no interval: its inputs do not vary) |" in pr.table([none])


def test_the_profile_spread_is_in_the_interval_where_it_kept_its_passes():
    """A profile with its passes is resampled: the two ratios vary; one without (written before) is taken as is."""
    import random

    assert PROFILE.resampled(random.Random(0)) is PROFILE
    passes = {"micro_forward_s": [4e-3, 5e-3, 6e-3], "micro_backward_s": [12e-3, 15e-3, 18e-3]}
    kept = dataclasses.replace(PROFILE, passes=passes | {"reference_s": [38e-3, 40e-3, 42e-3]})
    rng = random.Random(0)
    ratios = {kept.resampled(rng).micro_over_reference for _ in range(50)}
    assert len(ratios) > 3 and all(0.3 < r < 0.7 for r in ratios)


def test_an_unphysical_commbench_fit_is_taken_held_at_zero_and_said():
    recs = _loopback_records([(4096, 3.5), (MiB, 1.2)])
    link = lk.fit_link(recs, "commbench fit of ddp")
    assert link.beta_s_per_byte == 0.0 and link.alpha_s > 0  # as before: held at beta >= 0
    assert "2 size(s)" in link.time_why and "beta" in link.time_why
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    cpu_nodes = pj.Projection(ref, PROFILE, tl.Plan(16, 4, 64, 1, "none", True), {"ddp": recs}, "none", 1.0)
    time, cpu = cpu_nodes.link_warnings(link)
    assert time.startswith("commbench fit of ddp: not physical (2 size(s)")
    assert cpu.startswith("commbench fit of ddp (the computation it takes): not physical (2 size(s)")
    gpu_nodes = pj.with_plan(cpu_nodes, cores_shared=False)  # the computation taken is not in a GPU node's step
    assert gpu_nodes.link_warnings(link) == [time]


def test_a_message_larger_than_any_the_commbench_timed_is_said_to_be_the_fit_carried():
    """The largest message each library's step sends (DDP's largest bucket, Horovod's largest fusion, DeepSpeed's
    gradients in one all-reduce, FSDP2's largest unit), in the fit's bytes: beyond the largest size the commbench
    timed, the prediction takes the fitted line carried past what was measured, and says so; within it, nothing."""
    units = dataclasses.replace(PROFILE, shard_units=[4_000_000, 400])
    assert tl.largest_message("ddp", units, 1.0) == (4_000_000, "DDP's largest bucket")
    assert tl.largest_message("horovod", units, 1.0)[0] == 6_000_400  # all three fused under its 128 MB threshold
    assert tl.largest_message("deepspeed", units, 1.0)[0] == 6_000_400  # one bucket of 5e8 elements holds them
    assert tl.largest_message("fsdp", units, 1.0)[0] == 4_000_000  # its largest unit's reduce-scatter
    ref = rf.Reference("mnist", 64, 1, "cpu", {}, [PHASES], [1000.0])
    sizes = [(4096, 0.5), (MiB, 10.0), (2 * MiB, 20.0)]
    short = pj.Projection(ref, PROFILE, PLAN, {"ddp": _loopback_records(sizes)}, "none", 1.0)
    said = [w for w in short.warnings("ddp") if "larger than any message the commbench timed" in w]
    assert said == [
        "DDP's largest bucket (3.8 MiB) is larger than any message the commbench timed (2 MiB): its time is the fit "
        "carried beyond what was measured (commbench --sizes up to 3.8 MiB measures it)"
    ]
    reaching = pj.Projection(ref, PROFILE, PLAN, {"ddp": _loopback_records([*sizes, (4 * MiB, 40.0)])}, "none", 1.0)
    assert not [w for w in reaching.warnings("ddp") if "larger than any message" in w]
    fp16 = dataclasses.replace(PLAN, compression="fp16")  # half the bytes on the wire: 1.9 MiB, within 2 MiB
    halved = pj.Projection(ref, PROFILE, fp16, {"ddp": _loopback_records(sizes)}, "none", 1.0)
    assert not [w for w in halved.warnings("ddp") if "larger than any message" in w]
