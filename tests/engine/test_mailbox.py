"""The control channel's same-host mailbox (fuse/engine/mailbox.py, csrc/mailbox.h): the same
collectives with it on and off, frames too large for a ring, and a corrupt ring."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from engine_util import run_job


def mixed_collectives() -> dict:
    """Small inline allreduces, asynchronous ones interleaved with one whose request and
    response are larger than a ring takes (they travel over the socket in their turn), a
    broadcast and a barrier; every result checked, and which transport carried them."""
    import fuse
    from fuse.worker import lifecycle

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        total = n * (n + 1) / 2
        ok = True
        for i in range(50):
            out = fuse.allreduce(np.full(3, r + 1.0 + i), name=f"small{i}", op=fuse.Sum)
            ok &= bool((out == total + n * i).all())
        big = np.arange(40_000, dtype=np.float32) + r    # 160 KB inline: over kMailInlineMax
        handles = [fuse.allreduce_async_(np.full(2, r + 1.0), name="before", op=fuse.Sum),
                   fuse.allreduce_async_(big, name="big", op=fuse.Sum),
                   fuse.allreduce_async_(np.full(2, r + 2.0), name="after", op=fuse.Sum)]
        outs = [fuse.synchronize(h) for h in handles]
        ok &= bool((outs[0] == total).all()) and bool((outs[2] == total + n).all())
        ok &= bool(np.array_equal(outs[1], n * np.arange(40_000, dtype=np.float32)
                                  + n * (n - 1) / 2))
        root = fuse.broadcast(np.arange(4.0) * (r + 1), root_rank=n - 1, name="bcast")
        ok &= bool(np.array_equal(root, np.arange(4.0) * n))
        fuse.barrier()
        return {"ok": ok, "mailboxes": lifecycle.engine().mailboxes}
    finally:
        fuse.shutdown()


# A request or response above 64 KiB (a quarter of a ring) is spilled to the socket: the big
# allreduce travels inline (FUSE_INLINE_THRESHOLD above its size, shared memory off).
BIG_INLINE = {"FUSE_INLINE_THRESHOLD": str(4 << 20), "FUSE_SHM_THRESHOLD": "0"}


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("mailbox", ["1", "0"], ids=["mailbox", "sockets"])
def test_collectives_with_the_mailbox_on_and_off(np_, mailbox):
    out = run_job(mixed_collectives, np_, {"FUSE_MAILBOX": mailbox, **BIG_INLINE})
    peers = [np_ - 1] + [1] * (np_ - 1) if mailbox == "1" else [0] * np_
    assert [rank["ok"] for rank in out] == [True] * np_, out
    assert [rank["mailboxes"] for rank in out] == peers, out


def corrupt_ring() -> dict:
    """A head far past anything rank 0 wrote to rank 1 is written into rank 0's ring to rank 1
    (as another process could; here rank 1 does it): the job must fail, naming the mailbox,
    rather than anyone reading or writing where that head points."""
    import fuse
    from fuse.engine.channel import MAILBOX_RING_STRIDE, MAILBOX_HEAD_OFFSET
    from fuse.worker import lifecycle

    fuse.init()
    try:
        r = fuse.rank()
        fuse.allreduce(np.ones(1), name="first")
        if r == 1:
            segment = lifecycle.engine().mailbox_segments[0]
            struct.pack_into("<Q", segment, MAILBOX_RING_STRIDE + MAILBOX_HEAD_OFFSET, 1 << 40)
        try:
            # rank 1 fails at the first; rank 0's may still complete (its answer was ready)
            fuse.allreduce(np.ones(1), name="second")
            fuse.allreduce(np.ones(1), name="third")
        except Exception as err:        # noqa: BLE001 (the message is what is checked)
            return {"error": str(err)}
        return {"error": None}
    finally:
        fuse.shutdown()


def test_a_corrupt_ring_fails_the_job_with_a_clear_error():
    out = run_job(corrupt_ring, 2, {"FUSE_MAILBOX": "1"})
    for rank in out:
        assert "shared-memory mailbox" in (rank["error"] or ""), out


def flood(count: int, elems: int) -> dict:
    """Every rank starts ``count`` asynchronous inline allreduces at once: the requests going up
    and the responses coming down each hold far more than a socket (or a ring) takes, so both
    sides send at the same moment while the other is sending too."""
    import fuse

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        arrays = [np.full(elems, r + i, dtype=np.float32) for i in range(count)]
        handles = [fuse.allreduce_async_(a, name=f"flood.{i}", op=fuse.Sum)
                   for i, a in enumerate(arrays)]
        for h in handles:
            fuse.synchronize(h)
        want = n * (n - 1) // 2
        return {"ok": all(float(a[0]) == want + n * i and float(a[-1]) == want + n * i
                          for i, a in enumerate(arrays))}
    finally:
        fuse.shutdown()


@pytest.mark.parametrize("mailbox", ["1", "0"], ids=["mailbox", "sockets"])
def test_ranks_sending_each_other_more_than_the_channel_holds_do_not_wait_for_each_other(mailbox):
    # 2000 x 16 KB requests up (32 MB) while the responses come down: a sender that waited for
    # its peer to read, without reading its peer's bytes meanwhile, waited for a peer doing the
    # same, until the keep-alive timeout called the other rank lost (a short one here, so that
    # a regression fails fast rather than after FUSE_PEER_TIMEOUT_SECONDS' default)
    out = run_job(flood, 2, {"FUSE_MAILBOX": mailbox, "FUSE_PEER_TIMEOUT_SECONDS": "5"},
                  args=(2000, 4000))
    assert [rank["ok"] for rank in out] == [True, True], out
