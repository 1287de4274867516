"""Worker side of test_powersgd.py: DistributedOptimizer with Compression.powersgd on real
workers, checked against an independent NumPy re-computation of the algorithm."""

from __future__ import annotations

import numpy as np
import torch

import fuse.torch as hvd


class Net(torch.nn.Module):
    """A conv and two linear layers: three compressed weights (16x72, 64x32, 10x64 at rank 2)
    and, uncompressed, the biases and one 4x3 weight too small to pay."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3)
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 10)
        self.tiny = torch.nn.Linear(3, 4)

    def forward(self, x, z):
        h = self.conv(x).mean(dim=(2, 3))                       # (B, 16)
        h = torch.cat([h, h], dim=1)                            # (B, 32)
        out = self.fc2(torch.tanh(self.fc1(h)))
        return out.sum() + self.tiny(z).pow(2).sum()


def _orthonormal(a: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning ``a``'s (QR; signs differ from Gram-Schmidt's, which
    cancels in P Q^T)."""
    q, _ = np.linalg.qr(a.astype(np.float64))
    return q


class ReferencePowerSGD:
    """The algorithm re-computed in float64 on every rank's gradients at once."""

    def __init__(self, shapes: dict, rank: int, start: int, seed: int = 0):
        self.rank, self.start, self.it = rank, start, 0
        self.rng = np.random.RandomState(seed)
        self.shapes = shapes          # name -> (n, m, r) of the compressed ones, in order
        self.qs: dict = {}
        self.errors: dict = {}        # (rank, name) -> error

    def step(self, grads: list[dict]) -> dict:
        """``grads``: every rank's {name: gradient}; returns the averaged result."""
        out = {}
        size = len(grads)
        for name in grads[0]:
            if self.it < self.start or name not in self.shapes:
                out[name] = sum(g[name].astype(np.float64) for g in grads) / size
                continue
            n, m, r = self.shapes[name]
            if name not in self.qs:
                self.qs[name] = self.rng.standard_normal((m, r)).astype(np.float32)
            q = _orthonormal(self.qs[name])
            mats = []
            for k, g in enumerate(grads):
                mat = g[name].reshape(n, m).astype(np.float64)
                mat = mat + self.errors.get((k, name), 0.0)
                mats.append(mat)
            p = _orthonormal(sum(mat @ q for mat in mats))
            q = sum(mat.T @ p for mat in mats) / size
            approx = p @ q.T
            for k, mat in enumerate(mats):
                self.errors[(k, name)] = mat - approx
            self.qs[name] = q
            out[name] = approx.reshape(grads[0][name].shape)
        self.it += 1
        return out


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(4, 8, 6, 6, generator=g), torch.randn(4, 3, generator=g)


def one_step_against_numpy():
    """Five steps (two plain, three compressed) of PowerSGD at rank 2: every averaged gradient
    the optimizer hands to SGD against the NumPy re-computation on the gathered raw gradients."""
    r = hvd.rank()
    torch.manual_seed(0)
    model = Net()
    raw = Net()                         # the same weights, no hooks: the raw local gradients
    raw.load_state_dict(model.state_dict())
    psgd = hvd.Compression.powersgd(rank=2, start_iter=2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(),
                                   compression=psgd)
    names = [n for n, _ in model.named_parameters()]
    compressed = {}
    for n, p in model.named_parameters():
        rows = p.shape[0]
        m = p.numel() // rows
        rk = min(rows, m, 2)
        if p.dim() > 1 and (rows + m) * rk * 2 < rows * m:
            compressed["allreduce." + n] = (rows, m, rk)
    # the draw order of the initial Q's is the fused message's: the parameters' order
    ref = ReferencePowerSGD({k[len("allreduce."):]: v for k, v in compressed.items()}, 2, 2)
    worst = {"plain": 0.0, "compressed": 0.0, "uncompressed_in_compressed_step": 0.0}
    for step in range(5):
        x, z = _batch(step, r)
        opt.zero_grad()
        raw.zero_grad()
        model(x, z).backward()
        raw(x, z).backward()
        mine = {n: p.grad.detach().numpy().copy() for n, p in raw.named_parameters()}
        everyone = hvd.allgather_object(mine, name=f"raw{step}")
        opt.synchronize()
        expect = ref.step(everyone)
        for n, p in model.named_parameters():
            got = p.grad.detach().numpy().astype(np.float64)
            scale = max(np.abs(expect[n]).max(), 1e-6)
            diff = float(np.abs(got - expect[n]).max() / scale)
            kind = ("plain" if step < 2 else "compressed" if n in ref.shapes
                    else "uncompressed_in_compressed_step")
            worst[kind] = max(worst[kind], diff)
        with opt.skip_synchronize():
            opt.step()
        raw.load_state_dict(model.state_dict())
    # the step really compressed: its approximation is not the plain average
    plain = {n: sum(g[n] for g in everyone) / len(everyone) for n in everyone[0]}
    away = max(float(np.abs(model_grad - plain[n]).max())
               for n, model_grad in ((n, p.grad.numpy()) for n, p in model.named_parameters())
               if n in ref.shapes)
    # what the implementation compressed: the gradients it keeps a Q for (warm start), by name,
    # with that Q's shape (rank x columns); not this test's own copy of the size rule above
    chosen = {k[len("allreduce."):]: list(q.shape) for k, q in psgd.qs.items()}
    return {"worst": worst, "compressed": chosen, "names": names,
            "iteration": psgd.iteration, "away_from_plain": away}


