"""The GPU tier: single and every backend installed here at world size 1 on a GPU (NCCL where a process group is
made), two processes sharing one GPU over gloo, the step's phases on the device's clock against the timed window,
commbench on NCCL and over gloo, and bf16. A synthetic ResNet-18 at a small image size (no dataset needed: the GPU
machine has none), a few steps each. Checks of what ran and where, never of how fast."""

import importlib.util
import json

import pytest

from distbench.backends import DISTRIBUTED
from tests.helpers import child_env, launch, py, read_record, run_cmd

RESNET = "--task synthetic-resnet --model resnet18 --image-size 64 --batch-size 32 --no-progress --max-steps 12"
# the library each backend needs beyond torch; not installed: the test says so and is not run
NEEDS = {
    "horovod": "horovod",
    "deepspeed": "deepspeed",
    "accelerate-deepspeed": "deepspeed",
    "fabric": "lightning_fabric",
}


def installed(backend: str) -> bool:
    module = NEEDS.get(backend)
    return module is None or importlib.util.find_spec(module) is not None


def run(tmp_path, backend: str, nprocs: int, *extra: str) -> dict:
    out = tmp_path / f"{'-'.join([backend, f'x{nprocs}', *(a.strip('-') for a in extra)])}.json"
    args = [*RESNET.split(), *extra, "--output", str(out)]
    run_cmd(launch(backend, nprocs, args), timeout=300, env=child_env(tmp_path))
    return read_record(out)


@pytest.mark.parametrize("backend", ["single", *DISTRIBUTED])
def test_every_backend_at_world_size_1_on_the_gpu(tmp_path, backend):
    if not installed(backend):
        pytest.skip(f"not run: {NEEDS[backend]} is not installed here")
    rec = run(tmp_path, backend, 1)
    env = rec["environment"]
    assert env["device"].startswith("cuda") and rec["step_clock"] == "cuda-events"
    # Accelerate makes no process group for one process started with python (DistributedType.NO), as its users
    # run one GPU; every other library (accelerate-fsdp and -deepspeed too: FSDP and DeepSpeed need one) on NCCL
    assert env["collective"] == (None if backend in ("single", "accelerate") else "nccl"), env["collective"]
    assert rec["memory_per_rank"]["peak_allocated_bytes"] > rec["memory_per_rank"]["params_bytes"] > 0
    assert rec["model_flops_per_sample"] > 0 and rec["achieved_tflops_per_device"] > 0
    assert rec["eval_count"] > 0 and rec["final_loss"] == rec["final_loss"]


def test_two_processes_share_one_gpu_over_gloo(tmp_path):
    """One GPU, two ranks: NCCL refuses two ranks on one device; the ranks share it over gloo, each holding its
    own replica (the memory per rank is one model's)."""
    one, two = run(tmp_path, "ddp", 1), run(tmp_path, "ddp", 2)
    assert two["environment"]["collective"] == "gloo" and two["environment"]["device"] == "cuda:0"
    assert two["memory_per_rank"]["params_bytes"] == one["memory_per_rank"]["params_bytes"]
    assert two["eval_count"] == one["eval_count"]


def test_the_phases_on_the_device_clock_add_up_to_the_timed_windows_step(tmp_path):
    """The device-clock breakdown (CUDA events) summed against the wall-clock window's time per step (closed by a
    barrier): within 5 %, where host marks would give the queueing time alone."""
    rec = run(tmp_path, "single", 1, "--max-steps", "40")
    per_step_ms = 1e3 * rec["global_batch_size"] / rec["samples_per_sec"]
    phases_ms = sum(rec["step_breakdown_ms"].values())
    print(f"phases {phases_ms:.2f} ms, window {per_step_ms:.2f} ms per step")
    assert abs(phases_ms - per_step_ms) <= 0.05 * per_step_ms


def test_bf16_runs_under_autocast_on_the_gpu(tmp_path):
    fp32, bf16 = run(tmp_path, "single", 1), run(tmp_path, "single", 1, "--precision", "bf16")
    assert bf16["precision"] == "bf16" and bf16["peak_source"].endswith("(distbench's table, NVIDIA's datasheet)")
    assert abs(bf16["final_loss"] - fp32["final_loss"]) < 0.1 * abs(fp32["final_loss"])


def test_commbench_on_the_gpu(tmp_path):
    """commbench's ddp worker on the GPU: 2 processes sharing it over gloo (commbench times 2 ranks or more, and NCCL
    puts one rank on a GPU: the runs at world size 1 above are NCCL's test here); every size timed."""
    out = tmp_path / "cb"
    cmd = py("run.py commbench --backends ddp --nprocs 2 --sizes 4096,4194304 --repeats 3 --rounds 1")
    run_cmd([*cmd, "--out", str(out)], timeout=300, env=child_env(tmp_path))
    rows = [json.loads(line) for line in (out / "commbench.jsonl").read_text().splitlines()]
    assert {r["size_bytes"] for r in rows} == {4096, 4194304} and all(r["time_s"] > 0 for r in rows), rows


def test_profile_times_each_module_on_the_device_clock(tmp_path):
    """`run.py profile` on the GPU: CUDA events, every ResNet-18 module that owns parameters timed forward and
    backward, and the step's forward+backward within 10 % of the run's own phase (the same micro-batch, one process;
    the check the CPU's is in docs/emulation.md)."""
    out = tmp_path / "p.json"
    args = "--task synthetic-resnet --model resnet18 --image-size 64 --batch-size 32 --steps 20"
    run_cmd(py(f"run.py profile --output {out} {args}"), timeout=300, env=child_env(tmp_path))
    p = json.loads(out.read_text())
    assert (p["clock"], p["device"]) == ("cuda-events", "cuda:0") and len(
        p["modules"]
    ) == 41  # 20 convolutions, 20 batch norms, fc
    assert all(m["forward"]["median_s"] > 0 and m["backward"]["median_s"] > 0 for m in p["modules"])
    rec = run(tmp_path, "single", 1, "--max-steps", "40")
    step = rec["step_breakdown_ms"]["forward_backward_ms"] / 1e3
    profiled = p["forward"]["median_s"] + p["backward"]["median_s"]
    print(f"profile {profiled:.4f} s, run {step:.4f} s; the hooked steps", p["hooked"], p["module_scale"])
    assert abs(profiled - step) < 0.1 * step
