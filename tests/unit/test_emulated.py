"""`--emulate PROFILE` (distbench/tasks/emulated.py): a profile's waits replayed by the real model's modules, the
gradients ready in the profiled order at the profiled moments; the optimizer's wait per byte it updates; a profile
that does not fit the run refused in one line; emulated nodes sharing cores; `--dilation` divided back; a host that
was the bottleneck failing the run."""

import json
import time

import pytest
import torch
from torch import nn

from distbench.backends import spins
from distbench.config import RunConfig, validate
from distbench.emulation.profile import _modules, spread
from distbench.errors import UserError
from distbench.launching import link
from distbench.launching.topology import SimulatedNodes
from distbench.sweep.configuration import SweepConfig
from distbench.sweep.runner import checked
from distbench.tasks import emulated
from distbench.training.record import undilated
from tests.unit.test_profile import BACKWARD_S, FORWARD_S, Model, profiled


def profile_of(model: nn.Module, steps: int = 3) -> dict:
    """The profile `run.py profile` would write of `model` (test_profile's: modules of known times)."""
    hooks, measured = profiled(model, steps)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return {
        "kind": emulated.KIND,
        "version": emulated.VERSION,
        "micro_batch": 4,
        "precision": "fp32",
        "forward": spread(measured.forward),
        "backward": spread(measured.backward),
        "optimizer": spread(measured.optimizer),
        "optimizer_s_per_param_byte": 1e-6,
        "module_scale": {"forward": 1.0, "backward": 1.0},
        "modules": _modules(hooks, measured),
        "param_bytes": nbytes,
    }


def ready_times(model: nn.Module) -> dict[str, float]:
    """When each owner's weight gradient was accumulated, from the step's start; the forward's end under "forward"."""
    got, t0 = {}, time.perf_counter()
    for name, module in emulated.owners(model):

        def hook(_p, name=name):
            got.setdefault(name, time.perf_counter() - t0)

        module.weight.register_post_accumulate_grad_hook(hook)
    loss = model(torch.zeros(4))
    got["forward"] = time.perf_counter() - t0
    loss.backward()
    got["backward"] = time.perf_counter() - t0
    return got


