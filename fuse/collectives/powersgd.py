"""PowerSGD gradient compression (Vogels et al., 2019), written once on NumPy arrays.

Each gradient that is worth compressing is seen as a matrix ``M`` of ``n = shape[0]`` rows and
``m = numel / n`` columns (as DDP's ``powerSGD_hook`` reshapes it) and sent as two thin
matrices instead: ``P = M Q`` (n x r) and ``Q = M^T P`` (m x r), with ``M ~ P Q^T``.  One
step, on every rank:

1. ``M += E`` (error feedback: what earlier steps' approximations left out of this rank's
   gradients), then ``P = M Q`` with ``Q`` orthogonalised (warm start: last step's averaged Q;
   the first time, the same random normal matrix on every rank);
2. every ``P`` of the step in one allreduce (sum), then each ``P`` orthogonalised;
3. ``Q = M^T P``, every ``Q`` in one allreduce (average);
4. ``M <- P Q^T`` becomes the gradient, and ``E = (M + E) - P Q^T`` is kept for the next step.

A tensor is compressed when ``(n + m) * r * min_compression_rate < n * m`` (``r = min(n, m,
rank)``): vectors, scalars and small matrices are not, and the caller allreduces them as they
are.  Before ``start_iter`` steps have run, nothing is compressed.  Only float32 tensors are
compressed (one wire dtype for the fused P and Q messages); other dtypes go uncompressed.

The DDP hook keeps the error of its uncompressed tensors too (their local value minus the
average); averaged over ranks that error is zero, so leaving it out changes nothing but
rounding.

:class:`PowerSGD` is the user's object (``Compression.powersgd(rank=4, start_iter=10)``): its
settings and the state that lives across steps (the iteration, every Q, every rank's own
errors, the random generator).  A distributed optimizer drives one step through
:class:`PowerSGDStep`: ``add(key, matrix_view)`` as each gradient is ready (error feedback
and ``P = MQ`` run at once, while backward computes the rest), ``start()`` sends the fused P,
``finish()`` does the rest and writes the approximations into the gradients' own memory.

The passes over the gradients run in fuse.engine.lowrank (csrc/lowrank.h), one row at a
time in cache: per step and compressed gradient, one pass reading the gradient and the kept
``M + E`` and writing the new one (with P computed from it on the way), one reading it for Q
and one writing ``P Q^T`` into the gradient.  Q is kept transposed (r x m: the layout of the
fused Q message too), so that every inner loop runs along a row of M.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fuse.collectives import calls
from fuse.collectives.array_ops import NumpyOps
from fuse.collectives.ops import Average, Sum, op_name
from fuse.engine import lowrank
from fuse.job.process_sets import global_process_set

_NUMPY = NumpyOps()
WIRE_DTYPE = np.float32


def matrix_shape(shape) -> tuple[int, int] | None:
    """(rows, columns) of a gradient of ``shape`` seen as a matrix as DDP does (first dimension
    by the rest), or None for a scalar or an empty tensor."""
    if len(shape) == 0:
        return None
    n = int(shape[0])
    numel = int(np.prod(shape))
    if n == 0 or numel == 0:
        return None
    return n, numel // n


def orthogonalize(matrix: np.ndarray, epsilon: float = 0.0) -> None:
    """Make the columns of ``matrix`` (rows x r, r <= rows) orthonormal, in place (Gram-Schmidt;
    ``epsilon`` keeps an all-zero column from dividing by zero, as DDP's setting of that name)."""
    cols = matrix.shape[1]
    for i in range(cols):
        col = matrix[:, i]
        norm = float(np.sqrt(np.dot(col, col)))
        if norm + epsilon == 0.0:
            col.fill(0.0)
        else:
            col /= norm + epsilon
        if i + 1 < cols:
            rest = matrix[:, i + 1:]
            rest -= np.outer(col, col @ rest)


class StatefulCompressionError(TypeError):
    """A compressor that keeps state across steps was used where there is no step."""


@dataclasses.dataclass
class _Slot:
    """One compressed gradient of a step: its matrix view (once added), rank, and its P and Q:
    views into the fused messages."""

    key: str
    matrix: np.ndarray | None       # M (+ E with error feedback: then the error's buffer)
    rank: int
    p: np.ndarray                   # n x r
    q: np.ndarray                   # Q transposed: r x m
    out: np.ndarray | None = None   # the gradient's memory, where P Q^T goes


class PowerSGD:
    """PowerSGD for a distributed optimizer's gradients (DDP's ``PowerSGDState`` settings).

    Args:
        rank: the approximation's rank (DDP's ``matrix_approximation_rank``).
        start_iter: plain allreduce for this many steps first (``start_powerSGD_iter``).
        min_compression_rate: compress a tensor only when it shrinks more than this.
        use_error_feedback: carry what the approximation left out into the next step.
        warm_start: start each step's power iteration from the last step's Q.
        orthogonalization_epsilon: added to column norms when orthogonalising.
        random_seed: seeds the initial Q (the same on every rank).

    One object per optimizer: it holds that optimizer's state.  It cannot compress a lone
    collective (``hvd.allreduce(..., compression=...)``): it needs the steps before."""

    stateful = True

    def __init__(self, rank: int = 1, start_iter: int = 1000, min_compression_rate: float = 2,
                 use_error_feedback: bool = True, warm_start: bool = True,
                 orthogonalization_epsilon: float = 0.0, random_seed: int = 0):
        if int(rank) < 1:
            raise ValueError(f"PowerSGD rank must be >= 1, got {rank}")
        if int(start_iter) < 0:
            raise ValueError(f"PowerSGD start_iter must be >= 0, got {start_iter}")
        if min_compression_rate <= 0:
            raise ValueError("PowerSGD min_compression_rate must be positive, got "
                             f"{min_compression_rate}")
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.use_error_feedback = bool(use_error_feedback)
        self.warm_start = bool(warm_start)
        self.orthogonalization_epsilon = float(orthogonalization_epsilon)
        self.random_seed = int(random_seed)
        self.iteration = 0
        self.qs: dict[str, np.ndarray] = {}         # Q^T (r x m), the same on every rank
        # this rank's errors, kept as what the last step approximated (M + E) and the
        # approximation (P, Q): E = (M + E) - P Q^T is formed where the next step reads it,
        # a block of rows at a time in cache, instead of in passes over memory of its own
        self.targets: dict[str, np.ndarray] = {}
        self.approximations: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.rng = np.random.RandomState(self.random_seed)
        self.bound_to = None    # the optimizer using this object (one per optimizer)

    def __repr__(self):
        return (f"PowerSGD(rank={self.rank}, start_iter={self.start_iter}, "
                f"min_compression_rate={self.min_compression_rate}, iteration={self.iteration})")

    # ---- the Compressor interface, which a stateful compressor cannot serve

    def compress(self, tensor):
        shape = tuple(getattr(tensor, "shape", ()))
        raise StatefulCompressionError(
            f"Compression.powersgd keeps state across training steps (error feedback, the "
            f"warm-started Q) and works only as DistributedOptimizer(compression=...); it was "
            f"given a single collective's tensor of shape {shape}: use Compression.none, "
            f".fp16 or .bf16 there")

    decompress = compress

    # ---- what is compressed

    def active(self) -> bool:
        """Whether this step compresses (False for the first ``start_iter`` steps)."""
        return self.iteration >= self.start_iter

    def rank_for(self, shape, dtype: str) -> int:
        """The approximation rank for a gradient of ``shape`` and ``dtype`` (its name, as
        "float32"), or 0 when it goes uncompressed (not float32, a vector, or too small for
        ``min_compression_rate``)."""
        if dtype != "float32":
            return 0
        nm = matrix_shape(shape)
        if nm is None:
            return 0
        n, m = nm
        r = min(n, m, self.rank)
        return r if (n + m) * r * self.min_compression_rate < n * m else 0

    def bind(self, owner) -> None:
        """Claim this object for ``owner`` (an optimizer): its state is that optimizer's."""
        if self.bound_to is not None and self.bound_to() is not owner:
            raise ValueError("this Compression.powersgd object already serves another "
                             "optimizer; make one per optimizer")
        import weakref
        self.bound_to = weakref.ref(owner)

    def step(self, entries, process_set=global_process_set, op=Average, name="powersgd"):
        """A new :class:`PowerSGDStep` over ``entries`` (call only when :meth:`active`)."""
        return PowerSGDStep(self, entries, process_set, op, name)

    def end_step(self) -> None:
        """One more step has run (compressed or not)."""
        self.iteration += 1

    # ---- state, for elastic commits and for the ranks joining a job

    @property
    def errors(self) -> dict[str, np.ndarray]:
        """This rank's error feedback for each compressed gradient (new arrays)."""
        out = {}
        for key, target in self.targets.items():
            approx = self.approximations.get(key)
            out[key] = target - approx[0] @ approx[1] if approx is not None else target.copy()
        return out

    def state_dict(self) -> dict:
        """Everything this object carries across steps (copies)."""
        return {"iteration": self.iteration,
                "qs": {k: v.copy() for k, v in self.qs.items()},
                "errors": self.errors,
                "rng": self.rng.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self.qs = {k: np.array(v, dtype=WIRE_DTYPE) for k, v in state["qs"].items()}
        self.targets = {k: np.array(v, dtype=WIRE_DTYPE) for k, v in state["errors"].items()}
        self.approximations = {}
        self.rng.set_state(state["rng"])

    def shared_state(self) -> dict:
        """What every rank must agree on (the iteration, every Q, the generator): rank 0's is
        broadcast when ranks join.  The errors stay each rank's own (a new rank starts with
        none, which is no error at all)."""
        return {"iteration": self.iteration, "qs": self.qs, "rng": self.rng.get_state()}

    def load_shared_state(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self.qs = {k: np.array(v, dtype=WIRE_DTYPE) for k, v in state["qs"].items()}
        self.rng.set_state(state["rng"])
        # an error of a shape the shared Q no longer matches cannot be fed back
        for k in [k for k, t in self.targets.items()
                  if k not in self.qs or t.shape[1] != self.qs[k].shape[1]]:
            del self.targets[k]
            self.approximations.pop(k, None)


class PowerSGDStep:
    """One step's compressed gradients.  Made with every gradient the step will compress
    (``entries``: key, (rows, columns), rank; the same on every rank, in the same order: the
    fused P and Q messages are laid out in that order); then ``add`` each gradient as it is
    ready (error feedback and its P, at once), ``start`` (the fused P allreduce) and ``finish``
    (orthogonalise, Q, the fused Q allreduce, the approximations written back)."""

    def __init__(self, state: PowerSGD, entries, process_set=global_process_set, op=Average,
                 name: str = "powersgd"):
        if op not in (Average, Sum):
            raise ValueError(f"Compression.powersgd reduces with Average or Sum, not "
                             f"{op_name(op)}")
        self.state, self.process_set, self.op, self.name = state, process_set, op, name
        self.p_handle, self.started = None, False
        entries = list(entries)
        p_total = sum(n * r for _, (n, _m), r in entries)
        q_total = sum(m * r for _, (_n, m), r in entries)
        self.p_buffer = np.empty(p_total, dtype=WIRE_DTYPE)
        self.q_buffer = np.empty(q_total, dtype=WIRE_DTYPE)
        self.slots: dict[str, _Slot] = {}
        self.pending = set()
        po = qo = 0
        for key, (n, m), r in entries:
            s = _Slot(key, None, r, self.p_buffer[po:po + n * r].reshape(n, r),
                      self.q_buffer[qo:qo + m * r].reshape(r, m))
            po += n * r
            qo += m * r
            q = state.qs.get(key) if state.warm_start else None
            if q is None or q.shape != s.q.shape:
                # the same draw on every rank: one generator, seeded alike, entries in order;
                # drawn as m x r, DDP's shape of Q
                q = state.rng.standard_normal((m, r)).astype(WIRE_DTYPE).T
            s.q[...] = q
            orthogonalize(s.q.T, state.orthogonalization_epsilon)
            self.slots[key] = s
            self.pending.add(key)

    def add(self, key: str, matrix: np.ndarray) -> bool:
        """Take the gradient ``matrix`` (an n x m float32 view of its own memory, which
        :meth:`finish` overwrites): feed the error back and compute its P.  True once every
        entry has been added."""
        st = self.state
        s = self.slots[key]
        if matrix.shape != (s.p.shape[0], s.q.shape[1]):
            raise ValueError(f"PowerSGD: gradient {key!r} has shape {matrix.shape}, the step "
                             f"expected {(s.p.shape[0], s.q.shape[1])}")
        s.out = matrix
        if st.use_error_feedback:
            target = st.targets.get(key)
            if target is None or target.shape != matrix.shape:
                target = st.targets[key] = matrix.copy()
                st.approximations.pop(key, None)
                lowrank.project(target, s.q, s.p)
            else:
                # E = (M' + E') - P' Q'^T, formed here, plus the new gradient, and its P
                pa, qa = st.approximations.pop(key, (None, None))
                lowrank.feed_back_project(target, matrix, pa, qa, s.q, s.p)
            s.matrix = target
        else:
            s.matrix = matrix
            lowrank.project(matrix, s.q, s.p)
        self.pending.discard(key)
        return not self.pending

    def start(self) -> None:
        """Start the one allreduce of every P (every entry must have been added)."""
        if self.pending:
            raise RuntimeError(f"PowerSGD: gradients {sorted(self.pending)} were not added")
        self.started = True
        if self.p_buffer.size:
            self.p_handle = calls.allreduce_async(
                _NUMPY, self.p_buffer, output=self.p_buffer, name=f"{self.name}.P", op=Sum,
                process_set=self.process_set)

    def finish(self) -> None:
        """Orthogonalise the reduced P's, compute and reduce the Q's (one allreduce), and write
        each approximation ``P Q^T`` into its gradient (keeping the error)."""
        st = self.state
        if not self.started:
            self.start()
        if self.p_handle is not None:
            handle, self.p_handle = self.p_handle, None
            calls.synchronize(handle)
        if not self.slots:
            return
        for s in self.slots.values():
            orthogonalize(s.p, st.orthogonalization_epsilon)
            lowrank.back_project(s.matrix, s.p, s.q)
        handle = calls.allreduce_async(_NUMPY, self.q_buffer, output=self.q_buffer,
                                       name=f"{self.name}.Q", op=self.op,
                                       process_set=self.process_set)
        calls.synchronize(handle)
        for s in self.slots.values():
            lowrank.expand(s.p, s.q, s.out)      # the approximation, into the gradient
            q = s.q.copy()      # never written in place: shared by the two uses
            if st.use_error_feedback:
                # E = (M + E) - P Q^T, formed by the next step's feed_back_project
                st.approximations[s.key] = (s.p.copy(), q)
            if st.warm_start:
                st.qs[s.key] = q

