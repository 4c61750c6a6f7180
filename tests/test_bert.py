"""BERT sentiment on MR polarity: data, validation, every backend at world size 2, and equivalence."""

import sys

import pytest
import torch

from data import mr
from distbench.errors import UserError
from tests.helpers import child_env, launch, read_record, run_cmd
from tests.mr_data import MINI_TEST_COUNT
from tests.test_cli import assert_one_line_error

# The real data (`mr_dir`, found as tests/mr_data.py says) where the test is about it or about the real
# workload; the mini corpus the tests write themselves (`mini_mr`) where only mechanics are checked.


def test_full_data_and_fixed_split(mr_dir):
    s = mr.load_sentences(mr_dir)
    assert len(s.texts) == 10662 and sum(s.labels) == 5331
    train_idx, test_idx = mr.split(len(s.texts))
    assert len(test_idx) == 1066 and len(train_idx) == 9596
    assert set(train_idx).isdisjoint(test_idx)
    assert (mr.split(len(s.texts))[1] == test_idx).all()  # the same split every time
    # the reference content digests hold for the copy we test with
    assert mr.content_digest(mr.read_lines(mr_dir / "rt-polarity.pos")) == mr.CONTENT_SHA256["pos"]


def test_latin1_fallback_and_bad_files(tmp_path):
    (tmp_path / "a").write_bytes("caf\xe9 noir\n\nsecond line\n".encode("latin-1"))
    assert mr.read_lines(tmp_path / "a") == ["café noir", "second line"]
    (tmp_path / "b").write_bytes(b"")
    with pytest.raises(UserError, match="no sentences"):
        mr.read_lines(tmp_path / "b")
    (tmp_path / "c").write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(UserError, match="not a text file"):
        mr.read_lines(tmp_path / "c")


def test_offline_without_data_says_how_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path))
    with pytest.raises(UserError, match="--data-dir"):
        mr.load_sentences(None)


def test_pad_collate_pads_per_batch():
    batch = mr.pad_collate([([101, 7, 102], 1), ([101, 102], 0)], pad_id=0)
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0]


def test_default_model_loads_offline_and_tokenizes():
    from models.bert import build_classifier, load_tokenizer

    tok = load_tokenizer(None)
    model = build_classifier(None)
    ids = tok(["a fine film"], return_tensors="pt")
    assert model(**ids).logits.shape == (1, 2)
    assert sum(p.numel() for p in model.parameters()) > 20_000_000  # the real pretrained MiniLM-L6, not a toy


def test_head_learning_rate_applies_to_pooler_and_classifier_only():
    from distbench.config import RunConfig
    from distbench.tasks.bert import BertSentimentTask

    for head_lr, expected in [(None, 1e-4), (1e-3, 1e-3)]:
        task = BertSentimentTask(RunConfig(task="bert-sentiment", model="tiny-random", lr=1e-4, head_lr=head_lr))
        model = task.build_model()
        optimizer = task.build_optimizer(model)
        lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
        assert len(lr_of) == sum(1 for _ in model.parameters())  # every parameter in exactly one group
        for name, p in model.named_parameters():
            is_head = name.startswith(("classifier.", "bert.pooler."))
            assert lr_of[id(p)] == (expected if is_head else 1e-4), name


def _run_py(args, tmp_path):
    return run_cmd([sys.executable, "run.py", "--task", "bert-sentiment", *args], timeout=120,
                   env=child_env(tmp_path), expect_rc=None)  # fmt: skip


@pytest.mark.parametrize("case", ["missing_file", "empty_file", "unknown_model", "max_length", "head_lr"])
def test_bad_input(tmp_path, mini_mr, case):
    data = tmp_path / "mr"
    data.mkdir()
    args = ["--data-dir", str(data)]
    if case == "missing_file":
        (data / "rt-polarity.pos").write_text("good\n")
        fragment = "missing rt-polarity.neg"
    elif case == "empty_file":
        (data / "rt-polarity.pos").write_text("good\n")
        (data / "rt-polarity.neg").write_text("\n\n")
        fragment = "no sentences"
    elif case == "unknown_model":
        args = ["--data-dir", str(mini_mr), "--model", "no-such-org/no-such-bert"]
        fragment = "cannot load BERT model id 'no-such-org/no-such-bert'"
    elif case == "max_length":
        args = ["--data-dir", str(mini_mr), "--max-length", "100000"]
        fragment = "--max-length must be between"
    else:
        args = ["--data-dir", str(mini_mr), "--head-lr", "-1"]
        fragment = "--head-lr must be positive"
    assert_one_line_error(_run_py(args, tmp_path), fragment)


COMMON = ["--task", "bert-sentiment", "--no-progress", "--threads", "1"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", ["ddp", "accelerate", "horovod"])
def test_bert_under_every_backend_at_world_size_2(tmp_path, mini_mr, backend):
    """The bundled MiniLM under each backend on the mini corpus (the real data under accelerate x2: the BERT
    overhead benchmark's test; its 1,066 test sentences: test_full_data_and_fixed_split)."""
    out = tmp_path / "r.json"
    cmd = launch(backend, 2, [*COMMON, "--data-dir", str(mini_mr), "--max-steps", "5", "--output", str(out)])
    run_cmd(cmd, timeout=360, env=child_env(tmp_path))
    rec = read_record(out)
    assert (rec["world_size"], rec["steps"], rec["eval_count"]) == (2, 5, MINI_TEST_COUNT)
    assert rec["dataset"]["n_test"] == MINI_TEST_COUNT and rec["per_rank_batch_size"] == 16
    assert rec["dataset"]["model"].startswith("default") and rec["final_loss"] == rec["final_loss"]


STEPS = 10
TINY = [*COMMON, "--model", "tiny-random", "--dropout", "0", "--max-steps", str(STEPS), "--batch-size", "16",
        "--max-length", "64"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory, mini_mr):
    tmp = tmp_path_factory.mktemp("tiny")
    out = tmp / "r.json"
    run_cmd(launch("single", 1, [*TINY, "--data-dir", str(mini_mr), "--output", str(out)]), timeout=240,
            env=child_env(tmp))  # fmt: skip
    return read_record(out)


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", ["ddp", "accelerate", "horovod"])
def test_tiny_bert_losses_match_single_process(tmp_path, mini_mr, tiny_reference, backend):
    out = tmp_path / "r.json"
    run_cmd(launch(backend, 2, [*TINY, "--data-dir", str(mini_mr), "--output", str(out)]), timeout=300,
            env=child_env(tmp_path))  # fmt: skip
    rec = read_record(out)
    diffs = [abs(a - b) for a, b in zip(tiny_reference["loss_history"], rec["loss_history"], strict=True)]
    print(f"tiny BERT {backend} x2 vs single: max per-step loss difference {max(diffs):.3e}")
    assert len(diffs) == STEPS and max(diffs) < 1e-4
    assert rec["eval_count"] == tiny_reference["eval_count"] == MINI_TEST_COUNT


def test_bf16_autocast_runs_on_cpu(tmp_path, mini_mr):
    out = tmp_path / "r.json"
    run_cmd(launch("single", 1, [*TINY[:-2], "--max-length", "32", "--precision", "bf16", "--data-dir", str(mini_mr),
                                 "--output", str(out)]), timeout=240, env=child_env(tmp_path))  # fmt: skip
    rec = read_record(out)
    assert rec["precision"] == "bf16" and all(torch.isfinite(torch.tensor(rec["loss_history"])))
