# cython: language_level=3
# distutils: language = c++
"""The straggler meter: which rank (or host) keeps the others waiting, and what it costs.

The coordinator sees every rank's request for a tensor arrive.  For each tensor that becomes
ready it tells the meter, per rank, how long after the first rank's request that rank's came
(its *lateness*), and, for the rank whose request completed the tensor, how long every other
member had already been waiting for it alone (*wait caused*: its arrival minus the one before),
and for its host how long the ranks of every other host had been waiting (its arrival minus
the last one from another host).  A step has many tensors in flight at once (a gradient
each), so the waits of one rank overlap: only the wall time not already counted for that rank
(host) is added, else a rank a millisecond late on each of 50 tensors would count as 50 ms of
waiting per step (an equal remote worker, whose requests cross the network, was flagged so on
network-namespace hosts).  No per-tensor Python: a few additions on vectors, on the engine thread, without the GIL.

Every ``sample_s`` (1 s) the sums become one sample per rank: mean lateness, the share of the
sample's wall time the job waited for that rank alone, and that wait per step (a step: the
repeats of the first tensor ready in the sample).  The smoothed view is the median over the
last ``history`` samples, so a one-off pause shorter than half the window (a checkpoint, an
evaluation, a rank descheduled for a second) cannot move it.  A host (in a job on several) is
named when its ranks together keep the others waiting and none of them is named on its own.

A rank (host) is *behind by* ``1 / (1 - share)``: how many times faster the job would step
without the time it waits for that rank alone (a rank 3x slower than the others, in a job whose
steps are all compute, costs a share of 2/3: behind by 3).  Above FUSE_STRAGGLER_FACTOR, once
a whole window of samples is in, it is flagged; the coordinator warns (and, with the remove
policy, tells the elastic driver) once when it is flagged and again every minute it stays so.
"""

from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.algorithm cimport sort
from libcpp.string cimport string
from libcpp.vector cimport vector

from fuse.engine.protocol cimport Lag, StragglerView, behind

cdef double REWARN_S = 60.0       # a rank still flagged is named again after this long


