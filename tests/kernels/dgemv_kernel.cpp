// The DGEMV kernel the demo and bench_dgemv run on each thread's rows (benchmarks/dgemv_kernel.hpp),
// against the naive in-order loop: every shape of rows and columns its blocks and chunks split
// differently (counts around the 4-row block, the 8 lanes and the 48-column chunk, primes, a padded
// row stride), every row range. Entries are small integers times powers of two, so every partial sum
// is exact in double and any summation order gives the reference bit for bit: a term lost, doubled or
// taken from the wrong row or column shows as a difference, not as rounding.
#include "dgemv_kernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using numaplace::bench::dgemv_check;
using numaplace::bench::dgemv_reference;
using numaplace::bench::dgemv_rows;

struct shape {
    std::size_t rows;
    std::size_t cols;
    std::size_t lda;
};

std::vector<shape> shapes() {
    std::vector<shape> out;
    for (std::size_t rows : {0, 1, 3, 4, 5, 7, 8, 9, 13}) {
        for (std::size_t cols : {0, 1, 7, 8, 9, 15, 16, 17, 47, 48, 49, 95, 96, 97, 101, 1001}) {
            out.push_back({rows, cols, cols});
            out.push_back({rows, cols, cols + 3}); // a row stride that is not the row length
        }
    }
    return out;
}

/// A with entries a_ij = ((3i + 5j) % 17 - 8) / 4 and x_j = (j % 11 - 5) * 2: exact products and sums.
void fill(const shape& s, std::vector<double>& a, std::vector<double>& x) {
    a.assign(s.rows * s.lda + 1, 1e300); // padding and the element past the end: poison if ever read
    x.assign(s.cols + 1, 1e300);
    for (std::size_t i = 0; i < s.rows; ++i)
        for (std::size_t j = 0; j < s.cols; ++j)
            a[i * s.lda + j] = static_cast<double>(static_cast<long>((3 * i + 5 * j) % 17) - 8) / 4;
    for (std::size_t j = 0; j < s.cols; ++j) x[j] = static_cast<double>(static_cast<long>(j % 11) - 5) * 2;
}

} // namespace

TEST(dgemv_kernel, every_row_range_of_every_shape_equals_the_in_order_sum) {
    std::vector<double> a, x;
    for (const shape& s : shapes()) {
        fill(s, a, x);
        std::vector<double> want(s.rows);
        dgemv_reference(a.data(), s.lda, x.data(), want.data(), 0, s.rows, s.cols);
        for (std::size_t begin = 0; begin <= s.rows; ++begin) {
            for (std::size_t end = begin; end <= s.rows; ++end) {
                std::vector<double> y(s.rows + 1, -7.0); // -7: never a result here (results are even)
                dgemv_rows(a.data(), s.lda, x.data(), y.data(), begin, end, s.cols);
                for (std::size_t i = 0; i <= s.rows; ++i) {
                    const double expected = i >= begin && i < end ? want[i] : -7.0; // outside: untouched
                    ASSERT_EQ(y[i], expected) << s.rows << "x" << s.cols << " lda " << s.lda << " rows ["
                                              << begin << ", " << end << ") row " << i;
                }
            }
        }
    }
}

TEST(dgemv_kernel, rounding_of_general_values_stays_within_the_reordering_bound) {
    // Values whose products and sums round: the kernel's order differs from the in-order loop by rounding
    // only (dgemv_check's bound, 2 gamma_n of sum |a x|), and a term lost would be far outside it.
    const std::size_t rows = 9, cols = 1001;
    std::vector<double> a(rows * cols), x(cols), y(rows);
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = 1.0 / static_cast<double>(k % 97 + 1) - 0.01;
    for (std::size_t j = 0; j < cols; ++j) x[j] = 1.0 / static_cast<double>(j + 3);
    dgemv_rows(a.data(), cols, x.data(), y.data(), 0, rows, cols);
    double worst = -1;
    EXPECT_TRUE(dgemv_check(a.data(), cols, x.data(), y.data(), 0, rows, cols, 0.0, &worst));
    EXPECT_GE(worst, 0.0);
    y[4] += 1e-6 * std::fabs(y[4]) + 1e-9; // one row off by far more than rounding: the check must see it
    EXPECT_FALSE(dgemv_check(a.data(), cols, x.data(), y.data(), 0, rows, cols));
}

TEST(dgemv_kernel, every_read_probe_reads_every_element_once) {
    // The probes' sums of exact values (small integers over 4) against the plain sum: a probe that skipped
    // or repeated an element would set a read limit on less or more memory than A.
    for (const shape& s : shapes()) {
        std::vector<double> a, x;
        fill({s.rows, s.cols + 2, s.cols + 2}, a, x);
        // Whole rows of s.cols, then two more elements: the probes get `row` = s.cols (0 included) and a
        // count that is not a whole number of rows.
        const std::size_t count = s.rows * (s.cols + 2);
        double sum = 0;
        std::uint64_t bits = 0; // xor1 folds the elements' bits instead
        for (std::size_t k = 0; k < count; ++k) {
            sum += a[k];
            std::uint64_t v;
            std::memcpy(&v, &a[k], sizeof v);
            bits ^= v;
        }
        for (const auto& probe : numaplace::bench::probe::strategies()) {
            const double want = std::string(probe.name) == "xor1" ? static_cast<double>(bits) : sum;
            ASSERT_EQ(probe.read(a.data(), count, s.cols), want) << probe.name << " " << s.rows << "x" << s.cols;
        }
    }
}
