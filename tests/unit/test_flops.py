"""Model FLOPs, the device's peak and MFU (training/flops.py): the counter's count is the layers' arithmetic, counting
leaves the run untouched, a step that needs its data's values is counted on a CPU twin, and what is not known is
said, never guessed."""

import pytest
import torch
import torch.nn.functional as F

from distbench.models.convnet import ConvNet
from distbench.tasks.mnist import MnistTask
from distbench.training import flops


def convnet_flops_per_sample() -> int:
    """The ConvNet's multiply-adds, 2 FLOPs each: forward, then backward's two products per layer (the input's
    gradient and the weight's), but none for the input of the first layer, which needs no gradient."""
    conv1, conv2 = 26 * 26 * 16 * (1 * 9), 24 * 24 * 32 * (16 * 9)
    fc1, fc2 = 4608 * 64, 64 * 10
    forward = 2 * (conv1 + conv2 + fc1 + fc2)
    return 3 * forward - 2 * conv1


class Mnist(MnistTask):
    def __init__(self):  # the task's model and step alone: no config, no data
        pass

    def build_model(self):
        return ConvNet(dropout=0.0)


def batch(n: int = 4):
    return torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))


def test_the_count_is_the_layers_arithmetic_and_leaves_the_run_untouched():
    four = batch(4)
    torch.manual_seed(3)
    expected_next = torch.rand(1)
    torch.manual_seed(3)
    count, how = flops.count_flops(Mnist(), four)
    assert count == 4 * convnet_flops_per_sample()
    assert "meta device" in how
    assert torch.equal(torch.rand(1), expected_next)  # the global RNG as it was: the run's dropout and data go on


class ReadsValues(Mnist):
    def step(self, model, batch):
        x, y = batch
        if x.abs().max().item() == 0:  # a value: impossible on the meta device
            raise AssertionError
        return F.nll_loss(model(x), y)


class Broken(Mnist):
    def step(self, model, batch):
        raise ValueError("this step is broken")


def test_a_step_that_reads_its_data_is_counted_on_a_cpu_twin_and_a_broken_one_is_said_so():
    count, how = flops.count_flops(ReadsValues(), batch(2))
    assert count == 2 * convnet_flops_per_sample() and "CPU twin" in how
    count, how = flops.count_flops(Broken(), batch(2))
    assert count is None and how.startswith("not counted") and "this step is broken" in how


def test_tokens_are_a_token_batchs_input_ids_padding_included():
    ids = torch.zeros(3, 17, dtype=torch.long)
    assert flops.tokens_in({"input_ids": ids, "attention_mask": ids, "labels": ids[:, 0]}) == 51
    assert flops.tokens_in(batch()) is None


def test_the_peak_is_stated_or_the_devices_from_the_table_or_unknown(monkeypatch):
    assert flops.peak_tflops(torch.device("cpu"), "fp32", None)[0] is None
    assert flops.peak_tflops(torch.device("cpu"), "fp32", 12.5) == (12.5, "--peak-tflops")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    gpu = torch.device("cuda", 0)
    assert flops.peak_tflops(gpu, "bf16", None)[0] == 989.4
    assert flops.peak_tflops(gpu, "fp32", None)[0] == 67.0  # PyTorch's default: fp32 matrix products, no TF32
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert flops.peak_tflops(gpu, "fp32", None)[0] == 494.7
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 1080")
    peak, why = flops.peak_tflops(gpu, "bf16", None)
    assert peak is None and "GTX 1080 is not in distbench's table" in why


@pytest.mark.parametrize("tokens", [None, 40])
def test_achieved_flops_and_mfu(tokens):
    counts = {"micro_batch_flops": 8e9, "micro_batch_samples": 4, "micro_batch_tokens": tokens}
    # 100 samples/s over 2 devices; a token task: 1,000 tokens/s, its FLOPs the first micro-batch's per token
    got = flops.figures(counts, 100.0, 1000.0 if tokens else None, world_size=2, peak=2.0)
    per_second = 8e9 / 40 * 1000 if tokens else 8e9 / 4 * 100
    assert got["achieved_tflops_per_device"] == pytest.approx(per_second / 2 / 1e12)
    assert got["model_flops_per_sample"] == pytest.approx(per_second / 100)
    assert got["mfu"] == pytest.approx(per_second / 2 / 1e12 / 2.0)
    assert flops.figures(counts, 100.0, None, world_size=2, peak=None)["mfu"] is None  # unknown, not a guess
    assert set(flops.figures({"micro_batch_flops": None}, 100.0, None, 2, 2.0).values()) == {None}
