"""FSDP2, native (backends/fsdp.py, under torchrun) and through Accelerate (accelerate-fsdp, under accelerate launch),
for real on CPU/gloo: memory per rank halves at x2 where DDP's does not, a checkpoint written sharded at x2 resumes
at x1 and replicated at x2 with the next-step loss of a straight run, and bf16 through FSDP's MixedPrecisionPolicy
(and DeepSpeed's torch_autocast) follows fp32. Their loss curves against single (MNIST, tiny BERT), accumulation and
compression are in test_equivalence, test_bert and test_knobs, with every backend."""

import json
import re
import shutil

import pytest

from distbench.training import fairness
from tests.helpers import ROOT, child_env, launch, py, read_record, run_cmd

COMMON = ["--no-progress", "--threads", "1", "--dropout", "0"]  # with the default batch: mnist_run's settings


def run(tmp_path, backend, nprocs, args, name, progress=False):
    """The record of a launched run; with `progress`, the run shows its progress bar, and the last loss the bar
    showed is checked: the record's final loss, the global mean (rank 0's own differs: its own share of the batch)."""
    out = tmp_path / f"{name}.json"
    shown = ["--progress"] if progress else []  # after COMMON's --no-progress: the last one given wins
    cmd = launch(backend, nprocs, [*args, *COMMON, *shown, "--output", str(out)])
    proc = run_cmd(cmd, timeout=240, env=child_env(tmp_path))
    record = read_record(out)
    if progress:
        assert re.findall(r"loss=([0-9.]+)", proc.stderr)[-1] == f"{record['final_loss']:.4f}", proc.stderr[-2000:]
    return record


@pytest.mark.timeout(600)
def test_fsdp_holds_half_of_each_state_per_rank_at_two_where_ddp_holds_all(mnist_run):
    """Each rank's state against the single process's whole one (the run test_equivalence compares with)."""
    whole = mnist_run("single", 1)["memory_per_rank"]
    fsdp, ddp = mnist_run("fsdp", 2)["memory_per_rank"], mnist_run("ddp", 2)["memory_per_rank"]
    for kind in ("params_bytes", "grads_bytes", "optimizer_bytes"):
        one, two = whole[kind], fsdp[kind]
        # each shard is ceil(rows / 2) rows of every parameter: at most one row of padding per parameter
        assert one / 2 <= two <= one / 2 + 4 * 8 * 4608, kind
        assert ddp[kind] == one > 0, kind
    # Adadelta: two tensors per parameter, and a one-element float32 `step` for each of the ConvNet's 8
    assert whole["optimizer_bytes"] == 2 * whole["params_bytes"] + 4 * 8
    # Accelerate shards the same units (the ConvNet's layers, named by class) the same way: the same counts
    assert mnist_run("accelerate-fsdp", 2)["memory_per_rank"] == fsdp


@pytest.mark.timeout(600)
def test_a_sharded_checkpoint_resumes_at_another_world_size_and_replicated_with_the_next_step_loss(tmp_path, mnist_run):
    """Written by fsdp x2 at step 3: resumed by fsdp x1 and by ddp x2 (x1 to x2 measured too: 0.0 difference). Each
    resumed run's steps 4-6 are the straight run's (dropout off: no per-rank random stream to continue; the straight
    run is the shared 50-step one: MNIST's learning rate changes only at an epoch's end, so its first 6 steps are a
    6-step run's)."""
    straight = mnist_run("ddp", 2)["loss_history"][:6]

    def resume(written_by: tuple[str, int], resumed_by: tuple[str, int]) -> dict:
        ckpt = tmp_path / f"ck-{written_by[0]}{written_by[1]}"
        if not ckpt.exists():
            run(
                tmp_path,
                *written_by,
                ["--max-steps", "3", "--checkpoint-every", "3", "--checkpoint-dir", str(ckpt)],
                f"w{written_by[1]}",
                progress=True,
            )
        mine = tmp_path / f"{ckpt.name}-to-{resumed_by[0]}{resumed_by[1]}"
        shutil.copytree(ckpt, mine)
        return run(tmp_path, *resumed_by, ["--max-steps", "6", "--checkpoint-dir", str(mine)], mine.name)

    for written_by, resumed_by in [(("fsdp", 2), ("fsdp", 1)), (("fsdp", 2), ("ddp", 2))]:
        resumed = resume(written_by, resumed_by)
        assert resumed["resumed_from_step"] == 3 and len(resumed["loss_history"]) == 6, (written_by, resumed_by)
        diff = max(abs(a - b) for a, b in zip(resumed["loss_history"][3:], straight[3:], strict=True))
        print(f"{written_by} -> {resumed_by}: steps 4-6 within {diff:.2e} of the straight run")
        assert diff < fairness.LOSS_TOLERANCE, (written_by, resumed_by)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", ["fsdp", "deepspeed"])
