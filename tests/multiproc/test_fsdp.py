"""FSDP2 (backends/fsdp.py) for real under torchrun on CPU/gloo: memory per rank halves at x2 where DDP's does not, a
checkpoint written by fsdp x2 resumes under ddp x2, and bf16 through FSDP's MixedPrecisionPolicy follows fp32."""

import pytest

from distbench.training import fairness
from tests.helpers import child_env, launch, read_record, run_cmd

COMMON = ["--no-progress", "--threads", "1", "--dropout", "0"]


def run(tmp_path, backend, nprocs, args, name):
    out = tmp_path / f"{name}.json"
    run_cmd(launch(backend, nprocs, [*args, *COMMON, "--output", str(out)]), timeout=240, env=child_env(tmp_path))
    return read_record(out)


@pytest.mark.timeout(400)
def test_fsdp_holds_half_of_each_state_per_rank_at_two_where_ddp_holds_all(tmp_path):
    counts = {
        (b, n): run(tmp_path, b, n, ["--max-steps", "3"], f"{b}{n}")["memory_per_rank"]
        for b in ("fsdp", "ddp")
        for n in (1, 2)
    }
    for kind in ("params_bytes", "grads_bytes", "optimizer_bytes"):
        one, two = counts["fsdp", 1][kind], counts["fsdp", 2][kind]
        # each shard is ceil(rows / 2) rows of every parameter: at most one row of padding per parameter
        assert one / 2 <= two <= one / 2 + 4 * 8 * 4608, kind
        assert counts["ddp", 1][kind] == counts["ddp", 2][kind] == one > 0, kind
    # Adadelta: two tensors per parameter, and a one-element float32 `step` for each of the ConvNet's 8
    assert counts["fsdp", 1]["optimizer_bytes"] == 2 * counts["fsdp", 1]["params_bytes"] + 4 * 8


@pytest.mark.timeout(400)
def test_a_checkpoint_of_fsdp_x2_resumes_under_ddp_x2_with_the_next_step_loss_of_a_straight_run(tmp_path):
    straight = run(tmp_path, "ddp", 2, ["--max-steps", "6"], "straight")
    ckpt = ["--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "3"]
    run(tmp_path, "fsdp", 2, ["--max-steps", "3", *ckpt], "first")
    resumed = run(tmp_path, "ddp", 2, ["--max-steps", "6", *ckpt], "resumed")
    assert resumed["resumed_from_step"] == 3
    assert abs(resumed["loss_history"][3] - straight["loss_history"][3]) < fairness.LOSS_TOLERANCE


@pytest.mark.timeout(400)
def test_fsdp_in_bf16_follows_fp32(tmp_path):
    fp32 = run(tmp_path, "fsdp", 2, ["--max-steps", "10"], "fp32")
    bf16 = run(tmp_path, "fsdp", 2, ["--max-steps", "10", "--precision", "bf16"], "bf16")
    worst = max(abs(a - b) for a, b in zip(fp32["loss_history"], bf16["loss_history"], strict=True))
    print(f"fsdp x2 bf16 against fp32: largest per-step loss difference {worst:.3e} over 10 steps")
    assert worst < 0.05  # bf16's 8-bit mantissa: about 1e-2 of a loss near 2.3
    assert bf16["eval_count"] == fp32["eval_count"] == 500
