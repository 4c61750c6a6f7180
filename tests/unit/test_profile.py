"""`run.py profile` (distbench/emulation/profile.py): each module that owns parameters, timed forward and backward in
the order they run, on a model whose modules take known times; and the command on MNIST's ConvNet."""

import json
import time

import pytest
import torch
from torch import nn

from distbench.emulation.profile import KIND, Measured, ModuleHooks, StepMarks, inside, owners
from distbench.training.timer import HostClock
from tests.helpers import assert_one_line_error, run_py

FORWARD_S, BACKWARD_S = {"a": 0.004, "b": 0.012}, {"a": 0.010, "b": 0.002}


class SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: a layer's backward of a known length."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


class Slow(nn.Linear):
    """A Linear whose forward takes FORWARD_S and whose backward BACKWARD_S (of its name)."""

    def __init__(self, name: str):
        super().__init__(8, 8)
        self.key = name

    def forward(self, x):
        time.sleep(FORWARD_S[self.key])
        return SlowBackward.apply(super().forward(x), BACKWARD_S[self.key])  # its backward sleeps first


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Slow("b")  # registered first, runs second: the profile follows the forward's order
        self.a = Slow("a")
        self.frozen = nn.Linear(8, 8).requires_grad_(False)

    def forward(self, x):
        return torch.relu_(self.b(self.frozen(self.a(x))))  # in place on b's output: its hook stays where it was


def profiled(model: nn.Module, steps: int = 3) -> tuple[ModuleHooks, Measured]:
    clock = HostClock()
    hooks, measured = ModuleHooks(model, clock), Measured()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        hooks.marks = marks = StepMarks(start=clock.mark())
        loss = model(torch.randn(4, 8)).pow(2).mean()
        marks.forward_end = clock.mark()
        loss.backward()
        marks.backward_end = clock.mark()
        optimizer.step()
        marks.optimizer_end = clock.mark()
        optimizer.zero_grad()
        measured.add(marks, clock)
    hooks.remove()
    return hooks, measured


def test_each_owner_is_timed_forward_and_backward_in_the_order_they_run():
    hooks, measured = profiled(Model())
    names = [n for n, _ in hooks.named]
    assert names == ["b", "a"]  # the frozen layer trains nothing: no owner
    order = [names[i] for i in hooks.order]
    assert order == ["a", "b"]
    got = {names[i]: {k: min(v) for k, v in m.items()} for i, m in measured.modules.items()}
    for name in ("a", "b"):
        assert FORWARD_S[name] <= got[name]["forward"] < FORWARD_S[name] + 0.05, name
        # its backward: from its output's gradient to its weight's, the sleep and Linear's backward
        assert BACKWARD_S[name] <= got[name]["backward"] < BACKWARD_S[name] + 0.05, name
    # forward: a then b; backward: b's first, a's after b's sleep has passed through
    assert got["a"]["forward_start"] < got["b"]["forward_start"]
    assert got["b"]["backward_start"] + BACKWARD_S["b"] <= got["a"]["backward_start"]
    assert all(len(v) == 3 for m in measured.modules.values() for v in m.values())
    assert min(measured.forward) >= sum(FORWARD_S.values())
    assert min(measured.backward) >= sum(BACKWARD_S.values())


def test_a_resnet_block_with_an_in_place_relu_is_profiled():
    """torchvision's ResNets apply ReLU(inplace=True) to BatchNorm's output, which a module's backward hook refuses."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(2, 3, 8, 8))  # the lazy layer's shape
    hooks, measured = profiled_images(model)
    assert [hooks.named[i][0] for i in hooks.order] == ["0", "1", "4"]
    assert all(len(m["backward"]) == 2 for m in measured.modules.values())


def profiled_images(model):
    clock = HostClock()
    hooks, measured = ModuleHooks(model, clock), Measured()
    for _ in range(2):
        hooks.marks = marks = StepMarks(start=clock.mark())
        loss = model(torch.randn(2, 3, 8, 8)).sum()
        marks.forward_end = clock.mark()
        loss.backward()
        marks.backward_end = marks.optimizer_end = clock.mark()
        measured.add(marks, clock)
    hooks.remove()
    return hooks, measured


def test_an_owner_inside_another_is_named():
    outer = nn.MultiheadAttention(8, 2)  # owns in_proj_weight and holds out_proj, which owns its own
    assert [n for n, _ in owners(outer)] == ["(root)", "out_proj"]
    assert inside(["(root)", "out_proj"]) == {"(root)": None, "out_proj": "(root)"}
    named = ["(root)", "e", "e.0", "e.0.attn", "e.00"]
    assert inside(named) == {"(root)": None, "e": "(root)", "e.0": "e", "e.0.attn": "e.0", "e.00": "e"}


@pytest.mark.timeout(120)
def test_the_command_writes_the_convnets_profile(tmp_path):
    out = tmp_path / "mnist.json"
    proc = run_py(["profile", "--output", str(out), "--batch-size", "32", "--steps", "4", "--warmup", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    p = json.loads(out.read_text())
    assert (p["kind"], p["task"], p["micro_batch"], p["steps"], p["device"], p["clock"]) == (
        KIND,
        "mnist",
        32,
        4,
        "cpu",
        "host",
    )
    assert [m["name"] for m in p["modules"]] == ["conv1", "conv2", "fc1", "fc2"]
    assert sum(m["grad_bytes"] for m in p["modules"]) == p["param_bytes"] == 300_426 * 4
    for m in p["modules"]:
        assert len(m["forward"]["steps_s"]) == len(m["backward"]["steps_s"]) == 4, m["name"]
        assert m["forward"]["p10_s"] <= m["forward"]["median_s"] <= m["forward"]["p90_s"]
    fc2, conv1 = p["modules"][-1], p["modules"][0]
    assert fc2["backward_start"]["median_s"] < conv1["backward_start"]["median_s"]  # backward runs the other way
    # the modules' times are the hooked steps', the step's three parts the hook-free steps' in between (as many)
    assert len(p["forward"]["steps_s"]) == len(p["hooked"]["forward"]["steps_s"]) == 4
    assert sum(m["forward"]["median_s"] for m in p["modules"]) < p["hooked"]["forward"]["median_s"]
    for part in ("forward", "backward"):
        assert p["module_scale"][part] == pytest.approx(p[part]["median_s"] / p["hooked"][part]["median_s"])
    assert p["optimizer_s_per_param_byte"] == pytest.approx(p["optimizer"]["median_s"] / p["param_bytes"])
    assert p["command"].startswith("python run.py profile --output")
    assert "fc1" in proc.stdout and f"profile written to {out}" in proc.stdout


def test_a_profile_that_cannot_be_measured_writes_nothing(tmp_path):
    """One line, exit 2, nothing written (every bad input of profile's: docs/reliability.md's table)."""
    out = tmp_path / "p.json"
    assert_one_line_error(run_py(["profile", "--output", str(out), "--steps", "0"], tmp_path), "--steps must be")
    assert not out.exists()
