"""BERT sentiment under every backend at world size 2, and its equivalence with the single process."""

import pytest
import torch

from distbench.backends import DISTRIBUTED, REGISTRY
from distbench.training import fairness
from tests.helpers import child_env, launch, read_record, run_cmd, run_in
from tests.mr_data import MINI_TEST_COUNT

COMMON = ["--task", "bert-sentiment", "--no-progress", "--threads", "1"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", ["fsdp"])
def test_the_bundled_minilm_at_world_size_2(tmp_path, mini_mr, backend):
    """The bundled MiniLM's weights and tokenizer on the mini corpus, sharded (replicated, under accelerate x2 on the
    same corpus: the BERT overhead benchmark's test; every backend runs the same HF BERT code on the tiny random model
    below; its 1,066 test sentences: test_full_data_and_fixed_split)."""
    out = tmp_path / "r.json"
    cmd = launch(backend, 2, [*COMMON, "--data-dir", str(mini_mr), "--max-steps", "5", "--output", str(out)])
    run_in(tmp_path, cmd, timeout=360)
    rec = read_record(out)
    assert (rec["world_size"], rec["steps"], rec["eval_count"]) == (2, 5, MINI_TEST_COUNT)
    assert rec["dataset"]["n_test"] == MINI_TEST_COUNT and rec["per_rank_batch_size"] == 16
    assert rec["dataset"]["model"].startswith("default") and rec["final_loss"] == rec["final_loss"]


STEPS = 10


TINY = [
    *COMMON,
    *"--model tiny-random --dropout 0 --batch-size 16 --max-steps".split(),
    str(STEPS),
    "--max-length",
    "64",
]


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory, mini_mr):
    tmp = tmp_path_factory.mktemp("tiny")
    out = tmp / "r.json"
    run_cmd(
        launch("single", 1, [*TINY, "--data-dir", str(mini_mr), "--output", str(out)]), timeout=240, env=child_env(tmp)
    )
    return read_record(out)


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "backend,stage",
    [(b, 3 if REGISTRY[b].zero_stages else 0) for b in DISTRIBUTED] + [("deepspeed", 0)],
    ids=lambda v: str(v),
)
def test_tiny_bert_losses_match_single_process(tmp_path, mini_mr, tiny_reference, backend, stage):
    """Every library at x2; DeepSpeed's at ZeRO-3, whose forward all-gathers each layer's partitioned parameters
    (BERT's embeddings, attention and pooler included), and deepspeed at stage 0 too, where its optimizer is the
    task's own under DeepSpeed's step (BERT's scheduler is built over it: DeepSpeedBackend.schedulable). Stages 1
    and 2 partition what the optimizer holds, whatever the model: MNIST checks them (test_deepspeed)."""
    out = tmp_path / "r.json"
    zero = ["--zero-stage", str(stage)] if REGISTRY[backend].zero_stages else []
    run_in(tmp_path, launch(backend, 2, [*TINY, *zero, "--data-dir", str(mini_mr), "--output", str(out)]), timeout=300)
    rec = read_record(out)
    assert rec["config"]["zero_stage"] == stage
    diffs = [abs(a - b) for a, b in zip(tiny_reference["loss_history"], rec["loss_history"], strict=True)]
    print(f"tiny BERT {backend} x2 vs single: max per-step loss difference {max(diffs):.3e}")
    assert len(diffs) == STEPS and max(diffs) < fairness.LOSS_TOLERANCE
    assert rec["eval_count"] == tiny_reference["eval_count"] == MINI_TEST_COUNT


def test_bf16_autocast_runs_on_cpu(tmp_path, mini_mr):
    out = tmp_path / "r.json"
    run_in(
        tmp_path,
        launch(
            "single",
            1,
            [*TINY[:-2], "--max-length", "32", "--precision", "bf16", "--data-dir", str(mini_mr), "--output", str(out)],
        ),
        timeout=240,
    )
    rec = read_record(out)
    assert rec["precision"] == "bf16" and all(torch.isfinite(torch.tensor(rec["loss_history"])))


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_a_zero2_checkpoint_resumes_at_another_world_size_through_deepspeeds_universal_checkpoint(
    tmp_path, mini_mr, tiny_reference
):
    """The tiny BERT (AdamW, whose state DeepSpeed's universal checkpoint carries) under deepspeed ZeRO-2 at x2,
    checkpointed half way and killed a step later; then resumed at x1 from that checkpoint, converted by DeepSpeed's
    own ds_to_universal and loaded as its users load one. The whole run follows the single process (within
    fairness.LOSS_TOLERANCE, as every x2 run does), the learning rate schedule included."""
    half, ckpt, out = STEPS // 2, tmp_path / "ckpt", tmp_path / "r.json"
    args = [*TINY, "--zero-stage", "2", "--data-dir", str(mini_mr), "--timeout-s", "60", "--output", str(out)]
    args += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", str(half)]
    faulted = [*args, "--fault", f"kill:1@{half + 1}"]
    killed = run_cmd(launch("deepspeed", 2, faulted), timeout=240, env=child_env(tmp_path), expect_rc=None)
    assert killed.returncode != 0 and not out.exists()
    proc = run_in(tmp_path, launch("deepspeed", 1, args), timeout=300)
    assert f"at step {half}" in proc.stderr and "Convert DeepSpeed Checkpoint to Universal Checkpoint" in proc.stderr
    assert [p.name for p in (ckpt / "deepspeed").iterdir() if p.is_dir()] == [f"step{STEPS}"]  # the converted pruned
    b = read_record(out)
    assert (b["world_size"], b["resumed_from_step"], len(b["loss_history"])) == (1, half, STEPS)
    diffs = [abs(x - y) for x, y in zip(tiny_reference["loss_history"], b["loss_history"], strict=True)]
    print(f"tiny BERT deepspeed ZeRO-2 x2 then x1 vs single: max per-step loss difference {max(diffs):.3e}")
    assert max(diffs) < fairness.LOSS_TOLERANCE and b["eval_count"] == MINI_TEST_COUNT
