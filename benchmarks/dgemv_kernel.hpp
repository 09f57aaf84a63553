// numaplace benchmarks: a bandwidth-bound DGEMV kernel and the read-bandwidth probe it is measured against.
//
// The kernel is portable C++17: no intrinsics, no vector extensions, no pragmas or attributes, no
// -ffast-math. (The read-limit probes at the end, namespace probe, may use extensions: they are the limit.)
//
// Why not the naive loop: `y[i] += A[i*n+j] * x[j]` is one floating-point add chain per row. Without
// -ffast-math the compiler may not reassociate it, so every add waits for the previous one and the loop
// runs at the add (or FMA) latency: 0.22-0.45 of the read bandwidth on this machine kind.
//
// Design (each point measured on a 2-core Sapphire Rapids VM with GCC 12 at -O2 and -O3, with and without
// -march=native, A = 20000 x 20000 doubles):
//  1. Independent accumulators that vectorise by construction. A row is summed into 8 partial sums,
//     `double c[2][4]`. Every update is its own loop of exactly four iterations over contiguous elements,
//     `c[k][l] += a[j+l] * x[j+l]` (madd4), with no dependence between the two groups. With one row per
//     loop GCC vectorises that at -O2 (the 4-iteration loops are unrolled, basic-block SLP turns them into
//     vectors) and at -O3 (the loop vectorizer takes the 8 sums as one SLP reduction group over contiguous
//     loads): 2-wide with the x86-64 baseline, 4-wide FMA with -march=native.
//  2. Four rows in flight. One core reading one sequential stream does not reach the read bandwidth
//     everywhere, so dgemv_rows takes four rows at a time and walks them chunk_columns columns at a
//     time: chunk 0 of rows i..i+3, chunk 1 of rows i..i+3, ... x comes from L1 for all four rows.
//  3. The accumulators of the four rows are one array, c[4][2][4], updated by one loop over the rows
//     whose body is a chunk of one row (madd_chunk): GCC keeps each row's 8 lanes in one vector register
//     across chunks. Four separate arrays (the kernel before 2026-12-07) made GCC 12 -O3 -march=native
//     move every lane into a scalar register at each chunk's end: 0.87x the read limit instead of 1.0x.
//     A loop whose body updates several rows' lanes at once is vectorised by GCC 12 at -O3 as an
//     in-order reduction across iterations, slower than the naive loop, so each chunk of each row stays
//     its own loop. Chunks of 48 columns (six trips): 32 and 64 measured 2-5% slower.
//  The measurements behind each point: docs/performance.md ("The kernel at the read limit").
//
// Reduction order (the only difference from the naive loop, which adds j = 0, 1, ..., n-1 in order):
//   * Let m = n - n % 8. Lane l in [0, 8) sums A[i][j] * x[j] for j = l, l+8, l+16, ... < m, in
//     increasing j, starting from +0.0. Chunking does not change this: chunks are whole multiples of 8
//     columns and each lane carries on where the previous chunk left it.
//   * The 8 lanes are combined by a fixed halving tree: s_l += s_{l+4} (l < 4), then s_l += s_{l+2}
//     (l < 2), then s_0 + s_1.
//   * The column tail j = m, ..., n-1 is added to that value one term at a time, in increasing j.
//   The order is the same for every row, whether it goes through the 4-row block or the single-row path,
//   whatever the row range a thread gets and the alignment of A. Without FMA contraction (x86-64 baseline,
//   or -ffp-contract=off) results are therefore bit-identical across thread counts. With FMA enabled GCC
//   contracts a*x + s by default in GNU mode and may contract different code paths differently, so a row
//   can differ in the last bits depending on the path it took. Either way results differ from the naive
//   loop by rounding only; dgemv_check states the bound.
#ifndef NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED
#define NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace numaplace::bench {

