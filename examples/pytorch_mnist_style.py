"""A Horovod-style PyTorch training script (synthetic MNIST-shaped data, small CNN).

Written exactly as for Horovod; only the import differs:
    import horovod.torch as hvd   ->   import fuse.torch as hvd

Run:  fuserun -np 2 python examples/pytorch_mnist_style.py --epochs 2
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import fuse.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    images[torch.arange(n), 0, labels * 2 + 4, 4:24] += 3.0   # a learnable stripe per class
    return torch.utils.data.TensorDataset(images, labels)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--use-adasum", action="store_true")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)

    train_dataset = synthetic_dataset(1024, seed=1)
    test_dataset = synthetic_dataset(256, seed=2)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=64,
                                              sampler=test_sampler)

    model = Net()
    # Horovod: scale the learning rate by the number of workers (Adasum needs no scaling).
    lr_scaler = hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % 8 == 0 and hvd.rank() == 0:
                print(f"epoch {epoch} [{batch_idx * len(data)}/{len(train_sampler)}] "
                      f"loss {loss.item():.4f}")

        model.eval()
        test_loss, correct = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(1).eq(target).float().sum().item()
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"epoch {epoch} test loss {test_loss:.4f} accuracy {accuracy:.3f}")

    checksum = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {hvd.rank()} final accuracy {accuracy:.3f} checksum {checksum:.10f}")


if __name__ == "__main__":
    main()
