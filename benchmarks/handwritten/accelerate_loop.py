"""Hand-written Accelerate training loop, as in Accelerate's nlp_example / README.
accelerate launch --multi_gpu --num_processes N -m benchmarks.handwritten.accelerate_loop [--task ...] (python: one)"""

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch.utils.data import DataLoader

from benchmarks.handwritten.common import Window, args, param_sample, pin, rank_spread, run_steps, train_step, workload
from distbench import leave


def main():
    a = args()
    gpu = torch.cuda.is_available()
    # on a GPU, pinned batches copied without blocking, as distbench's accelerate backend has them (Accelerate's option)
    accelerator = Accelerator(cpu=not gpu, dataloader_config=DataLoaderConfiguration(non_blocking=gpu))
    torch.set_num_threads(a.threads)  # Accelerate resets it on CPU
    cores = pin(a)
    model, dataset, collate, loss, optimizer_class = workload(a)
    per_process = a.batch_size // accelerator.num_processes
    loader = DataLoader(dataset, per_process, shuffle=True, collate_fn=collate, drop_last=True, pin_memory=gpu)
    optimizer = optimizer_class(model.parameters(), lr=a.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    window = Window(a.warmup, accelerator.wait_for_everyone, accelerator.device)
    run_steps(loader, a.steps, train_step(model, optimizer, loss, accelerator.backward), window)
    spread = rank_spread(accelerator.gather(param_sample(model)))
    window.report(a, accelerator.is_main_process, accelerator.num_processes, cores, spread)
    accelerator.end_training()


if __name__ == "__main__":
    main()
    leave()  # gloo and torch._dynamo can abort a finishing process (distbench.leave)
