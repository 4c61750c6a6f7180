"""Hand-written DDP training loop, as in PyTorch's DDP tutorial. torchrun --nproc_per_node N ddp_mnist.py"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from benchmarks.handwritten.common import ConvNet, Window, args, mnist_in_memory


def main():
    a = args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = mnist_in_memory()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=a.batch_size // world, sampler=sampler, drop_last=True)
    torch.manual_seed(0)
    model = DDP(ConvNet())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    window, step, epoch = Window(a.warmup, dist.barrier), 0, 0
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            window.step_done(step)
            if step == a.steps:
                break
        epoch += 1
    window.report(a.batch_size, rank == 0, world_size=world, threads=torch.get_num_threads())
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    main()
