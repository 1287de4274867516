// PowerSGD's passes over a gradient matrix M (n x m, float32, row-major), one row at a time.
//
// P = M Q and Q = M^T P have a rank r of 1 to a few: BLAS's GEMM packs its operands for a
// wide inner dimension and runs these thin products at a few GFLOP/s, several times slower
// than reading M from memory.  Here each row of M is read once and worked on while it is in L1:
// every kernel is one pass over M, bound by memory, not arithmetic.  The small operands are
// kept transposed (Qt: r x m, contiguous rows) so that every inner loop runs along a row of M.
//
// Built for the baseline instruction set and again for AVX2+FMA and AVX-512 (target_clones,
// chosen by the CPU at load time): the same loops, wider vectors.
#pragma once

#include <cstddef>

namespace fuse {
namespace lowrank {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 12
// chosen by the CPU's features (x86-64-v3: AVX2 and FMA; v4: AVX-512), not its model name
#define FUSE_LOWRANK_CLONES \
    __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
// GCC before 12 (the wheels are built with GCC 10) knows no x86-64-v3/v4 clones: one feature a
// clone, still chosen by the CPU's features (the AVX2 clone then does without FMA)
#define FUSE_LOWRANK_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define FUSE_LOWRANK_CLONES
#endif
// the helpers are compiled into each clone, with its instruction set
#define FUSE_LOWRANK_INLINE static inline __attribute__((always_inline))

// p[k] = dot(row, qt[k, :]) for every k < r: four columns of Q at a time, each with its own
// sum (independent chains of additions; one sum at a time waits on each addition's latency),
// and the pragma lets the compiler keep each sum in vector lanes (the order of the additions
// is then the vector's, as BLAS's is its own)
FUSE_LOWRANK_INLINE void dots(const float* __restrict row, const float* __restrict qt,
                        float* __restrict p, std::size_t m, std::size_t r) {
    std::size_t k = 0;
    for (; k + 4 <= r; k += 4) {
        const float* q0 = qt + k * m;
        const float* q1 = q0 + m;
        const float* q2 = q1 + m;
        const float* q3 = q2 + m;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+:s0, s1, s2, s3)
        for (std::size_t j = 0; j < m; ++j) {
            const float x = row[j];
            s0 += x * q0[j];
            s1 += x * q1[j];
            s2 += x * q2[j];
            s3 += x * q3[j];
        }
        p[k] = s0;
        p[k + 1] = s1;
        p[k + 2] = s2;
        p[k + 3] = s3;
    }
    for (; k < r; ++k) {
        const float* q0 = qt + k * m;
        float s0 = 0.0f, s1 = 0.0f;
        std::size_t j = 0;
#pragma omp simd reduction(+:s0)
        for (j = 0; j < m / 2; ++j) s0 += row[j] * q0[j];
#pragma omp simd reduction(+:s1)
        for (j = m / 2; j < m; ++j) s1 += row[j] * q0[j];
        p[k] = s0 + s1;
    }
}

// p[i, k] = sum_j M[i, j] qt[k, j]        (P = M Q)
FUSE_LOWRANK_CLONES
void project(const float* __restrict M, const float* __restrict qt, float* __restrict p,
             std::size_t n, std::size_t m, std::size_t r) {
    for (std::size_t i = 0; i < n; ++i) {
        const float* row = M + i * m;
        dots(row, qt, p + i * r, m, r);
    }
}

// T[i, :] += G[i, :] - sum_k pa[i, k] qta[k, :]  (the error left by last step's approximation
// (pa, qta) of T, plus the new gradient; ra = 0: no approximation), then
// p[i, k] = sum_j T[i, j] qt[k, j]: P of the new T, while its row is still in L1
FUSE_LOWRANK_CLONES
void feed_back_project(float* __restrict T, const float* __restrict G,
                       const float* __restrict pa, const float* __restrict qta, std::size_t ra,
                       const float* __restrict qt, float* __restrict p,
                       std::size_t n, std::size_t m, std::size_t r) {
    for (std::size_t i = 0; i < n; ++i) {
        float* row = T + i * m;
        const float* g = G + i * m;
        if (ra == 0) {
#pragma omp simd
            for (std::size_t j = 0; j < m; ++j) row[j] += g[j];
        } else {
            const float* a = pa + i * ra;
            const float a0 = a[0];
#pragma omp simd
            for (std::size_t j = 0; j < m; ++j) row[j] += g[j] - a0 * qta[j];
            for (std::size_t k = 1; k < ra; ++k) {
                const float ak = a[k];
                const float* qk = qta + k * m;
#pragma omp simd
                for (std::size_t j = 0; j < m; ++j) row[j] -= ak * qk[j];
            }
        }
        dots(row, qt, p + i * r, m, r);
    }
}

// qt[k, :] = sum_i p[i, k] M[i, :]        (Q = M^T P, kept transposed: r rows of m, in cache)
FUSE_LOWRANK_CLONES
void back_project(const float* __restrict M, const float* __restrict p, float* __restrict qt,
                  std::size_t n, std::size_t m, std::size_t r) {
    for (std::size_t x = 0; x < r * m; ++x) qt[x] = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
        const float* row = M + i * m;
        for (std::size_t k = 0; k < r; ++k) {
            const float pk = p[i * r + k];
            float* q = qt + k * m;
#pragma omp simd
            for (std::size_t j = 0; j < m; ++j) q[j] += pk * row[j];
        }
    }
}

// out[i, :] = sum_k p[i, k] qt[k, :]      (P Q^T, written straight into the gradient)
FUSE_LOWRANK_CLONES
void expand(const float* __restrict p, const float* __restrict qt, float* __restrict out,
            std::size_t n, std::size_t m, std::size_t r) {
    for (std::size_t i = 0; i < n; ++i) {
        float* row = out + i * m;
        const float* a = p + i * r;
        const float a0 = a[0];
#pragma omp simd
        for (std::size_t j = 0; j < m; ++j) row[j] = a0 * qt[j];
        for (std::size_t k = 1; k < r; ++k) {
            const float ak = a[k];
            const float* qk = qt + k * m;
#pragma omp simd
            for (std::size_t j = 0; j < m; ++j) row[j] += ak * qk[j];
        }
    }
}

}  // namespace lowrank
}  // namespace fuse
