// numaplace benchmarks: a bandwidth-bound DGEMV kernel and the read-bandwidth probe it is measured against.
//
// Portable C++17: no intrinsics, no vector extensions, no pragmas or attributes, no -ffast-math.
//
// Why not the naive loop: `y[i] += A[i*n+j] * x[j]` is one floating-point add chain per row. Without
// -ffast-math the compiler may not reassociate it, so every add waits for the previous one and the loop
// runs at the add latency, about half the memory read bandwidth (PERF.md).
//
// Design, from what was measured on this machine kind (Sapphire Rapids VM, GCC 12; numbers in the report
// that came with this file):
//  1. Independent accumulators. Each row is summed into 16 partial sums held in four local `double[4]`.
//     Every update is its own loop of exactly four iterations over contiguous elements,
//     `c[l] += a[j+l] * x[j+l]` (madd4), with no dependence between the four arrays: with one row in the
//     loop, GCC vectorises that by construction at -O2 (the 4-iteration loops are unrolled, basic-block
//     SLP makes vectors of them) and at -O3 (the loop vectorizer takes the 16 sums as one SLP reduction
//     group over contiguous loads); 2-wide with the x86-64 baseline (8 independent add chains), 4-wide FMA
//     with -march=native (4 chains). Enough to hide the add latency.
//  2. Several rows at once, interleaved by column chunks. One core streaming one row at a time does not
//     reach the read bandwidth: with one stream in flight the hardware prefetchers keep too few misses
//     outstanding (a single-stream sum reads ~20% slower than four interleaved streams on one core here).
//     So dgemv_rows takes rows_per_block rows together and walks them chunk_columns columns at a time:
//     chunk 0 of rows i..i+3, then chunk 1 of rows i..i+3, ... Four streams are in flight, and the chunk of
//     x (1 KiB) is read from L1 by all four rows instead of from L2 by each.
//     The interleave is by chunks, not element by element, on purpose: a loop that updates the
//     accumulators of several rows (or of several distant segments) in one body is vectorised by GCC 12
//     at -O3 as an in-order reduction across iterations with transposing shuffles, slower than the naive
//     loop (1.8-2.9 G multiply-adds/s in cache, against 6-10 for this form). Each chunk here is the
//     single-stream loop of point 1, resumed from the row's saved accumulators.
//
// Reduction order (the only difference from the naive loop, which adds j = 0, 1, ..., n-1 in order):
//   * Let m = n - n % 16. Lane l in [0, 16) sums A[i][j] * x[j] for j = l, l+16, l+32, ... < m, in
//     increasing j, starting from +0.0. (Chunking does not change this: chunks are multiples of 16 columns
//     and each lane carries on where the previous chunk left it.)
//   * The 16 lanes are combined by a fixed halving tree: s_l += s_{l+8} (l < 8), then s_l += s_{l+4}
//     (l < 4), then s_l += s_{l+2} (l < 2), then s_0 + s_1.
//   * The column tail j = m, ..., n-1 is added to that value one term at a time, in increasing j.
//   The order is the same for every row whatever the block, the chunk length, the row range a thread gets,
//   the alignment of A and the instruction set, so results are reproducible bit for bit across thread
//   counts. Whether a*x + s is contracted to one FMA depends on the flags (GCC contracts by default in
//   GNU mode when FMA is enabled, e.g. -march=native on x86-64-v3 or later). Results thus differ from the
//   naive loop by rounding only; dgemv_check states the bound.
#ifndef NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED
#define NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED

#include <cmath>
#include <cstddef>
#include <limits>