namespace detail {

/// Independent partial sums per row (and per stream in read_sum): two groups of four lanes,
/// lane 4k + l being c[k][l].
inline constexpr std::size_t lanes = 8;
/// Rows dgemv_rows reads together, and columns per chunk of each (a multiple of `lanes`, at least two of
/// them): see the top of the file and docs/performance.md for how they were chosen.
inline constexpr std::size_t rows_in_flight = 4;
inline constexpr std::size_t chunk_columns = 48;
/// read_sum reads blocks of four consecutive segments of `probe_segment` doubles (64 KiB each), the four
/// segments interleaved by chunks of `probe_chunk` doubles.
inline constexpr std::size_t probe_segment = 8192;
inline constexpr std::size_t probe_chunk = 64;

/// \effects c[l] += a[l] * x[l] for l in [0, 4). One group of four lanes, kept a separate
/// 4-iteration loop on purpose (see the top of this file).
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

/// \effects lane l of c += a[j] * x[j] for j = l, l+8, ... < len, in increasing j.
/// \requires len % lanes == 0.
inline void madd_chunk(double (&c)[2][4], const double* a, const double* x, std::size_t len) noexcept {
    for (std::size_t j = 0; j < len; j += lanes) {
        madd4(c[0], a + j, x + j);
        madd4(c[1], a + j + 4, x + j + 4);
    }
}

/// \effects lane l of c += p[k] for k = l, l+8, ... < len, in increasing k.
/// \requires len % lanes == 0.
inline void add_chunk(double (&c)[2][4], const double* p, std::size_t len) noexcept {
    for (std::size_t k = 0; k < len; k += lanes) {
        add4(c[0], p + k);
        add4(c[1], p + k + 4);
    }
}

/// \returns the 8 lanes of c combined by the halving tree described at the top of this file.
inline double combine(const double (&c)[2][4]) noexcept {
    double t[4];
    for (std::size_t l = 0; l != 4; ++l) { // s_l += s_{l+4}
        t[l] = c[0][l] + c[1][l];
    }
    return (t[0] + t[2]) + (t[1] + t[3]); // s_l += s_{l+2}; s_0 + s_1
}

/// \returns s + a[j] * x[j] for j = m, ..., n-1, added in order.
inline double add_tail(double s, const double* a, const double* x, std::size_t m, std::size_t n) noexcept {
    for (std::size_t j = m; j < n; ++j) {
        s += a[j] * x[j];
    }
    return s;
}

/// \returns row `a` times x (n columns), in the order described at the top of this file.
inline double dgemv_row(const double* a, const double* x, std::size_t n) noexcept {
    const std::size_t m = n - n % lanes;
    double c[2][4] = {};
    madd_chunk(c, a, x, m);
    return add_tail(combine(c), a, x, m, n);
}

/// \effects y[r] = row r of the R rows starting at a (row stride lda) times x, r in [0, R);
/// the R rows are read together, C columns at a time.
template <std::size_t R, std::size_t C>
inline void dgemv_block(const double* a, std::size_t lda, const double* x, double* y, std::size_t n) noexcept {
    static_assert(R != 0, "at least one row");
    static_assert(C != 0 && C % lanes == 0, "chunks are whole lane groups");
    static_assert(C >= 2 * lanes, "a one-trip chunk turns into the element interleave GCC -O3 mishandles");
    const std::size_t m = n - n % lanes;
    double c[R][2][4] = {};
    for (std::size_t b = 0; b < m; b += C) {
        const std::size_t len = m - b < C ? m - b : C;
        for (std::size_t r = 0; r != R; ++r) {
            madd_chunk(c[r], a + r * lda + b, x + b, len);
        }
    }
    for (std::size_t r = 0; r != R; ++r) {
        y[r] = add_tail(combine(c[r]), a + r * lda, x, m, n);
    }
}

/// dgemv_rows with another chunk length (for tuning; dgemv_rows uses chunk_columns).
template <std::size_t C>
inline void dgemv_rows_chunked(const double* A, std::size_t lda, const double* x, double* y,
                               std::size_t row_begin, std::size_t row_end, std::size_t n) noexcept {
    std::size_t i = row_begin;
    for (; i < row_end && row_end - i >= rows_in_flight; i += rows_in_flight) {
        dgemv_block<rows_in_flight, C>(A + i * lda, lda, x, y + i, n);
    }
    for (; i < row_end; ++i) {
        y[i] = dgemv_row(A + i * lda, x, n);
    }
}

/// The sum of p[0, count) read as S streams: blocks of S consecutive segments of B doubles, the S
/// segments read together, C doubles of each at a time, each into its own 8 lanes. read_sum is S = 4.
template <std::size_t S, std::size_t B, std::size_t C>
inline double read_sum_streams(const double* p, std::size_t count) noexcept {
    static_assert(S != 0 && C != 0 && B % C == 0 && C % lanes == 0, "segments are whole chunks, chunks whole lanes");
    double total = 0.0;
    std::size_t k = 0;
    for (; count - k >= S * B; k += S * B) {
        const double* p0 = p + k;
        double c[S][2][4] = {};
        for (std::size_t b = 0; b != B; b += C) {
            for (std::size_t s = 0; s != S; ++s) {
                add_chunk(c[s], p0 + s * B + b, C);
            }
        }
        for (std::size_t s = 0; s != S; ++s) {
            total += combine(c[s]);
        }
    }
    const std::size_t rest = count - k;
    const std::size_t m = rest - rest % lanes;
    double c[2][4] = {};
    add_chunk(c, p + k, m);
    double s = combine(c);
    for (std::size_t j = m; j < rest; ++j) {
        s += p[k + j];
    }
    return total + s;
}

/// read_sum with another segment and chunk length (for tuning; read_sum uses the defaults).
template <std::size_t B, std::size_t C>
inline double read_sum_shaped(const double* p, std::size_t count) noexcept {
    return read_sum_streams<4, B, C>(p, count);
}

} // namespace detail