def test_bf16_follows_fp32(mnist_run, backend):
    """bf16 through the library's own mechanism: FSDP's MixedPrecisionPolicy (bf16 parameters and computation, fp32
    reduction), DeepSpeed's torch_autocast (fp32 parameters, the forward under autocast); against fp32, by what bf16's
    rounding guarantees on any processor (fairness.rounding_bound, its derivation beside it): the first step differs by
    the forward's rounding only, both runs learn, and after the last step the evaluation loss and the mean loss over
    the steps are within the rounding of every step taken."""
    fp32, bf16 = mnist_run(backend, 2), mnist_run(backend, 2, "--precision", "bf16")
    u, first, steps = fairness.SIXTEEN_BIT_ROUNDING, fp32["loss_history"][0], len(fp32["loss_history"])
    step_one = abs(bf16["loss_history"][0] - first)
    drift, bound = fairness.drift(bf16, fp32), fairness.rounding_bound(steps)
    print(
        f"{backend} x2 bf16 against fp32: first step {step_one:.2e} off (bound {2 * u * first:.2e}), evaluation loss "
        f"{drift['eval_loss']:.2%} and mean loss {drift['mean_loss']:.2%} off after {steps} steps (bound {bound:.1%})"
    )
    # the same weights and the same batch: the loss is rounded to bf16 once (u of it), the logits it comes from carry
    # the forward's roundings, which move a loss near ln 10 (small logits at the start) by no more: 2u in all
    assert step_one <= 2 * u * first
    # both learn: the evaluation loss is below half the first step's, a margin no rounding flips
    assert max(fp32["eval_loss"], bf16["eval_loss"]) < first / 2
    assert max(drift.values()) <= bound
    assert bf16["eval_count"] == fp32["eval_count"] == 500 and bf16["precision"] == "bf16"


@pytest.mark.timeout(300)
def test_batch_norm_trains_in_bf16_and_one_process_is_sharded_too(tmp_path):
    """A ResNet's BatchNorm under FSDP's bf16 policy (each BatchNorm a unit of its own in fp32, as FSDP1 did: its
    running statistics stay fp32), natively and through Accelerate; at one process started with python, which
    Accelerate runs without its FSDP plugin unless a process group is made (a world of one, as `accelerate launch
    --use_fsdp` gives it). Both libraries shard the same units the same way: the same losses, step by step."""
    args = ["--task", "synthetic-resnet", "--model", "resnet18", "--image-size", "32", "--batch-size", "8"]
    args += ["--max-steps", "3", "--precision", "bf16"]
    native, accelerate = (run(tmp_path, b, 1, args, b) for b in ("fsdp", "accelerate-fsdp"))
    for rec in (native, accelerate):
        assert rec["environment"]["collective"] == "gloo" and rec["precision"] == "bf16"
    assert native["loss_history"] == accelerate["loss_history"] and len(native["loss_history"]) == 3


@pytest.mark.timeout(300)
def test_commbench_times_fsdps_own_collectives_and_project_predicts_fsdp_from_them(tmp_path):
    """Under torchrun, commbench times FSDP2's all_gather_single and reduce_scatter_single at every size (and no
    all-reduce: it has none) and fits each apart; project then predicts fsdp on them, its gradients on the
    reduce-scatter's fit and its parameters on the all-gather's, each of MNIST's four layers a unit of its own."""
    out, sizes = tmp_path / "cb", (4096, 65536, 1048576)
    cmd = py("run.py commbench --backends fsdp --nprocs 2 --sizes 4096,65536,1048576 --repeats 2 --rounds 1")
    run_cmd([*cmd, "--out", str(out)], timeout=240, env=child_env(tmp_path))
    rows = [json.loads(line) for line in (out / "commbench.jsonl").read_text().splitlines()]
    timed = {(r["collective"], r["size_bytes"]) for r in rows if r["time_s"] > 0}
    assert timed == {(c, s) for c in ("all-gather", "reduce-scatter") for s in sizes}, rows
    assert set(json.loads((out / "fit.json").read_text())) == {"fsdp all-gather", "fsdp reduce-scatter"}
    sweep = ROOT / "tests" / "fixtures" / "projection" / "sweep"
    plan = ["--nodes", "2", "--nprocs", "1", "--batch-size", "64", "--backends", "fsdp"]
    cmd = [*py("run.py project"), str(sweep), "--commbench", str(out), *plan, "--output", str(tmp_path / "p.json")]
    run_cmd(cmd, timeout=120, env=child_env(tmp_path))
    (p,) = json.loads((tmp_path / "p.json").read_text())
    assert p["link"] == "commbench fit of fsdp reduce-scatter" and p["all_gather"] == "commbench fit of fsdp all-gather"
    assert 0 < p["scaling_efficiency"] < 1
    assert any(
        w.startswith("FSDP2's all-gathers and reduce-scatters are taken one after another") for w in p["warnings"]
    )
    # conv1, conv2, fc1 and fc2's weights and biases (float32): the root holds none
    assert json.loads((tmp_path / "p.profile.json").read_text())["shard_units"] == [640, 18560, 1179904, 2600]
