"""A Horovod-style PyTorch script: a two-tower recommender with sparse embeddings.

Written as for Horovod; only the imports differ:
    import horovod.torch as hvd                                 ->  import fuse.torch as hvd
    from horovod.torch.compression import Compression           ->  fuse.torch.compression
    from horovod.common.exceptions import HorovodInternalError  ->  fuse.common.exceptions

What it leans on: sparse embedding gradients kept sparse for ``torch.optim.SparseAdam``
(``sparse_as_dense=False``), an unnamed ``DistributedOptimizer`` and its generated
``_parameter_names``, ``broadcast_optimizer_state`` leaving gradients to broadcast,
``grouped_allgather`` with gradients (in-batch negatives from every worker) and
``reducescatter`` for a sharded statistic.

Run:  fuserun -np 2 python examples/pytorch_embeddings_style.py --epochs 3
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuse.torch as hvd
from fuse.common.exceptions import HorovodInternalError
from fuse.torch.compression import Compression


class TwoTower(nn.Module):
    def __init__(self, users, items, dim):
        super().__init__()
        self.user_emb = nn.Embedding(users, dim, sparse=True)
        self.item_emb = nn.Embedding(items, dim, sparse=True)
        self.user_mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.item_mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, users, items):
        u = F.normalize(self.user_mlp(self.user_emb(users)), dim=1)
        v = F.normalize(self.item_mlp(self.item_emb(items)), dim=1)
        return u, v


def liked_item(users, items):
    return (users * 7 + 3) % items


def interactions(n, users, items, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, users, (n,), generator=g)
    return u, liked_item(u, items)


def train_epoch(model, opts, data, args):
    users, items = data
    order = torch.randperm(len(users), generator=torch.Generator().manual_seed(args.epoch))
    total = 0.0
    for start in range(0, len(users) - args.batch_size + 1, args.batch_size):
        idx = order[start:start + args.batch_size]
        for opt in opts:
            opt.zero_grad()
        u, v = model(users[idx], items[idx])
        # in-batch negatives from every worker: the gathered towers carry gradients back
        all_u, all_v = hvd.grouped_allgather([u, v])
        targets = torch.arange(len(idx)) + hvd.rank() * args.batch_size
        loss = (F.cross_entropy(u @ all_v.t() / args.temperature, targets)
                + F.cross_entropy(v @ all_u.t() / args.temperature, targets)) / 2
        loss.backward()
        for opt in opts:
            opt.step()
        total += loss.item()
    return total


def recall_at_1(model, args):
    users = torch.arange(hvd.rank(), args.users, hvd.size())   # each worker scores its share
    with torch.no_grad():
        u, v = model(users, torch.arange(args.items))
        hits = ((u @ v.t()).argmax(dim=1) == liked_item(users, args.items)).sum()
    totals = hvd.allreduce(torch.stack([hits, torch.tensor(len(users))]).double(), op=hvd.Sum)
    return float(totals[0] / totals[1])


def main():
    parser = argparse.ArgumentParser(description="Horovod-style two-tower recommender")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--fp16-allreduce", action="store_true", default=False)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = TwoTower(args.users, args.items, args.dim)
    data = interactions(512, args.users, args.items, seed=hvd.rank())   # this worker's shard

    sparse_params = [model.user_emb.weight, model.item_emb.weight]
    dense_named = [(n, p) for n, p in model.named_parameters() if "_emb." not in n]
    sparse_opt = torch.optim.SparseAdam(sparse_params, lr=args.lr)
    dense_opt = torch.optim.Adam([p for _, p in dense_named], lr=args.lr * hvd.size())

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(sparse_opt, root_rank=0)
    hvd.broadcast_optimizer_state(dense_opt, root_rank=0)
    # every trainable parameter now has a gradient tensor; rank 0's dense ones are the same
    for name, p in dense_named:
        assert torch.equal(hvd.broadcast(p.grad, 0, name=f"check.{name}"), p.grad), name

    compression = Compression.fp16 if args.fp16_allreduce else Compression.none
    sparse_opt = hvd.DistributedOptimizer(sparse_opt, sparse_as_dense=False)
    dense_opt = hvd.DistributedOptimizer(dense_opt, named_parameters=dense_named,
                                         compression=compression)
    if hvd.rank() == 0:
        print("sparse optimizer tensors:", sorted(sparse_opt._parameter_names.values()),
              flush=True)

    # each worker owns a shard of the global item popularity
    counts = torch.bincount(data[1], minlength=args.items).double()
    shard = hvd.reducescatter(counts, op=hvd.Sum)
    popular = int(hvd.allgather(shard).argmax())

    try:
        for epoch in range(args.epochs):
            args.epoch = epoch
            loss = train_epoch(model, [sparse_opt, dense_opt], data, args)
            recall = recall_at_1(model, args)
            if hvd.rank() == 0:
                print(f"epoch {epoch} loss {loss:.3f} recall@1 {recall:.3f}", flush=True)
    except HorovodInternalError as err:
        print(f"rank {hvd.rank()}: a collective failed: {err}", flush=True)
        raise

    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"rank {hvd.rank()} final recall {recall:.3f} popular {popular} "
          f"checksum {checksum:.6f}", flush=True)


if __name__ == "__main__":
    main()
