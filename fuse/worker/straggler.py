"""Slow workers, as every rank sees them: ``straggler_report()``, the warning that names one,
and, under ``FUSE_STRAGGLER_POLICY=remove`` in an elastic job, the notice to the driver.

The coordinator (rank 0) measures (fuse/engine/straggler.pyx) and, once a second, sends every
rank its smoothed view; ``straggler_report()`` decodes the latest one this rank received
(fuse.engine.protocol.decode_stragglers), so it is a local call, not a collective.  When the
meter flags a rank (or host), rank 0 logs a warning naming it, its host and what it costs per
step, and with the remove policy leaves the evidence in the launcher's store
(``elastic/straggler/<generation>/<n>``, see fuse.cluster.elastic_protocol), where the
elastic driver decides whether to take it out.
"""

from __future__ import annotations

import json
import threading
import time

from fuse.engine.protocol import decode_stragglers
from fuse.worker import state

NOTICE_TIMEOUT_S = 5.0


def straggler_report() -> dict:
    """The coordinator's latest view of who keeps the job waiting, on any rank.

    Returns ``{"policy", "factor", "window_s", "samples", "complete", "ranks", "hosts",
    "stragglers"}``: ``ranks`` has one dict per rank (``rank``, ``host``, ``lateness_s``: how
    long after the first rank its requests arrive, ``wait_share``: the share of the job's time
    spent waiting for it alone, ``cost_per_step_s``: that wait per step, ``behind``:
    ``1 / (1 - wait_share)``, ``straggler``: behind by more than ``FUSE_STRAGGLER_FACTOR``),
    ``hosts`` one per host (``host``, ``wait_share`` and ``cost_per_step_s``: the ranks of the
    other hosts waiting for this one's, ``behind``, ``straggler``: its ranks together, none of
    them alone), ``stragglers`` the flagged ranks.  Every value is a median over the
    last ``window_s`` seconds; ``complete`` is False until a whole window is in (nothing is
    flagged before).  ``ranks`` is empty before the first second of collectives, and always
    with ``FUSE_STRAGGLER_POLICY=off``."""
    engine = state.require()
    config = state.config()
    out = {"policy": config.straggler_policy, "factor": config.straggler_factor,
           "window_s": config.straggler_window, "samples": 0, "complete": False,
           "ranks": [], "hosts": [], "stragglers": []}
    body = engine.straggler_frame()
    if body:
        out.update(decode_stragglers(body))
    return out


def describe(what: str, rank: int, host: str, behind_by: float, lateness: float, cost: float,
             share: float, factor: float) -> str:
    """The warning's text: who, where, and what it costs."""
    who = f"rank {rank} (host {host})" if what == "rank" else f"host {host} (its ranks together)"
    return (f"straggler: {who} keeps the job waiting: {cost * 1000:.1f} ms per step "
            f"({share:.0%} of the time; the job would step {behind_by:.2f}x faster without "
            f"it; FUSE_STRAGGLER_FACTOR={factor:g})"
            + (f"; its requests arrive {lateness * 1000:.1f} ms after the first rank's"
               if what == "rank" else ""))


def install(engine, config, log) -> None:
    """Rank 0: what happens when the coordinator flags a straggler."""
    if config.rank != 0 or config.straggler_policy == "off":
        return
    notify = config.straggler_policy == "remove" and config.elastic \
        and config.rendezvous_generation >= 0
    counter = iter(range(1 << 30))

    def on_straggler(what, rank, host, behind_by, lateness, cost, share):
        text = describe(what, rank, host, behind_by, lateness, cost, share,
                        config.straggler_factor)
        log.warning(text + ("; asking the elastic driver to remove it" if notify else ""))
        if notify:
            evidence = {"what": what, "rank": rank, "host": host, "behind": behind_by,
                        "lateness_s": lateness, "cost_per_step_s": cost, "wait_share": share,
                        "factor": config.straggler_factor, "window_s": config.straggler_window,
                        "generation": config.rendezvous_generation, "time": time.time(),
                        "text": text}
            # off the engine thread: the store is a network round trip
            threading.Thread(target=_notify_driver, args=(config, evidence, next(counter), log),
                             name="fuse-straggler-notice", daemon=True).start()

    engine.set_straggler_hook(on_straggler)


def _notify_driver(config, evidence: dict, n: int, log) -> None:
    from fuse.cluster import elastic_protocol as protocol
    from fuse.cluster.store import store_from_config
    try:
        store = store_from_config(config, timeout=NOTICE_TIMEOUT_S, attempts=2)
        if store is not None:
            store.set(protocol.STRAGGLER_KEY.format(g=config.rendezvous_generation, n=n),
                      json.dumps(evidence, sort_keys=True).encode())
    except Exception as err:     # the job goes on; the warning was logged
        log.warning("could not tell the elastic driver about the straggler: %s", err)
