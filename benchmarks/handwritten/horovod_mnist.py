"""Hand-written Horovod training loop, as in Horovod's pytorch_mnist.py example.
horovodrun -np N python horovod_mnist.py"""

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from benchmarks.handwritten.common import ConvNet, Window, args, mnist_in_memory


def main():
    a = args()
    hvd.init()
    torch.set_num_threads(a.threads)
    dataset = mnist_in_memory()
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(), seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=a.batch_size // hvd.size(), sampler=sampler, drop_last=True)
    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    window, step, epoch = Window(a.warmup, hvd.barrier), 0, 0
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
    window.report(a.batch_size, hvd.rank() == 0, world_size=hvd.size(), threads=torch.get_num_threads())
    hvd.shutdown()


if __name__ == "__main__":
    main()
