"""PowerSGD's passes over a gradient matrix, one row at a time in cache (csrc/lowrank.h says
why not BLAS).  Every array is float32 and C-contiguous; ``qt`` is Q transposed (r x m).  The
GIL is released: the engine's thread keeps reducing meanwhile."""

cdef extern from "lowrank.h" namespace "fuse::lowrank" nogil:
    void c_project "fuse::lowrank::project"(const float* M, const float* qt, float* p,
                                             size_t n, size_t m, size_t r)
    void c_feed_back_project "fuse::lowrank::feed_back_project"(
        float* T, const float* G, const float* pa, const float* qta, size_t ra,
        const float* qt, float* p, size_t n, size_t m, size_t r)
    void c_back_project "fuse::lowrank::back_project"(const float* M, const float* p,
                                                       float* qt, size_t n, size_t m, size_t r)
    void c_expand "fuse::lowrank::expand"(const float* p, const float* qt, float* out,
                                           size_t n, size_t m, size_t r)


cdef _check(str what, tuple got, tuple want):
    if got != want:
        raise ValueError(f"lowrank: {what} has shape {got}, expected {want}")


def project(const float[:, ::1] M, const float[:, ::1] qt, float[:, ::1] p):
    """``p = M @ qt.T``."""
    cdef size_t n = M.shape[0], m = M.shape[1], r = qt.shape[0]
    _check("qt", (qt.shape[0], qt.shape[1]), (r, m))
    _check("p", (p.shape[0], p.shape[1]), (n, r))
    with nogil:
        c_project(&M[0, 0], &qt[0, 0], &p[0, 0], n, m, r)


def feed_back_project(float[:, ::1] T, const float[:, ::1] G, pa, qta,
                      const float[:, ::1] qt, float[:, ::1] p):
    """``T += G - pa @ qta`` (no subtraction when ``pa`` is None), then ``p = T @ qt.T``."""
    cdef size_t n = T.shape[0], m = T.shape[1], r = qt.shape[0], ra = 0
    cdef const float[:, ::1] pa_v
    cdef const float[:, ::1] qta_v
    cdef const float* pa_ptr = NULL
    cdef const float* qta_ptr = NULL
    _check("G", (G.shape[0], G.shape[1]), (n, m))
    _check("qt", (qt.shape[0], qt.shape[1]), (r, m))
    _check("p", (p.shape[0], p.shape[1]), (n, r))
    if pa is not None:
        pa_v = pa
        qta_v = qta
        ra = pa_v.shape[1]
        _check("pa", (pa_v.shape[0], pa_v.shape[1]), (n, ra))
        _check("qta", (qta_v.shape[0], qta_v.shape[1]), (ra, m))
        if ra:
            pa_ptr = &pa_v[0, 0]
            qta_ptr = &qta_v[0, 0]
    with nogil:
        c_feed_back_project(&T[0, 0], &G[0, 0], pa_ptr, qta_ptr, ra, &qt[0, 0], &p[0, 0],
                            n, m, r)


def back_project(const float[:, ::1] M, const float[:, ::1] p, float[:, ::1] qt):
    """``qt = (M.T @ p).T``."""
    cdef size_t n = M.shape[0], m = M.shape[1], r = p.shape[1]
    _check("p", (p.shape[0], p.shape[1]), (n, r))
    _check("qt", (qt.shape[0], qt.shape[1]), (r, m))
    with nogil:
        c_back_project(&M[0, 0], &p[0, 0], &qt[0, 0], n, m, r)


def expand(const float[:, ::1] p, const float[:, ::1] qt, float[:, ::1] out):
    """``out = p @ qt``."""
    cdef size_t n = out.shape[0], m = out.shape[1], r = p.shape[1]
    _check("p", (p.shape[0], p.shape[1]), (n, r))
    _check("qt", (qt.shape[0], qt.shape[1]), (r, m))
    with nogil:
        c_expand(&p[0, 0], &qt[0, 0], &out[0, 0], n, m, r)
