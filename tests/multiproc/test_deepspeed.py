"""DeepSpeed's ZeRO stages, natively (started by its own launcher) and through Accelerate: every stage follows the
single process at accumulation 4, each rank holds its stage's share of the state, and DeepSpeed's own checkpoint
resumes exactly. (Stage 0 under every check of the other backends but accumulation: test_equivalence, test_knobs,
test_contract, check-task; stage 3 on the tiny BERT: test_bert; bf16: test_fsdp's bf16 test.)"""

import json
import time
from pathlib import Path

import pytest

from distbench.launching.launch import DEEPSPEED, PYTHON
from distbench.training import fairness
from tests.conftest import EQUIVALENCE_STEPS
from tests.helpers import assert_one_line_error, child_env, launch, py, read_record, run_cmd, run_in

STAGES = (1, 2, 3)
# what the sweep's runs are given; the resumed runs below are given the same, so that they are the same runs
SETTINGS = f"--accumulate 4 --max-steps {EQUIVALENCE_STEPS} --dropout 0 --batch-size 64 --threads 1"


def shm_segments() -> set[str]:
    """DeepSpeed's shared-memory all-reduce segments in /dev/shm (backends/deepspeed_backend.unlink_shm_segment)."""
    return {p.name for p in Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")}


def leaked_segments(before: set[str]) -> set[str]:
    """The segments that appeared since `before` and are still there 10 s later. A run unlinks its own as soon as
    every rank has mapped them, early in its start-up (a run of another test, which `make test` may run beside this
    one, holds its own for that long at most); a leaked segment stays: each name holds its job's port."""
    new = shm_segments() - before
    if new:
        time.sleep(10)
    return new & shm_segments()


@pytest.fixture(scope="module")
def zero_sweep(tmp_path_factory) -> dict:
    """One sweep over --zero-stage 1,2,3 of DeepSpeed started by its own launcher, each step 4 micro-batches
    (DeepSpeed's gradient_accumulation_steps), and the same at ZeRO-2 through Accelerate (accelerate launch: the
    plugin hands DeepSpeed the stage as it is; ZeRO-3 through it: test_bert's tiny BERT; stage 0: every other
    test): the records by (backend, stage), the single-process reference under "single". (That the axis does not
    multiply other backends' runs: tests/unit/test_plan.py.)"""
    tmp = tmp_path_factory.mktemp("zero")
    out, plugin = tmp / "sweep", tmp / "accelerate-deepspeed.json"
    stages, segments = ",".join(map(str, STAGES)), shm_segments()
    cmd = py(f"run.py compare --backends deepspeed --nprocs 2 --zero-stage {stages} {SETTINGS}")
    run_in(tmp, [*cmd, "--out", str(out)], timeout=560)
    through = [*SETTINGS.split(), "--zero-stage", "2", "--no-progress", "--output", str(plugin)]
    run_in(tmp, launch("accelerate-deepspeed", 2, through), timeout=240)
    assert not leaked_segments(segments)  # none of DeepSpeed's 66 MB segments per rank left in RAM
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    by = {(r["backend"], r["config"]["zero_stage"]): r for r in recs if r["backend"] != "single"}
    assert sorted(by) == [("deepspeed", k) for k in STAGES]
    by["accelerate-deepspeed", 2] = read_record(plugin)
    return {**by, "single": next(r for r in recs if r["backend"] == "single"), "report": (out / "report.md")}


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_every_zero_stage_follows_the_single_process_at_accumulation_4(zero_sweep, mnist_run):
    """Each stage at x2, 4 micro-batches of 8 per rank and step, reproduces single x1's first steps at one batch of 64
    and evaluates every test sample once."""
    single = mnist_run("single", 1)["loss_history"][:EQUIVALENCE_STEPS]
    for (backend, stage), r in ((k, v) for k, v in zero_sweep.items() if isinstance(k, tuple)):
        diff = max(abs(a - b) for a, b in zip(r["loss_history"], single, strict=True))
        print(f"{backend} x2 ZeRO-{stage} acc4 vs single x1 acc1: max per-step loss diff {diff:.2e}")
        assert diff < fairness.LOSS_TOLERANCE and r["eval_count"] == 500
        assert (r["accumulate"], r["micro_batch_size"]) == (4, 8)
        assert r["launcher"] == ("deepspeed" if backend == "deepspeed" else "accelerate launch")
    reference = zero_sweep["single"]  # the sweep's own: single x1 at 4 micro-batches of 16, the base loop's
    diff = max(abs(a - b) for a, b in zip(reference["loss_history"][:EQUIVALENCE_STEPS], single, strict=True))
    assert (reference["accumulate"], reference["micro_batch_size"]) == (4, 16) and diff < fairness.LOSS_TOLERANCE
    report = zero_sweep["report"].read_text()
    assert "ZeRO-3" in report and "ZeRO-1" in report and "### Memory per rank" in report


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_each_rank_holds_its_stages_share_of_the_state(zero_sweep, mnist_run):
    """Memory per rank at x2 against the whole state of one process (single x1: P bytes of fp32 parameters, P of
    gradients, 2P of Adadelta's state), counted from DeepSpeed's buffers (backends/deepspeed_backend.py):

    - stage 0 holds what ddp holds;
    - stages 1-3 add ZeRO's fp32 master copy to the optimizer state (stage 3 of an fp32 model: the partition
      itself) and divide the optimizer state by 2: 3P / 2 at stages 1-2, 2P / 2 at stage 3;
    - stage 3 divides the parameters too, but for those DeepSpeed keeps whole on every rank between steps (at most
      stage3_param_persistence_threshold elements, 1e5 by default: every one of the ConvNet's but fc1's weight);
    - gradients: all P at stages 1-2, which hold every gradient until backward ends (stage 1 reduces at the boundary;
      stage 2's reduce bucket, DeepSpeed's default reduce_bucket_size of 5e8 elements, far above this model, fills
      only then), then P / 2 in the reduced partition; stage 3 also keeps its partition buffer beside them: 1.5 P.

    Partitions are the flat buffer (padded to divide by the world size) over the ranks: each within 16 bytes of an
    exact half here; the optimizer also holds Adadelta's one-element `step` per parameter group."""
    from distbench.models.convnet import ConvNet
    from distbench.training.memory import KINDS

    one = zero_sweep["single"]["memory_per_rank"]
    p = one["params_bytes"]
    assert (one["grads_bytes"], one["optimizer_bytes"]) == (p, 2 * p + 4 * 8)  # 8 parameters, a step each
    stage0, ddp = mnist_run("deepspeed", 2)["memory_per_rank"], mnist_run("ddp", 2)["memory_per_rank"]
    assert [stage0[k] for k in KINDS] == [ddp[k] for k in KINDS]
    kept = sum(t.numel() * 4 for t in ConvNet().parameters() if t.numel() <= 100_000)  # whole on every rank

    def near(x: int, y: float) -> bool:
        return y <= x <= y + 16

    held = {key: r["memory_per_rank"] for key, r in zero_sweep.items() if isinstance(key, tuple)}
    print({key: [m[x] for x in ("params_bytes", "grads_bytes", "optimizer_bytes")] for key, m in held.items()})
    for key in [key for key in held if key[1] in (1, 2)]:
        assert (held[key]["params_bytes"], held[key]["grads_bytes"]) == (p, p), key
        assert near(held[key]["optimizer_bytes"], 3 * p / 2), key
    three = held["deepspeed", 3]
    assert near(three["params_bytes"], p / 2 + kept) and near(three["grads_bytes"], 3 * p / 2)
    assert near(three["optimizer_bytes"], p)


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_stage_1_exchanges_once_per_step_and_stage_2_once_per_micro_batch(zero_sweep):
    """Bytes each rank wrote per optimizer step of 4 micro-batches, against the ConvNet's S = 1.2 MB of fp32
    gradients. Stage 1 reduces the gradients at the accumulation boundary only (about S at x2), then all-gathers the
    updated halves (S/2): 1.5 S, as at one micro-batch (docs/results/deepspeed/mnist). Stage 2 reduces every
    micro-batch into its partition ("ZeRO stage >= 2 communicates during non gradient accumulation boundaries as
    well", deepspeed/runtime/engine.py's allreduce_gradients): 4 S + S/2; natively and through Accelerate alike."""
    grads = 300_426 * 4
    sent = {key: r["written_bytes_per_step"] for key, r in zero_sweep.items() if isinstance(key, tuple)}
    print({key: round(b / grads, 2) for key, b in sent.items()})
    assert 1.3 * grads < sent["deepspeed", 1] < 1.8 * grads
    for key in (("deepspeed", 2), ("accelerate-deepspeed", 2)):
        assert 4.2 * grads < sent[key] < 4.8 * grads, key


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_a_killed_zero2_run_resumes_from_deepspeeds_own_checkpoint_exactly(tmp_path, zero_sweep):
    """Each rank writes its ZeRO-2 partition through DeepSpeed's save_checkpoint every half of the sweep's steps; a
    run killed 3 steps after the first checkpoint resumes from it and ends where the sweep's uninterrupted ZeRO-2 run
    ended (the same settings); only the newest checkpoint is kept. (Another world size is refused in one line:
    tests/unit/test_checkpoint.py.)"""
    every = EQUIVALENCE_STEPS // 2
    ckpt, out = tmp_path / "ckpt", tmp_path / "resumed.json"
    args = [*SETTINGS.split(), "--zero-stage", "2", "--no-progress", "--timeout-s", "60"]
    args += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", str(every), "--output", str(out)]
    segments = shm_segments()
    faulted = [*args, "--fault", f"kill:1@{every + 3}"]
    killed = run_cmd(launch("deepspeed", 2, faulted, DEEPSPEED), timeout=240, env=child_env(tmp_path), expect_rc=None)
    assert killed.returncode != 0 and not out.exists()
    assert sorted(p.name for p in (ckpt / "deepspeed").iterdir() if p.is_dir()) == [f"step{every}"]
    assert not leaked_segments(segments)  # a killed run leaves none either
    again = run_cmd(launch("deepspeed", 2, args, DEEPSPEED), timeout=240, env=child_env(tmp_path))
    assert "resuming from" in again.stderr and f"at step {every}" in again.stderr
    straight, resumed = zero_sweep["deepspeed", 2], read_record(out)
    assert resumed["resumed_from_step"] == every
    assert resumed["loss_history"] == straight["loss_history"]
    assert resumed["param_checksum"] == straight["param_checksum"]
    assert sorted(p.name for p in (ckpt / "deepspeed").iterdir() if p.is_dir()) == [
        f"step{2 * every}"
    ]  # the older pruned
    # at another world size: DeepSpeed's universal checkpoint would drop Adadelta's state (test_bert: AdamW's resumes)
    at_one = [*args[: args.index("--output")], "--output", str(tmp_path / "one.json")]
    other = run_cmd(launch("deepspeed", 1, at_one, PYTHON), timeout=120, env=child_env(tmp_path), expect_rc=2)
    assert_one_line_error(other, "this run has 1, and DeepSpeed's universal checkpoint", "not Adadelta's acc_delta")


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_commbench_times_deepspeeds_all_gather_and_reduce_scatter_beside_its_all_reduce(tmp_path):
    """Under DeepSpeed's own launcher, commbench times deepspeed.comm's all_gather_into_tensor (what ZeRO-1 and 2
    call after each step, ZeRO-3 in forward) and reduce_scatter_tensor (ZeRO-3's after backward) at every size beside
    the gradients' all-reduce, and fits each apart."""
    out = tmp_path / "cb"
    cmd = py("run.py commbench --backends deepspeed --nprocs 2 --sizes 4096,65536,1048576 --repeats 2 --rounds 1")
    run_cmd([*cmd, "--out", str(out)], timeout=240, env=child_env(tmp_path))
    rows = [json.loads(line) for line in (out / "commbench.jsonl").read_text().splitlines()]
    timed = {(r["collective"], r["size_bytes"]) for r in rows if r["time_s"] > 0 and r["launcher"] == DEEPSPEED.name}
    collectives = ("all-reduce", "all-gather", "reduce-scatter")
    assert timed == {(c, s) for c in collectives for s in (4096, 65536, 1048576)}, rows
    fits = {"deepspeed", "deepspeed all-gather", "deepspeed reduce-scatter"}
    assert set(json.loads((out / "fit.json").read_text())) == fits