/// \effects y[i] = sum over j in [0, n) of A[i*lda + j] * x[j], for every i in [row_begin, row_end).
/// Writes only y[row_begin .. row_end); reads each of those rows of A once, four rows at a time.
/// \requires lda >= n; A, x, y valid for those accesses; y does not overlap A or x.
/// The summation order is the one described at the top of this file, the same for every row.
inline void dgemv_rows(const double* A, std::size_t lda, const double* x, double* y,
                       std::size_t row_begin, std::size_t row_end, std::size_t n) noexcept {
    detail::dgemv_rows_chunked<detail::chunk_columns>(A, lda, x, y, row_begin, row_end, n);
}

/// \returns the sum of p[0 .. count), each element read once. The read-bandwidth probe: it does nothing
/// but read `count * sizeof(double)` bytes, four streams at a time like dgemv_rows, so DGEMV can be
/// reported as a fraction of it. Order: per block of 4 * probe_segment elements, each segment is summed
/// into its own 8 lanes (lane l: elements l, l+8, ... of the segment), each combined by the halving
/// tree, the four results added as (s0 + s1) + (s2 + s3), blocks added in order; the rest after the last
/// whole block is summed the same way as one segment, its last count % 8 elements added in order.
/// The value only serves to keep the reads alive.
inline double read_sum(const double* p, std::size_t count) noexcept {
    return detail::read_sum_shaped<detail::probe_segment, detail::probe_chunk>(p, count);
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

/// Read-bandwidth probes: ways to read memory as fast as this machine allows, measured side by side so
/// that their best is the read limit of the run (a kernel that beat every one of them would show that a
/// strategy is missing). They are not DGEMV kernels: the ones below may use compiler extensions and
/// intrinsics. Each returns a value depending on every element read, so the reads stay.
namespace probe {

/// S interleaved floating-point streams (read_sum_streams).
template <std::size_t S>
inline double sum_streams(const double* p, std::size_t count) noexcept {
    return detail::read_sum_streams<S, detail::probe_segment, detail::probe_chunk>(p, count);
}

/// One stream, integer XOR of the bits: no floating-point latency at all, vectorised by the compiler.
inline double xor_bits(const double* p, std::size_t count) noexcept {
    std::uint64_t acc[4] = {};
    std::size_t i = 0;
    for (; count - i >= 4; i += 4) {
        for (std::size_t l = 0; l != 4; ++l) {
            std::uint64_t v;
            std::memcpy(&v, p + i + l, sizeof v);
            acc[l] ^= v;
        }
    }
    for (; i < count; ++i) {
        std::uint64_t v;
        std::memcpy(&v, p + i, sizeof v);
        acc[0] ^= v;
    }
    return static_cast<double>((acc[0] ^ acc[1]) ^ (acc[2] ^ acc[3]));
}

/// sum_streams<4> with software prefetch `Ahead` bytes in front of each stream.
template <std::size_t Ahead>
inline double sum4_prefetch(const double* p, std::size_t count) noexcept {
    constexpr std::size_t S = 4, B = detail::probe_segment, C = detail::probe_chunk;
    constexpr std::size_t ahead = Ahead / sizeof(double);
    double total = 0.0;
    std::size_t k = 0;
    for (; count - k >= S * B; k += S * B) {
        const double* p0 = p + k;
        double c[S][2][4] = {};
        for (std::size_t b = 0; b != B; b += C) {
            for (std::size_t s = 0; s != S; ++s) {
                const double* q = p0 + s * B + b;
                for (std::size_t line = 0; line != C; line += 8) { // one prefetch per 64-byte line
                    __builtin_prefetch(q + ahead + line, 0, 0);
                }
                detail::add_chunk(c[s], q, C);
            }
        }
        for (std::size_t s = 0; s != S; ++s) {
            total += detail::combine(c[s]);
        }
    }
    return total + detail::read_sum_streams<1, detail::probe_segment, detail::probe_chunk>(p + k, count - k);
}

#if defined(__AVX2__)
/// S streams of explicit AVX2 loads, two 4-wide accumulators per stream.
template <std::size_t S>
inline double avx2_streams(const double* p, std::size_t count) noexcept {
    constexpr std::size_t B = detail::probe_segment;
    __m256d total = _mm256_setzero_pd();
    std::size_t k = 0;
    for (; count - k >= S * B; k += S * B) {
        __m256d acc[S][2];
        for (std::size_t s = 0; s != S; ++s) {
            acc[s][0] = _mm256_setzero_pd();
            acc[s][1] = _mm256_setzero_pd();
        }
        for (std::size_t b = 0; b != B; b += 8) {
            for (std::size_t s = 0; s != S; ++s) {
                const double* q = p + k + s * B + b;
                acc[s][0] = _mm256_add_pd(acc[s][0], _mm256_loadu_pd(q));
                acc[s][1] = _mm256_add_pd(acc[s][1], _mm256_loadu_pd(q + 4));
            }
        }
        for (std::size_t s = 0; s != S; ++s) {
            total = _mm256_add_pd(total, _mm256_add_pd(acc[s][0], acc[s][1]));
        }
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, total);
    return (t[0] + t[1]) + (t[2] + t[3]) + sum_streams<1>(p + k, count - k);
}
#endif

/// The sum of `count` doubles at p read as rows of `row` doubles, the way dgemv_rows reads A: R rows at a
/// time, C columns of each in turn, each row into its own 8 lanes; only the multiply by x is left out.
/// A part after the last whole row (count % row), and everything when row is 0, is read as one stream.
template <std::size_t R, std::size_t C>
inline double rows_sum(const double* p, std::size_t count, std::size_t row) noexcept {
    static_assert(R != 0 && C != 0 && C % detail::lanes == 0, "chunks are whole lane groups");
    if (row == 0) {
        return sum_streams<1>(p, count);
    }
    const std::size_t rows = count / row;
    const std::size_t m = row - row % detail::lanes;
    double total = 0.0;
    std::size_t i = 0;
    for (; rows - i >= R; i += R) {
        const double* a = p + i * row;
        double c[R][2][4] = {};
        for (std::size_t b = 0; b < m; b += C) {
            const std::size_t len = m - b < C ? m - b : C;
            for (std::size_t r = 0; r != R; ++r) {
                detail::add_chunk(c[r], a + r * row + b, len);
            }
        }
        for (std::size_t r = 0; r != R; ++r) {
            double t = detail::combine(c[r]);
            for (std::size_t j = m; j < row; ++j) {
                t += a[r * row + j];
            }
            total += t;
        }
    }
    return total + sum_streams<1>(p + i * row, count - i * row);
}

/// A probe that reads the memory as one array, whatever its rows.
template <double (*Read)(const double*, std::size_t) noexcept>
inline double flat(const double* p, std::size_t count, std::size_t /*row*/) noexcept {
    return Read(p, count);
}

/// A named probe: `read(p, count, row)` reads `count` doubles at p, whole rows of `row` doubles.
struct strategy {
    const char* name;
    double (*read)(const double*, std::size_t, std::size_t) noexcept;
};

/// \returns every probe this build has (AVX2 ones only when compiled with AVX2).
inline const std::vector<strategy>& strategies() {
    static const std::vector<strategy> all{
        {"sum1", &flat<&sum_streams<1>>},
        {"sum2", &flat<&sum_streams<2>>},
        {"sum4", &flat<&sum_streams<4>>},
        {"sum8", &flat<&sum_streams<8>>},
        {"xor1", &flat<&xor_bits>},
        {"sum4_prefetch1k", &flat<&sum4_prefetch<1024>>},
        {"sum4_prefetch4k", &flat<&sum4_prefetch<4096>>},
        {"rows2", &rows_sum<2, detail::chunk_columns>},
        {"rows4", &rows_sum<4, detail::chunk_columns>},
        {"rows8", &rows_sum<8, detail::chunk_columns>},
#if defined(__AVX2__)
        {"avx2x2", &flat<&avx2_streams<2>>},
        {"avx2x4", &flat<&avx2_streams<4>>},
        {"avx2x8", &flat<&avx2_streams<8>>},
#endif
    };
    return all;
}

} // namespace probe

} // namespace numaplace::bench

#endif // NUMAPLACE_BENCH_DGEMV_KERNEL_HPP_INCLUDED
