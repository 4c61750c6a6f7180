"""The figures GPU users read beside samples/s: model FLOPs, achieved TFLOP/s per device, MFU and tokens/s.

Model FLOPs are counted once per run, after its timed window, by `torch.utils.flop_counter.FlopCounterMode` over the
forward and backward of one training micro-batch (its shapes, on the meta device: nothing is computed, the run's
model, RNG and data are untouched), through the task's own `step`, on a twin of the task's model. They are the
model's matrix and convolution FLOPs (the counter's registered operators: no element-wise work, no optimizer), as
MFU is defined (PaLM, Chowdhery et al. 2022, appendix B): the same count whatever a backend shards, recomputes or
exchanges. MFU = achieved model FLOP/s per device / the device's peak at the run's precision: from PEAK_TFLOPS
(vendors' dense figures) by the device's name, or --peak-tflops; "unknown" rather than a guess (any CPU, and a GPU
not in the table)."""

from __future__ import annotations

import torch

# Dense peak TFLOP/s per device (no sparsity), by a fragment of torch.cuda.get_device_name(), from NVIDIA's datasheets
# (H100/H200 SXM, H100 PCIe, A100 SXM, L40S, L4): fp32 on CUDA cores, tf32 and bf16 on tensor cores. First match
# wins: more specific fragments first.
PEAK_TFLOPS = (
    ("H200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}),
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0}),
    ("H100", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}),
    ("L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05}),
    ("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0}),
)


def peak_format(precision: str) -> str:
    """The format the device's matrix units run at: bf16 under bf16 autocast; under fp32, tf32 where PyTorch lets
    matrix products use it (torch.set_float32_matmul_precision "high" or "medium"), else fp32."""
    if precision == "bf16":
        return "bf16"
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def peak_tflops(device: torch.device, precision: str, stated: float | None) -> tuple[float | None, str]:
    """The device's peak TFLOP/s at `precision` and where it comes from: stated (--peak-tflops), the table by the
    device's name, or None with why not."""
    if stated is not None:
        return stated, "--peak-tflops"
    if device.type != "cuda":
        return None, f"no peak known for a {device.type} device (--peak-tflops states one)"
    name, fmt = torch.cuda.get_device_name(device), peak_format(precision)
    for fragment, peaks in PEAK_TFLOPS:
        if fragment in name:
            return peaks[fmt], f"{name}, dense {fmt} peak (distbench's table, NVIDIA's datasheet)"
    return None, f"{name} is not in distbench's table of peaks (--peak-tflops states one)"


def count_flops(task, micro_batch) -> tuple[float | None, str]:
    """Model FLOPs of one forward and backward of `micro_batch` through the task's step, and how they were counted
    (or why they could not be): on the meta device, from shapes alone; where the step reads its data's values (a
    Hugging Face model checks its attention mask), on a CPU twin with the micro-batch's values, once."""
    from torch.utils.flop_counter import FlopCounterMode

    def counted(device: torch.device) -> float:
        with torch.random.fork_rng(devices=[]):  # the twin's initialisation and dropout draw from the global RNG
            twin = task.build_model().to(device)
            with FlopCounterMode(display=False) as counter:
                task.step(twin, _on(micro_batch, device)).backward()
        return float(counter.get_total_flops())

    how = "torch.utils.flop_counter, forward and backward of the first micro-batch"
    try:
        return counted(torch.device("meta")), f"{how} (its shapes, on the meta device)"
    except Exception:  # noqa: BLE001 - any error of a step run on shapes alone: counted with its values instead
        pass
    try:
        return counted(torch.device("cpu")), f"{how} (on a CPU twin: the step reads its data's values)"
    except Exception as e:  # noqa: BLE001 - a task's own step may raise anything: the record says so, run goes on
        return None, f"not counted: the task's step under the FLOP counter raised {type(e).__name__}: {e}"[:300]


def _on(batch, device: torch.device):
    """A batch's tensors (in dicts, lists and tuples) copied to `device`."""
    if torch.is_tensor(batch):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _on(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_on(v, device) for v in batch)
    return batch


def tokens_in(micro_batch) -> int | None:
    """The tokens a micro-batch puts through the model (its input_ids' elements, padding included) for a token task,
    whose batch is a dict with input_ids; None for any other task."""
    if isinstance(micro_batch, dict) and torch.is_tensor(micro_batch.get("input_ids")):
        return int(micro_batch["input_ids"].numel())
    return None


def figures(counts: dict, samples_per_sec: float | None, tokens_per_sec: float | None, world_size: int, peak):
    """Model FLOPs per sample, achieved model TFLOP/s per device and MFU (None where an input is unknown). A token
    task's micro-batches differ in length (padded to their longest sentence): its FLOPs are the first micro-batch's
    per token times the tokens trained, exact for the layers applied to each token, the attention's quadratic term
    taken at the first micro-batch's length."""
    flops = counts.get("micro_batch_flops")
    if flops is None or not samples_per_sec:
        return {"model_flops_per_sample": None, "achieved_tflops_per_device": None, "mfu": None}
    if counts.get("micro_batch_tokens") and tokens_per_sec:
        flops_per_sec = flops / counts["micro_batch_tokens"] * tokens_per_sec
    else:
        flops_per_sec = flops / counts["micro_batch_samples"] * samples_per_sec
    achieved = flops_per_sec / world_size / 1e12
    return {
        "model_flops_per_sample": flops_per_sec / samples_per_sec,
        "achieved_tflops_per_device": achieved,
        "mfu": None if peak is None else achieved / peak,
    }