def error_feedback_sum(steps: int = 200):
    """One 16x24 weight whose gradient on each rank is a fixed full-rank random matrix plus
    per-step noise, compressed at rank 2 from the first step, with and without error feedback:
    the sum of what the optimizer applied against the sum of the true averages."""
    r = hvd.rank()
    out = {}
    for use_error_feedback in (True, False):
        w = torch.nn.Parameter(torch.zeros(16, 24))
        psgd = hvd.Compression.powersgd(rank=2, start_iter=0,
                                        use_error_feedback=use_error_feedback)
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                       named_parameters=[("w", w)], compression=psgd)
        base = np.random.RandomState(10 + r).standard_normal((16, 24)).astype(np.float32)
        applied = np.zeros((16, 24))
        true = np.zeros((16, 24))
        for step in range(steps):
            g = base + 0.1 * np.random.RandomState(1000 * step + r).standard_normal((16, 24))
            g = g.astype(np.float32)
            opt.zero_grad()
            (w * torch.from_numpy(g)).sum().backward()
            opt.synchronize()
            applied += w.grad.numpy()
            true += sum(hvd.allgather_object(g, name=f"g{step}")) / hvd.size()
            with opt.skip_synchronize():
                opt.step()
        errors = hvd.allgather_object(psgd.errors.get("allreduce.w", np.zeros((16, 24))),
                                      name="errors")
        mean_error = sum(errors) / len(errors)
        label = "with" if use_error_feedback else "without"
        out[label] = float(np.abs(applied - true).max() / np.abs(true).max())
        # sum(applied) = sum(true averages) - mean over ranks of the last error, to rounding
        out[label + "_identity"] = float(np.abs(applied - (true - mean_error)).max()
                                         / np.abs(true).max())
        opt.remove_hooks()
    return out


def _blobs(n: int, seed: int, centers: np.ndarray):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, len(centers), n)
    x = centers[y] + 1.6 * rng.standard_normal((n, centers.shape[1]))
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def train_accuracy(steps: int = 150):
    """A 3-layer MLP on 10 Gaussian blobs in 48 dimensions, trained on 2 workers, plainly and
    with PowerSGD (rank 4 from step 10); the held-out accuracy of each."""
    r, size = hvd.rank(), hvd.size()
    centers = np.random.RandomState(0).standard_normal((10, 48))
    x_train, y_train = _blobs(4000, 1, centers)
    x_test, y_test = _blobs(2000, 2, centers)
    out = {}
    for label, compression in (("plain", hvd.Compression.none),
                               ("powersgd", hvd.Compression.powersgd(rank=4, start_iter=10))):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(48, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05,
                                                       momentum=0.9),
                                       named_parameters=model.named_parameters(),
                                       compression=compression)
        g = torch.Generator().manual_seed(5)
        for step in range(steps):
            idx = torch.randint(0, len(x_train), (32 * size,), generator=g)[r::size]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
            opt.step()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        out[label] = acc
        out[label + "_weights_equal_across_ranks"] = all(
            torch.equal(p, q) for p, q in zip(model.parameters(), [
                torch.from_numpy(a) for a in hvd.broadcast_object(
                    [p.detach().numpy() for p in model.parameters()], 0, name=f"w.{label}")]))
    return out


def misuse():
    """The errors a PowerSGD object gives where it cannot work."""
    out = {}
    psgd = hvd.Compression.powersgd(rank=4, start_iter=10)
    for label, call in (
            ("allreduce", lambda: hvd.allreduce(torch.ones(4, 4), name="t",
                                                compression=psgd)),
            ("class", lambda: hvd.DistributedOptimizer(
                torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1),
                compression=hvd.Compression.powersgd)),
            ("op", lambda: hvd.DistributedOptimizer(
                torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1),
                compression=hvd.Compression.powersgd(), op=hvd.Max)),
            ("rank", lambda: hvd.Compression.powersgd(rank=0))):
        try:
            call()
            out[label] = None
        except Exception as err:         # the message is what the test checks
            out[label] = f"{type(err).__name__}: {err}"
    shared = hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(2))],
                                                      lr=1), compression=psgd)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1),
                                 compression=psgd)
        out["shared"] = None
    except Exception as err:
        out["shared"] = f"{type(err).__name__}: {err}"
    del shared
    return out


def all_checks():
    """Every check above in one job (each job's start costs seconds)."""
    hvd.init()
    out = {"numpy": one_step_against_numpy(), "error_feedback": error_feedback_sum(),
           "accuracy": train_accuracy(), "misuse": misuse()}
    hvd.shutdown()
    return out
