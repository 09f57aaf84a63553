// numaplace benchmarks: a bandwidth-bound DGEMV kernel and the read-bandwidth probe it is measured against.
//
// Portable C++17: no intrinsics, no vector extensions, no pragmas, no -ffast-math.
//
// Why not the naive loop: `y[i] += A[i*n+j] * x[j]` is one floating-point add chain per row. Without
// -ffast-math the compiler may not reassociate it, so each add waits for the previous one and the loop
// runs at the add latency, about half the memory read bandwidth (PERF.md).
//
// Design: each row is summed into 16 independent partial sums held in four local `double[4]` arrays.
// Every update is written as its own loop of exactly four iterations over contiguous elements,
// `c[l] += a[j+l] * x[j+l]`, with no dependence between the four arrays. That shape is what GCC (>= 12)
// vectorises by construction at every level that matters: at -O2 the 4-iteration loops are completely
// unrolled and basic-block SLP turns them into vector operations; at -O3 the loop vectorizer
// recognises the 16 reductions as one SLP group over contiguous loads. With the x86-64 baseline (SSE2)
// that is 8 independent 2-wide add chains, with -mavx2 (or -march=native) 4 independent 4-wide FMA chains:
// enough to hide the add latency, so the loop is limited by reading A and nothing else.
//
// Deliberately one row at a time. Processing 2 or 4 rows together (sharing the loads of x) is the
// textbook choice, but GCC 12 at -O3 vectorises such multi-row accumulator loops across rows with
// transposing shuffles and the result is slower than the naive loop (measured: 1.8-2.9 G multiply-adds/s
// against 7-9 for this layout, in cache). x is re-read per row from L1/L2 (n = 20000 doubles = 160 KB
// fits L2), which costs no memory bandwidth. read_sum uses the same layout.
//
// Reduction order (the only difference from the naive loop, which adds j = 0, 1, ..., n-1 in order):
//   * Let m = n - n % 16. Lane l in [0, 16) sums A[i][j] * x[j] for j = l, l+16, l+32, ... < m, in
//     increasing j, starting from +0.0.
//   * The 16 lanes are combined by a fixed halving tree: s_l += s_{l+8} (l < 8), then s_l += s_{l+4}
//     (l < 4), then s_l += s_{l+2} (l < 2), then s_0 + s_1.
//   * The column tail j = m, ..., n-1 is added to that value one term at a time, in increasing j.
//   This order is the same for every row and independent of the row range a thread gets, of the alignment
//   of A and of the instruction set. Whether a*x + s is contracted to one FMA depends on the flags (GCC
//   contracts by default when FMA is enabled, e.g. -march=native on x86-64-v3 or later). Results thus
//   differ from the naive loop by rounding only; dgemv_check states the bound.
#ifndef NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED
#define NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED

#include <cmath>
#include <cstddef>
#include <limits>

