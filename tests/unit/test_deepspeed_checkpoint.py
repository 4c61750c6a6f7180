"""Which DeepSpeed checkpoints distbench resumes at another world size (backends/deepspeed_backend.not_universal),
without launching: the universal checkpoint's reach (each parameter's fp32 value and Adam's two moments) and the
stage checked not to resume exactly. (The resumes themselves, launched: tests/multiproc/test_bert.py and
test_deepspeed.py.)"""

from types import SimpleNamespace

import pytest
import torch

from distbench.backends.deepspeed_backend import not_universal


def engine_holding(optimizer: torch.optim.Optimizer) -> SimpleNamespace:
    """An engine whose ZeRO optimizer wraps `optimizer` (DeepSpeed's `engine.optimizer.optimizer`), after a step."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    return SimpleNamespace(optimizer=SimpleNamespace(optimizer=optimizer))


@pytest.mark.parametrize(
    ("make", "stage", "fragment"),
    [
        (torch.optim.AdamW, 0, None),  # every rank wrote the whole state
        (torch.optim.Adadelta, 0, None),
        (torch.optim.AdamW, 2, None),  # the universal checkpoint carries Adam's state
        (torch.optim.Adadelta, 2, "carries Adam's state alone, not Adadelta's acc_delta, square_avg"),
        (torch.optim.AdamW, 3, "universal checkpoint of ZeRO-3 did not resume"),
    ],
)
def test_a_checkpoint_reshards_where_the_universal_checkpoint_carries_its_whole_state(make, stage, fragment):
    engine = engine_holding(make([torch.nn.Parameter(torch.zeros(3))], lr=0.1))
    why = not_universal(engine, stage)
    assert why is None if fragment is None else fragment in why


@pytest.mark.parametrize(
    ("stage", "written_by", "world_size", "universal"),
    [
        (2, None, 2, False),  # a fresh start
        (2, 2, 2, False),  # the partitions this world size wrote
        (2, 2, 1, True),  # another world size's partitions: DeepSpeed loads them as a universal checkpoint
        (0, 2, 1, False),  # ZeRO-0: every rank wrote the whole state
    ],
)
def test_the_config_asks_for_a_universal_checkpoint_where_the_partitions_change(
    stage, written_by, world_size, universal
):
    """As DeepSpeed's users ask for one: `"checkpoint": {"load_universal": true}` in ds_config, said either way."""
    from distbench.backends.deepspeed_backend import DeepSpeedBackend, ds_config
    from distbench.process import LaunchEnv

    backend = DeepSpeedBackend(LaunchEnv("python"), zero_stage=stage, resumes_from=written_by)
    backend.world_size = world_size
    assert ds_config(backend, micro_batch=8)["checkpoint"] == {"load_universal": universal}