cdef double _median(const vector[double]& ring, size_t start, int n) noexcept nogil:
    cdef vector[double] v
    cdef int i
    if n <= 0:
        return 0.0
    v.reserve(n)
    for i in range(n):
        v.push_back(ring[start + i])
    sort(v.begin(), v.end())
    if n % 2:
        return v[n // 2]
    return 0.5 * (v[n // 2 - 1] + v[n // 2])


cdef inline double _uncounted(double start, double end, double* until) noexcept nogil:
    """The part of the wait [start, end] after ``until`` (the end of the waits counted so far
    for the same rank or host), and move ``until`` to ``end``."""
    cdef double counted = end - (start if start > until[0] else until[0])
    if end > until[0]:
        until[0] = end
    return counted if counted > 0.0 else 0.0


cdef class StragglerMeter:

    def __init__(self, int size, bint enabled, double factor, double window_s,
                 double sample_s=1.0):
        self.enabled = enabled and size > 1
        self.size = size
        self.factor = factor
        self.sample_s = sample_s
        self.history = max(1, <int>(window_s / sample_s + 0.5))
        self.late_sum.assign(size, 0.0)
        self.late_n.assign(size, 0)
        self.wait_sum.assign(size, 0.0)
        self.wait_until.assign(size, -1e18)
        self.late_ring.assign(size * self.history, 0.0)
        self.share_ring.assign(size * self.history, 0.0)
        self.cost_ring.assign(size * self.history, 0.0)
        self.late_med.assign(size, 0.0)
        self.share_med.assign(size, 0.0)
        self.cost_med.assign(size, 0.0)
        self.set_hosts(["" for _ in range(size)])
        self.sample_start = -1.0

    def set_hosts(self, names):
        """Every rank's host name, by rank (a host's share is the sum of its ranks')."""
        index = {}
        self.host_of.clear()
        self.host_names.clear()
        self.rank_hosts.clear()
        for name in names:
            b = str(name).encode(errors="replace")
            if b not in index:
                index[b] = len(index)
                self.host_names.push_back(b)
            self.host_of.push_back(index[b])
            self.rank_hosts.push_back(b)
        nh = len(index)
        self.host_wait_sum.assign(nh, 0.0)
        self.host_wait_until.assign(nh, -1e18)
        self.host_share_ring.assign(nh * self.history, 0.0)
        self.host_cost_ring.assign(nh * self.history, 0.0)
        self.host_share_med.assign(nh, 0.0)
        self.host_cost_med.assign(nh, 0.0)
        self.flagged.assign(self.size + nh, 0)
        self.told_at.assign(self.size + nh, -1e18)

    cdef void arrived(self, int rank, double late) noexcept nogil:
        self.late_sum[rank] += late
        self.late_n[rank] += 1

    cdef void ready(self, int last_rank, double waited_alone, double host_waited, double now,
                    const string& key) noexcept nogil:
        """A tensor became ready at ``now`` when ``last_rank``'s request arrived,
        ``waited_alone`` seconds after the one before it and ``host_waited`` after the last one
        from another host.  Calls come in the order of ``now``, so the part of each wait that
        an earlier tensor's wait for the same rank (host) already covered is what lies before
        the end of that one."""
        cdef int h = self.host_of[last_rank]
        self.wait_sum[last_rank] += _uncounted(now - waited_alone, now,
                                               &self.wait_until[last_rank])
        self.host_wait_sum[h] += _uncounted(now - host_waited, now, &self.host_wait_until[h])
        if self.step_key.size() == 0:
            self.step_key = key
        if key == self.step_key:
            self.steps += 1

    cdef bint close_sample(self, double now) noexcept nogil:
        """At least ``sample_s`` into the sample: fold it into the rings and recompute the
        medians and flags.  Returns whether a sample was added (one with a step in it)."""
        cdef double wall
        cdef int r, h, n, slot
        cdef size_t nh = self.host_names.size()
        cdef bint added = False
        if self.sample_start < 0:
            self.sample_start = now
            return False
        wall = now - self.sample_start
        if wall < self.sample_s:
            return False
        if self.steps > 0 and wall > 0:
            slot = self.head
            for r in range(self.size):
                self.late_ring[r * self.history + slot] = (
                    self.late_sum[r] / self.late_n[r] if self.late_n[r] else 0.0)
                self.share_ring[r * self.history + slot] = self.wait_sum[r] / wall
                self.cost_ring[r * self.history + slot] = self.wait_sum[r] / self.steps
            for h in range(<int>nh):
                self.host_share_ring[h * self.history + slot] = self.host_wait_sum[h] / wall
                self.host_cost_ring[h * self.history + slot] = self.host_wait_sum[h] / self.steps
            self.head = (self.head + 1) % self.history
            if self.filled < self.history:
                self.filled += 1
            self.samples += 1
            added = True
            n = self.filled
            for r in range(self.size):
                self.late_med[r] = _median(self.late_ring, r * self.history, n)
                self.share_med[r] = _median(self.share_ring, r * self.history, n)
                self.cost_med[r] = _median(self.cost_ring, r * self.history, n)
                self.flagged[r] = (n >= self.history and behind(self.share_med[r]) > self.factor)
            for h in range(<int>nh):
                self.host_share_med[h] = _median(self.host_share_ring, h * self.history, n)
                self.host_cost_med[h] = _median(self.host_cost_ring, h * self.history, n)
                # a host is named when it has several ranks, together they are behind, and
                # none of them is named on its own (then that rank is the one to act on)
                self.flagged[self.size + h] = (
                    n >= self.history and nh > 1 and self._ranks_on(h) > 1
                    and behind(self.host_share_med[h]) > self.factor
                    and not self._rank_flagged_on(h))
        for r in range(self.size):
            self.late_sum[r] = 0.0
            self.late_n[r] = 0
            self.wait_sum[r] = 0.0
        for h in range(<int>nh):
            self.host_wait_sum[h] = 0.0
        self.steps = 0
        self.step_key.clear()
        self.sample_start = now
        return added

    cdef int _ranks_on(self, int h) noexcept nogil:
        cdef int r, n = 0
        for r in range(self.size):
            if self.host_of[r] == h:
                n += 1
        return n

    cdef bint _rank_flagged_on(self, int h) noexcept nogil:
        cdef int r
        for r in range(self.size):
            if self.host_of[r] == h and self.flagged[r]:
                return True
        return False

    cdef int due_warning(self, double now) noexcept nogil:
        """A flagged rank (index < size) or host (size + its index) not named for a minute,
        now marked as named; -1 when none."""
        cdef size_t i
        for i in range(self.flagged.size()):
            if self.flagged[i] and now - self.told_at[i] >= REWARN_S:
                self.told_at[i] = now
                return <int>i
        return -1

    cdef void view(self, StragglerView* out) noexcept nogil:
        """The smoothed view, as every rank gets it (protocol.frame_stragglers)."""
        cdef Lag rank, host
        cdef int r
        cdef size_t h
        out.filled = self.filled
        out.history = self.history
        out.sample_s = self.sample_s
        out.factor = self.factor
        out.samples = self.samples
        for r in range(self.size):
            rank.host = self.rank_hosts[r]
            rank.lateness = self.late_med[r]
            rank.share = self.share_med[r]
            rank.cost = self.cost_med[r]
            rank.flagged = self.flagged[r] != 0
            out.ranks.push_back(rank)
        for h in range(self.host_names.size()):
            host.host = self.host_names[h]
            host.lateness = 0.0
            host.share = self.host_share_med[h]
            host.cost = self.host_cost_med[h]
            host.flagged = self.flagged[self.size + h] != 0
            out.hosts.push_back(host)

    # ---- for tests and the coordinator's Python side

    def describe(self, int index):
        """(what, name, behind, lateness, cost per step, share) of a rank or host index as
        due_warning returns it."""
        cdef int h
        if index < self.size:
            return ("rank", index, self.rank_hosts[index].decode(errors="replace"),
                    behind(self.share_med[index]), self.late_med[index],
                    self.cost_med[index], self.share_med[index])
        h = index - self.size
        return ("host", -1, self.host_names[h].decode(errors="replace"),
                behind(self.host_share_med[h]), 0.0, self.host_cost_med[h],
                self.host_share_med[h])
