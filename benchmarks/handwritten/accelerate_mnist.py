"""Hand-written Accelerate training loop, as in Accelerate's nlp_example / README.
accelerate launch --multi_gpu --num_processes N accelerate_mnist.py (or python for one process)"""

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader

from benchmarks.handwritten.common import ConvNet, Window, args, mnist_in_memory


def main():
    a = args()
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    torch.set_num_threads(a.threads)  # Accelerate resets it on CPU
    dataset = mnist_in_memory()
    loader = DataLoader(dataset, batch_size=a.batch_size // accelerator.num_processes, shuffle=True, drop_last=True)
    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    window, step = Window(a.warmup, accelerator.wait_for_everyone), 0
    while step < a.steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            window.step_done(step)
            if step == a.steps:
                break
    window.report(a.batch_size, accelerator.is_main_process, world_size=accelerator.num_processes,
                  threads=torch.get_num_threads())  # fmt: skip
    accelerator.end_training()


if __name__ == "__main__":
    main()