def test_a_profiles_round_trip_replays_its_forward_and_its_gradients_in_order_and_on_time(tmp_path):
    """Profiled (a then b forward, b's gradients then a's), written, read and replayed by a fresh model of the same
    modules: each gradient is ready no earlier than the profile says, the step lasts the profiled step the clock drew,
    plus the sleeps' waking late (about 0.1 ms each) and autograd's own few tenths of a ms."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile_of(Model())))
    profile = emulated.check_profile(path, 4, "fp32")
    model, clock = Model(), emulated.Clock(emulated.schedule(profile), rank=0, seed=0)
    emulated.install(model, profile, clock)
    ready_times(model)  # the first step allocates what the others reuse
    carried = clock.overrun_s  # what the first step's last sleep overran: the next step's first sleep is that shorter
    got = ready_times(model)
    assert list(k for k in got if k in ("a", "b")) == ["b", "a"]  # backward reaches b first
    assert profile["forward"]["median_s"] >= sum(FORWARD_S.values())
    assert profile["backward"]["median_s"] >= sum(BACKWARD_S.values())
    # the step replays one profiled step (the clock's factors), not the median: on a loaded machine they differ
    f, b = clock.factor
    forward, backward = profile["forward"]["median_s"] * f, profile["backward"]["median_s"] * b
    slack = 0.9  # a sleep is shortened by what the earlier ones overran (emulated.Clock._wait)
    assert slack * forward - carried <= got["forward"] < 1.5 * forward + 0.02
    for name in ("a", "b"):
        m = next(m for m in profile["modules"] if m["name"] == name)
        due = forward + (m["backward_start"]["median_s"] + m["backward"]["median_s"]) * b
        assert slack * due - carried <= got[name] < 1.5 * due + 0.02, name
    assert slack * (forward + backward) - carried <= got["backward"] < 1.5 * (forward + backward) + 0.02


def fixture(**over) -> dict:
    """A profile of two owners, x then y, times in ms: forward 10 (x from 1 to 4, y from 5 to 9), backward 20 (y's
    gradients ready at 6, x's at 15)."""
    ms = lambda v: {"median_s": v / 1e3, "steps_s": [v / 1e3]}  # noqa: E731
    mods = [
        {
            "name": "x",
            "param_bytes": 8,
            "forward_start": ms(1),
            "forward": ms(3),
            "backward_start": ms(12),
            "backward": ms(3),
        },
        {
            "name": "y",
            "param_bytes": 8,
            "forward_start": ms(5),
            "forward": ms(4),
            "backward_start": ms(2),
            "backward": ms(4),
        },
    ]
    base = {
        "kind": emulated.KIND,
        "version": 1,
        "micro_batch": 8,
        "precision": "fp32",
        "forward": {"median_s": 0.010, "steps_s": [0.010, 0.020]},
        "backward": {"median_s": 0.020, "steps_s": [0.020, 0.020]},
        "module_scale": {"forward": 1.0, "backward": 1.0},
        "optimizer_s_per_param_byte": 0.5,
        "modules": mods,
    }
    return {**base, **over}


def test_the_waits_add_up_to_the_profiles_forward_and_backward():
    s = emulated.schedule(fixture())
    # forward: the head until x starts, x until y starts, y's own length, the tail to the forward's end
    assert [round(w * 1e3, 6) for w in s.forward] == [1, 4, 4, 1]
    # backward (run tail, y, x, head): until y's backward starts, y's gradients ready at 6, x's at 15, the rest to 20
    assert [round(w * 1e3, 6) for w in s.backward] == [5, 9, 4, 2]
    assert s.step_s == pytest.approx(0.030)
    assert s.factors == ((1.0, 1.0), (2.0, 1.0))  # each step of the profile against its medians
    scaled = emulated.schedule(fixture(module_scale={"forward": 0.5, "backward": 1.0}))
    assert scaled.forward[-1] == pytest.approx(0.010 - 0.5 * 0.009)  # the modules' (hooked) times scaled


def test_each_rank_draws_its_own_steps_from_the_profiles_spread():
    s = emulated.schedule(fixture())
    draws = {}
    for rank in (0, 1):
        clock = emulated.Clock(s, rank=rank, seed=0)
        draws[rank] = []
        for _ in range(20):
            clock.new_step()
            draws[rank].append(clock.factor)
    assert set(draws[0]) == set(draws[1]) == {(1.0, 1.0), (2.0, 1.0)} and draws[0] != draws[1]
    again = emulated.Clock(s, rank=0, seed=0)
    assert [again.new_step() or again.factor for _ in range(20)] == draws[0]  # seeded


def test_the_optimizer_keeps_its_class_and_waits_for_the_bytes_it_updates():
    clock = emulated.Clock(emulated.schedule(fixture(optimizer_s_per_param_byte=1e-6)), rank=0, seed=0)
    params = [nn.Parameter(torch.zeros(5_000)), nn.Parameter(torch.zeros(2_500))]  # 30 kB: 30 ms
    opt = emulated.emulated_optimizer(torch.optim.SGD(params, lr=0.1), clock)
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "EmulatedSGD"
    params[0].grad = torch.ones(5_000)
    opt.step()  # the first: the real one (the state it makes is memory a rank holds)
    assert torch.all(params[0] == -0.1)
    t0 = time.perf_counter()
    opt.step()
    assert 0.9 * 0.030 <= time.perf_counter() - t0 < 0.5
    assert torch.all(params[0] == -0.1)  # nothing computed


def test_a_profile_that_does_not_fit_the_run_is_one_line(tmp_path):
    path = tmp_path / "p.json"
    with pytest.raises(UserError, match="does not exist"):
        emulated.check_profile(path, 8, "fp32")
    path.write_text("{not json")
    with pytest.raises(UserError, match="not a readable JSON profile"):
        emulated.check_profile(path, 8, "fp32")
    path.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(UserError, match="not a profile written by `run.py profile`"):
        emulated.check_profile(path, 8, "fp32")
    path.write_text(json.dumps(fixture()))
    with pytest.raises(UserError, match="profiled at micro-batch 8, this run's is 16"):
        emulated.check_profile(path, 16, "fp32")
    with pytest.raises(UserError, match="profiled at fp32, this run is bf16: give --precision fp32"):
        emulated.check_profile(path, 8, "bf16")
    profile = emulated.check_profile(path, 8, "fp32")
    clock = emulated.Clock(emulated.schedule(profile), rank=0, seed=0)
    with pytest.raises(UserError, match=r"not this model's \(in the profile only: \['x', 'y'\]"):
        emulated.install(Model(), profile, clock)


def test_emulated_nodes_may_share_cores_and_computing_ones_may_not():
    assert SimulatedNodes.split(4, [0, 1], shared=True).node_cores == ((0,), (1,), (0,), (1,))
    assert SimulatedNodes.split(2, [0, 1], shared=True).node_cores == ((0,), (1,))  # enough: as without
    with pytest.raises(UserError, match="needs a core of its own.*--emulate"):
        SimulatedNodes.split(4, [0, 1])


def test_a_dilated_runs_times_are_divided_back_and_its_link_is_the_emulated_one():
    summary = {
        "warmup_steps": 2,
        "samples_per_sec": 100.0,
        "step_time_ms": {"p50": 400.0, "p90": 800.0},
        "step_clock": "host",
        "step_breakdown_ms": {"data_ms": 4.0, "forward_backward_ms": 300.0, "optimizer_ms": 96.0},
    }
    back = undilated(summary, 4.0)
    assert back["samples_per_sec"] == 400.0 and back["step_time_ms"] == {"p50": 100.0, "p90": 200.0}
    assert back["step_breakdown_ms"] == {"data_ms": 1.0, "forward_backward_ms": 75.0, "optimizer_ms": 24.0}
    assert back["dilated"]["dilation"] == 4.0 and back["dilated"]["samples_per_sec"] == 100.0  # as measured
    assert undilated(summary, 1.0) == {**summary, "dilated": None}
    assert link.dilated("1gbit", 4.0) == "250mbit" and link.dilated("none", 4.0) == "none"
    seen = {"link_rate": "250mbit", "link_mode": "per-node"}
    emulated = {"link_rate": "1gbit", "link_mode": "per-node", "link_rate_shaped": "250mbit"}
    assert link.dilated_view(seen, 4.0) == emulated
    assert link.dilated_view(seen, 1.0) == seen
    with pytest.raises(UserError, match="--dilation 4 stretches an emulated run's waits: give --emulate"):
        validate(RunConfig(dilation=4.0, batch_size=64), 1)


def test_an_emulated_run_whose_host_was_the_bottleneck_is_failed_in_a_sweep():
    config = SweepConfig(task="mnist", backend="ddp", world_size=2, threads=1)
    ok = {"status": "ok", "error": None, **config.to_record()}
    busy = {"host_busy_share": 0.93, "host_bound": True}
    failed = checked(config, {**ok, "emulated": busy})
    assert failed["status"] == "failed" and failed["error"].startswith(
        "invalid emulation: the run's processes kept 93%"
    )
    assert checked(config, {**ok, "emulated": {"host_busy_share": 0.5, "host_bound": False}}) == {
        **ok,
        "emulated": {"host_busy_share": 0.5, "host_bound": False},
    }
    assert emulated.host_bound_said(None) is None
    # where the library's waiting ranks spin, the line says so instead of a remedy that would not help
    assert "run fewer nodes per core" in emulated.host_bound_said(busy, spins("ddp"))
    horovod = emulated.host_bound_said(busy, spins("horovod"))
    assert "polls in a loop of yields" in horovod and "--dilation" not in horovod.split(";")[-1]


def test_dilation_stretches_every_wait_and_the_step_divided_back_is_the_same():
    """The same emulated step at dilation 1 and 4 (the test_profile model, single process): divided back by 4, the
    step is the undilated one, to within what is not dilated (autograd's chain, the sleeps' waking late)."""
    profile = profile_of(Model())
    steps = {}
    for k in (1.0, 4.0):
        model = Model()
        emulated.install(model, profile, emulated.Clock(emulated.schedule(profile), rank=0, seed=0, dilation=k))
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            model(torch.zeros(4)).backward()
            times.append(time.perf_counter() - t0)
        steps[k] = sorted(times)[1:3]  # the middle two
    one, four = sum(steps[1.0]) / 2, sum(steps[4.0]) / 2 / 4
    assert four == pytest.approx(one, rel=0.2), (one, four)
    # it waited 4 times as long as the shortest step the clock may draw (each step's factors are one of the
    # profile's steps over its medians: below 1 where the profile, measured under load here, had a fast step)
    plan = emulated.schedule(profile)
    shortest = min(sum(plan.forward) * f + sum(plan.backward) * b for f, b in plan.factors)
    assert sum(steps[4.0]) / 2 >= 0.9 * 4 * shortest, (steps, shortest)


def test_links_that_need_more_than_the_hosts_bridge_carries_are_refused_with_the_dilation_that_fits(monkeypatch):
    from distbench.launching import bridge

    monkeypatch.setattr(bridge, "capacity", lambda nodes: {"bits_per_s": 8e9, "measured": "2026-12-04"})
    bridge.check(4, "1gbit", 1.0)  # 4 Gbit/s: half of the 8 measured
    bridge.check(16, "1gbit", 4.0)  # 16 Gbit/s / 4
    bridge.check(64, "none", 1.0)  # unshaped: nothing planned
    with pytest.raises(
        UserError, match=r"^16 emulated nodes on 1gbit links need 16 Gbit/s .* give --dilation 4 or more"
    ):
        bridge.check(16, "1gbit", 1.0)
    with pytest.raises(UserError, match="give --dilation 4 or more"):
        bridge.check(16, "1gbit", 3.9)


def test_the_bridges_capacity_is_measured_once_per_machine_and_node_count(monkeypatch, tmp_path):
    from distbench.launching import bridge

    measured = []
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(bridge, "ring_rates", lambda nodes: measured.append(nodes) or [3e9, 1e9, 2e9])
    assert bridge.capacity(4)["bits_per_s"] == 2e9 and bridge.capacity(4)["bits_per_s"] == 2e9
    assert bridge.capacity(8)["bits_per_s"] == 2e9 and measured == [4, 8]
    assert json.loads((tmp_path / bridge.CACHE_FILE).read_text())  # kept, valid JSON
