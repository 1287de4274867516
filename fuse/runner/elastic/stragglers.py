"""The elastic driver's straggler policy: whether to take out a worker (or host) that rank 0
reported as keeping the job waiting (``FUSE_STRAGGLER_POLICY=remove``; fuse.worker.straggler).

* A reported rank loses its slot for the rest of the job.  Local ranks stay contiguous, so a
  host keeps its slots below the removed one: removing slot ``k`` of a host also lets that
  host's slots above ``k`` go (those workers leave too; the decision names them).
* A host reported again (its second offence), or a host whose ranks together keep the job
  waiting, is blacklisted as a failed host is: for good, or with ``--blacklist-cooldown-range``
  for its cool-down, after which it comes back whole.
* Never below ``--min-np`` workers, and at most one removal per ``FUSE_STRAGGLER_WINDOW``
  seconds (the new generation needs a whole window of evidence anyway).

Every decision, taken or not, is returned with its text (the evidence included) for the
driver's log.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

REPEATED_OFFENCES = 2       # reports against one host before the host itself goes


@dataclasses.dataclass
class Decision:
    remove: bool
    text: str               # for the log: what was decided, and the evidence
    reason: str = ""        # the new generation's reason, when removing


class StragglerPolicy:
    def __init__(self, window_s: float):
        self.window_s = window_s
        self.caps: dict[str, int] = {}          # host -> slots it may still offer
        self.offences: dict[str, int] = {}      # host -> reports acted on
        self.last_removal: float | None = None
        self.removals: list[dict] = []          # what was removed, with its evidence

    def cap(self, host: str, slots: int) -> int:
        """The slots ``host`` may offer, given the slots taken from it."""
        return min(slots, self.caps.get(host, slots))

    def decide(self, evidence: dict, plan: dict, live: dict, now: float, min_np: int,
               plan_size: Callable[[], int], blacklist) -> Decision:
        """``plan``: worker id -> Slot of the current generation; ``live``: its running
        workers; ``plan_size()``: workers the next plan would have under the caps now."""
        said = evidence.get("text") or json_summary(evidence)
        if self.last_removal is not None and now - self.last_removal < self.window_s:
            return Decision(False, f"straggler not removed: one was removed "
                                   f"{now - self.last_removal:.0f} s ago, and at most one is "
                                   f"per {self.window_s:g} s (FUSE_STRAGGLER_WINDOW); {said}")
        host = str(evidence.get("host", ""))
        leaving: list[str] = []
        if evidence.get("what") == "rank":
            found = [(wid, s) for wid, s in plan.items()
                     if s.rank == evidence.get("rank") and wid in live]
            if not found:
                return Decision(False, f"straggler not removed: rank {evidence.get('rank')} is "
                                       f"no longer in the job; {said}")
            wid, slot = found[0]
            host = slot.hostname
            whole_host = self.offences.get(host, 0) + 1 >= REPEATED_OFFENCES
            leaving = sorted((w for w, s in plan.items()
                              if s.hostname == host and s.local_rank >= slot.local_rank),
                             key=lambda w: plan[w].local_rank)
            target = f"worker {wid} (rank {slot.rank}, host {host})"
        else:
            whole_host = True
            target = f"host {host}"
        saved = dict(self.caps)
        self.caps[host] = 0 if whole_host else min(self.caps.get(host, 1 << 30),
                                                    plan[leaving[0]].local_rank)
        remaining = plan_size()
        if remaining < min_np:
            self.caps = saved
            return Decision(False, f"straggler not removed: without {target} the job would "
                                   f"have {remaining} workers, fewer than --min-np {min_np}; "
                                   f"{said}")
        self.offences[host] = self.offences.get(host, 0) + 1
        self.last_removal = now
        if whole_host:
            # blacklisted like a failed host: when its cool-down ends it comes back whole
            self.caps = saved
            self.caps.pop(host, None)
            seconds = blacklist.add(host)
            how = (f"host {host} is blacklisted"
                   + ("" if seconds == float("inf") else f" for {seconds:.0f} s")
                   + (f" (its offence {self.offences[host]})" if evidence.get("what") == "rank"
                      else ""))
        else:
            how = "its slot is left out for the rest of the job"
            if len(leaving) > 1:
                how += (f"; {', '.join(leaving[1:])} on the same host leave with it (local "
                        "ranks stay contiguous)")
        self.removals.append({"target": target, "host": host, "whole_host": whole_host,
                              "remaining": remaining, "evidence": evidence})
        return Decision(True, f"removing straggler {target}: {how}; {remaining} workers "
                              f"remain; evidence: {said}",
                        reason=f"straggler {target} removed")


def json_summary(evidence: dict) -> str:
    keys = ("what", "rank", "host", "behind", "cost_per_step_s", "wait_share")
    return ", ".join(f"{k}={evidence[k]}" for k in keys if k in evidence)
