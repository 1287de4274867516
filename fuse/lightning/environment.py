"""Lightning's view of a fuse job (ranks, sizes), read from fuse itself.

The processes are started by ``fuserun`` (or ``fuse.run``, a Ray actor, a Spark task), never
by Lightning, so the environment only reports what fuse's ``init()`` worked out: the global
rank and size, the local rank, and the node (cross) rank.  fuse is initialised on the first
question, which Lightning asks while the ``Trainer`` is built.

:class:`FuseEnvironmentBase` holds the behaviour without importing Lightning: ``lightning``
(``lightning.pytorch``) and the older ``pytorch_lightning`` package each have a
``ClusterEnvironment`` class of their own, and each Trainer accepts only its own, so
:mod:`fuse.lightning.bindings` and :mod:`fuse.lightning.pytorch_lightning` join this base to
each package's class.
"""

from __future__ import annotations

import os

import fuse.torch as hvd

__all__ = ["FuseEnvironmentBase", "ensure_initialized"]


def ensure_initialized() -> None:
    """``hvd.init()`` unless the script (or an earlier Trainer) has done it already."""
    if not hvd.is_initialized():
        hvd.init()


def _agree(asked: int, have: int, what: str, fact: str) -> None:
    """Lightning may only set what fuse's launcher already decided, to the same number;
    ``fact`` says what fuse has (``{}`` stands for ``have``)."""
    if asked != have:
        raise ValueError(f"fuse.lightning: Lightning asked for {what}, but {fact.format(have)}")


class FuseEnvironmentBase:
    """Ranks and sizes of the fuse job this process belongs to (joined to a Lightning
    ``ClusterEnvironment``)."""

    @property
    def creates_processes_externally(self) -> bool:
        return True          # fuserun / Ray / Spark start every worker; Lightning starts none

    @property
    def main_address(self) -> str:
        # Lightning asks for it only to set up torch.distributed, which fuse does not use;
        # the job's own rendezvous address is what a curious caller wants to see.
        return os.environ.get("FUSE_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("FUSE_GLOO_RENDEZVOUS_PORT", "0"))

    @staticmethod
    def detect() -> bool:
        """True inside a job a fuse launcher started (it hands every worker its rank)."""
        return "FUSE_RANK" in os.environ or "HOROVOD_RANK" in os.environ

    def world_size(self) -> int:
        ensure_initialized()
        return hvd.size()

    def set_world_size(self, size: int) -> None:
        _agree(size, self.world_size(), f"a world size of {size}",
               "this fuse job has {} workers (the launcher's -np decides it; leave "
               "Trainer(num_nodes=..., devices=...) unset)")

    def global_rank(self) -> int:
        ensure_initialized()
        return hvd.rank()

    def set_global_rank(self, rank: int) -> None:
        _agree(rank, self.global_rank(), f"global rank {rank}",
               "fuse gave this worker rank {}")

    def local_rank(self) -> int:
        ensure_initialized()
        return hvd.local_rank()

    def node_rank(self) -> int:
        ensure_initialized()
        return hvd.cross_rank()