namespace numaplace::bench {

namespace detail {

/// Independent partial sums per row (and per stream in read_sum): four groups of four lanes.
inline constexpr std::size_t lanes = 16;
/// Rows of A streamed together by dgemv_rows.
inline constexpr std::size_t rows_per_block = 4;
/// Columns per chunk in dgemv_rows (a multiple of `lanes`): 1 KiB of x, shared by the rows of a block.
inline constexpr std::size_t chunk_columns = 128;
/// read_sum reads blocks of `probe_streams` consecutive segments of `probe_segment` doubles each,
/// the segments interleaved by chunks of `chunk_columns`, like dgemv_rows reads a block of rows.
inline constexpr std::size_t probe_streams = 4;
inline constexpr std::size_t probe_segment = 8192; // 64 KiB

/// Sixteen partial sums: lane 4k + l is c[k][l].
struct accumulator {
    double c[4][4];
};

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

/// \effects lane l of `acc` += sum of a[j] * x[j] for j = l, l+16, ... < len, in increasing j.
/// \requires len % lanes == 0.
inline void madd_chunk(accumulator& acc, const double* a, const double* x, std::size_t len) noexcept {
    double c0[4];
    double c1[4];
    double c2[4];
    double c3[4];
    for (std::size_t l = 0; l != 4; ++l) {
        c0[l] = acc.c[0][l];
        c1[l] = acc.c[1][l];
        c2[l] = acc.c[2][l];
        c3[l] = acc.c[3][l];
    }
    for (std::size_t j = 0; j < len; j += lanes) {
        madd4(c0, a + j, x + j);
        madd4(c1, a + j + 4, x + j + 4);
        madd4(c2, a + j + 8, x + j + 8);
        madd4(c3, a + j + 12, x + j + 12);
    }
    for (std::size_t l = 0; l != 4; ++l) {
        acc.c[0][l] = c0[l];
        acc.c[1][l] = c1[l];
        acc.c[2][l] = c2[l];
        acc.c[3][l] = c3[l];
    }
}

/// \effects lane l of `acc` += sum of p[k] for k = l, l+16, ... < len, in increasing k.
/// \requires len % lanes == 0.
inline void add_chunk(accumulator& acc, const double* p, std::size_t len) noexcept {
    double c0[4];
    double c1[4];
    double c2[4];
    double c3[4];
    for (std::size_t l = 0; l != 4; ++l) {
        c0[l] = acc.c[0][l];
        c1[l] = acc.c[1][l];
        c2[l] = acc.c[2][l];
        c3[l] = acc.c[3][l];
    }
    for (std::size_t k = 0; k < len; k += lanes) {
        add4(c0, p + k);
        add4(c1, p + k + 4);
        add4(c2, p + k + 8);
        add4(c3, p + k + 12);
    }
    for (std::size_t l = 0; l != 4; ++l) {
        acc.c[0][l] = c0[l];
        acc.c[1][l] = c1[l];
        acc.c[2][l] = c2[l];
        acc.c[3][l] = c3[l];
    }
}

/// \returns the 16 lanes combined by the halving tree described at the top of this file.
inline double combine(const accumulator& acc) noexcept {
    double lo[4];
    double hi[4];
    for (std::size_t l = 0; l != 4; ++l) { // s_l += s_{l+8}
        lo[l] = acc.c[0][l] + acc.c[2][l];
        hi[l] = acc.c[1][l] + acc.c[3][l];
    }
    for (std::size_t l = 0; l != 4; ++l) { // s_l += s_{l+4}
        lo[l] += hi[l];
    }
    return (lo[0] + lo[2]) + (lo[1] + lo[3]); // s_l += s_{l+2}; s_0 + s_1
}

/// \effects y[r] = row r of the R rows starting at `a` (row stride lda) times x, for r in [0, R),
/// the rows read together chunk by chunk.
template <std::size_t R>
inline void dgemv_block(const double* a, std::size_t lda, const double* x, double* y,
                        std::size_t n) noexcept {
    const std::size_t m = n - n % lanes;
    accumulator acc[R] = {};
    for (std::size_t c = 0; c < m; c += chunk_columns) {
        const std::size_t len = m - c < chunk_columns ? m - c : chunk_columns;
        for (std::size_t r = 0; r != R; ++r) {
            madd_chunk(acc[r], a + r * lda + c, x + c, len);
        }
    }
    for (std::size_t r = 0; r != R; ++r) {
        const double* ar = a + r * lda;
        double s = combine(acc[r]);
        for (std::size_t j = m; j < n; ++j) {
            s += ar[j] * x[j];
        }
        y[r] = s;
    }
}

} // namespace detail

/// \effects y[i] = sum over j in [0, n) of A[i*lda + j] * x[j], for every i in [row_begin, row_end).
/// Writes only y[row_begin .. row_end); reads each of those rows of A once.
/// \requires lda >= n; A, x, y valid for those accesses; y does not overlap A or x.
/// The summation order is the one described at the top of this file, the same for every row.
inline void dgemv_rows(const double* A, std::size_t lda, const double* x, double* y,
                       std::size_t row_begin, std::size_t row_end, std::size_t n) noexcept {
    constexpr std::size_t R = detail::rows_per_block;
    std::size_t i = row_begin;
    for (; i < row_end && row_end - i >= R; i += R) {
        detail::dgemv_block<R>(A + i * lda, lda, x, y + i, n);
    }
    for (; i < row_end; ++i) {
        detail::dgemv_block<1>(A + i * lda, lda, x, y + i, n);
    }
}

/// \returns the sum of p[0 .. count), each element read once. The read-bandwidth probe: it does nothing
/// but read `count * sizeof(double)` bytes, the way dgemv_rows reads A (probe_streams segments of
/// probe_segment doubles in flight, interleaved by chunks), so DGEMV can be reported as a fraction of it.
/// Order: per block of probe_streams * probe_segment elements, each segment is summed into its own 16
/// lanes (lane l: elements l, l+16, ...), combined by the halving tree; block results are added in order;
/// a final partial block is summed the same way as one segment with an in-order tail. The value only
/// serves to keep the reads alive.
inline double read_sum(const double* p, std::size_t count) noexcept {
    constexpr std::size_t S = detail::probe_streams;
    constexpr std::size_t B = detail::probe_segment;
    constexpr std::size_t C = detail::chunk_columns;
    static_assert(B % C == 0 && C % detail::lanes == 0, "segments are whole chunks, chunks whole lanes");
    double total = 0.0;
    std::size_t k = 0;
    for (; count - k >= S * B; k += S * B) {
        detail::accumulator acc[S] = {};
        for (std::size_t c = 0; c != B; c += C) {
            for (std::size_t s = 0; s != S; ++s) {
                detail::add_chunk(acc[s], p + k + s * B + c, C);
            }
        }
        for (std::size_t s = 0; s != S; ++s) {
            total += detail::combine(acc[s]);
        }
    }
    const std::size_t rest = count - k;
    const std::size_t m = rest - rest % detail::lanes;
    detail::accumulator acc = {};
    detail::add_chunk(acc, p + k, m);
    double s = detail::combine(acc);
    for (std::size_t j = m; j < rest; ++j) {
        s += p[k + j];
    }
    return total + s;
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
        if (!same && !(err <= rel_tol * mag)) { // a NaN err (NaN on one side only) fails
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