namespace numaplace::bench {

namespace detail {

/// Independent partial sums per row (and in read_sum): four groups of four lanes.
inline constexpr std::size_t kernel_lanes = 16;

/// \effects c[l] += a[l] * x[l] for l in [0, 4). One group of four lanes, kept a separate 4-iteration
/// loop on purpose (see the top of this file).
inline void madd4(double (&c)[4], const double* a, const double* x) noexcept {
    for (std::size_t l = 0; l != 4; ++l) {
        c[l] += a[l] * x[l];
    }
}

/// \effects c[l] += a[l] for l in [0, 4).
inline void add4(double (&c)[4], const double* a) noexcept {
    for (std::size_t l = 0; l != 4; ++l) {
        c[l] += a[l];
    }
}

/// \returns the 16 lanes c0 | c1 | c2 | c3 (lane 4k+l is ck[l]) combined by the halving tree described at
/// the top of this file.
inline double combine16(double (&c0)[4], double (&c1)[4], double (&c2)[4], double (&c3)[4]) noexcept {
    for (std::size_t l = 0; l != 4; ++l) { // s_l += s_{l+8}
        c0[l] += c2[l];
        c1[l] += c3[l];
    }
    for (std::size_t l = 0; l != 4; ++l) { // s_l += s_{l+4}
        c0[l] += c1[l];
    }
    return (c0[0] + c0[2]) + (c0[1] + c0[3]); // s_l += s_{l+2}; s_0 + s_1
}

/// \returns sum over j in [0, n) of a[j] * x[j], in the order described at the top of this file.
inline double dot(const double* a, const double* x, std::size_t n) noexcept {
    const std::size_t m = n - n % kernel_lanes;
    double c0[4] = {};
    double c1[4] = {};
    double c2[4] = {};
    double c3[4] = {};
    for (std::size_t j = 0; j != m; j += kernel_lanes) {
        madd4(c0, a + j, x + j);
        madd4(c1, a + j + 4, x + j + 4);
        madd4(c2, a + j + 8, x + j + 8);
        madd4(c3, a + j + 12, x + j + 12);
    }
    double s = combine16(c0, c1, c2, c3);
    for (std::size_t j = m; j != n; ++j) {
        s += a[j] * x[j];
    }
    return s;
}

} // namespace detail

/// \effects y[i] = sum over j in [0, n) of A[i*lda + j] * x[j], for every i in [row_begin, row_end).
/// Writes only y[row_begin .. row_end); reads each of those rows of A once.
/// \requires lda >= n; A, x, y valid for those accesses; y does not overlap A or x.
/// The summation order is the one described at the top of this file.
inline void dgemv_rows(const double* A, std::size_t lda, const double* x, double* y,
                       std::size_t row_begin, std::size_t row_end, std::size_t n) noexcept {
    for (std::size_t i = row_begin; i < row_end; ++i) {
        y[i] = detail::dot(A + i * lda, x, n);
    }
}

/// \returns the sum of p[0 .. count), read once with 16 independent partial sums (same lanes, tree and
/// tail order as dgemv_rows). The read-bandwidth probe: its speed is that of reading
/// `count * sizeof(double)` bytes and nothing else, so DGEMV can be reported as a fraction of it.
inline double read_sum(const double* p, std::size_t count) noexcept {
    constexpr std::size_t L = detail::kernel_lanes;
    const std::size_t m = count - count % L;
    double c0[4] = {};
    double c1[4] = {};
    double c2[4] = {};
    double c3[4] = {};
    for (std::size_t k = 0; k != m; k += L) {
        detail::add4(c0, p + k);
        detail::add4(c1, p + k + 4);
        detail::add4(c2, p + k + 8);
        detail::add4(c3, p + k + 12);
    }
    double s = detail::combine16(c0, c1, c2, c3);
    for (std::size_t k = m; k != count; ++k) {
        s += p[k];
    }
    return s;
}

/// \effects the naive loop: y[i] = A[i*lda+0]*x[0] + A[i*lda+1]*x[1] + ... in increasing j, for
/// i in [row_begin, row_end). For checking only: one add chain per row, latency bound.
inline void dgemv_reference(const double* A, std::size_t lda, const double* x, double* y,
                            std::size_t row_begin, std::size_t row_end, std::size_t n) noexcept {
    for (std::size_t i = row_begin; i < row_end; ++i) {
        const double* a = A + i * lda;
        double s = 0.0;
        for (std::size_t j = 0; j != n; ++j) {
            s += a[j] * x[j];
        }
        y[i] = s;
    }
}

/// \returns true iff for every i in [row_begin, row_end)
///     |y[i] - ref_i| <= rel_tol * sum_j |A[i*lda+j] * x[j]|,
/// where ref_i is the naive in-order sum (dgemv_reference), recomputed here; y[i] equal to ref_i (also
/// both infinite of one sign, or both NaN) always passes. `y` may come from any reordered summation,
/// e.g. dgemv_rows or cblas_dgemv.
///
/// Why this tolerance: any summation order of n products, with or without FMA, has a forward error of at
/// most gamma_n * sum_j |a_ij x_j|, gamma_n = n u / (1 - n u), u = 2^-53 (Higham, Accuracy and Stability of
/// Numerical Algorithms, 2nd ed., section 3.1). Two orders therefore differ by at most 2 gamma_n times that
/// sum. The bound is relative to sum |a x|, not to |y|: with cancellation y can be tiny or zero while both
/// results are within the bound, so a tolerance relative to |y| would reject correct results. The default
/// (rel_tol <= 0) is that worst case, 2 gamma_n: rigorous, about 4.4e-12 at n = 20000, and still far below
/// what an indexing or remainder bug produces (a missing or doubled term is an error of order 1/n of the
/// sum, 5e-5 at n = 20000). In practice reassociation errors are about sqrt(n) u, much smaller.
/// \param max_err if not null, receives max over rows of |y - ref| / sum |a x| (rows with sum 0 skipped).
inline bool dgemv_check(const double* A, std::size_t lda, const double* x, const double* y,
                        std::size_t row_begin, std::size_t row_end, std::size_t n,
                        double rel_tol = 0.0, double* max_err = nullptr) noexcept {
    if (rel_tol <= 0.0) {
        const double nu = static_cast<double>(n) * (std::numeric_limits<double>::epsilon() / 2);
        rel_tol = nu < 0.5 ? 2 * nu / (1 - nu) : std::numeric_limits<double>::infinity();
    }
    bool ok = true;
    double worst = 0.0;
    for (std::size_t i = row_begin; i < row_end; ++i) {
        const double* a = A + i * lda;
        double ref = 0.0;
        double mag = 0.0;
        for (std::size_t j = 0; j != n; ++j) {
            ref += a[j] * x[j];
            mag += std::fabs(a[j] * x[j]);
        }
        const bool same = y[i] == ref || (std::isnan(y[i]) && std::isnan(ref));
        const double err = same ? 0.0 : std::fabs(y[i] - ref);
        if (!same && !(err <= rel_tol * mag)) { // NaN err (or NaN on one side only) fails
            ok = false;
        }
        if (mag > 0.0 && err / mag > worst) {
            worst = err / mag;
        }
    }
    if (max_err != nullptr) {
        *max_err = worst;
    }
    return ok;
}

} // namespace numaplace::bench

#endif // NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED
