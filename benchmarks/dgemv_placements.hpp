// numaplace benchmarks: the DGEMV matrix under each placement the benchmark and the demo compare,
// with its initialisation, its compute loop and its locality. Shared by benchmarks/dgemv.cpp and
// examples/dgemv_placement.cpp so both measure exactly the same thing.
//
//   serial_init    plain pages, A filled by one thread (the seeds' baseline: every page on one node),
//                  compute with tbb::parallel_for
//   parallel_init  plain pages, filled and computed by tbb::parallel_for with static_partitioner
//                  (the same rows go to the same thread in both loops: first touch done right by hand)
//   interleaved    interleaved over all nodes, compute with tbb::parallel_for
//   node0          everything bound to node 0
//   partitioned    bound by partition<double>::rows(M, N) (blocks of whole rows),
//                  filled and computed by numaplace::parallel_for on that same rows partition
//   replaced       filled by one thread as serial_init, then numaplace::replace to the rows partition
//                  (pages moved, contents kept), computed by numaplace::parallel_for on it
// A itself is a numaplace::placed_array made by the compared placement of each (`compared`,
// numaplace/compared_placement.hpp): the same allocation and first touch as benchmark.hpp's.
#ifndef NUMAPLACE_BENCH_DGEMV_PLACEMENTS_HPP_INCLUDED
#define NUMAPLACE_BENCH_DGEMV_PLACEMENTS_HPP_INCLUDED

#include "dgemv_kernel.hpp"

#include <numaplace/compared_placement.hpp>
#include <numaplace/numaplace.hpp>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cstddef>
#include <string>
#include <vector>

namespace numaplace::bench {

enum class placement_kind { serial_init, parallel_init, interleaved, node0, partitioned, replaced, partitioned_explicit_2m };

/// The pages A is made of (numaplace::page_choice): the benchmark measures every kernel and its
/// read-bandwidth probes on one kind (the probes' limit is not the same with huge pages).
using page_kind = numaplace::page_choice;

inline const char* name(placement_kind p) noexcept {
    switch (p) {
    case placement_kind::serial_init: return "serial_init";
    case placement_kind::parallel_init: return "parallel_init";
    case placement_kind::interleaved: return "interleaved";
    case placement_kind::node0: return "node0";
    case placement_kind::partitioned: return "partitioned";
    case placement_kind::replaced: return "replaced";
    case placement_kind::partitioned_explicit_2m: return "partitioned_explicit_2m";
    }
    return "?";
}

/// \returns the compared placement (compared_placement.hpp) that makes A for `p`, under p's name: serial
/// first touch for serial_init and replaced (which is then replace()d), first touch by the placement's
/// own loop for parallel_init, and numaplace's placements for the others.
inline compared_placement compared(placement_kind p) {
    switch (p) {
    case placement_kind::serial_init: return compared_placement::serial_first_touch(name(p));
    case placement_kind::parallel_init: return compared_placement::first_touch(name(p));
    case placement_kind::interleaved: return compared_placement::interleaved(name(p));
    case placement_kind::node0: return compared_placement::node_local(0, name(p));
    case placement_kind::partitioned: return compared_placement::partitioned(name(p));
    case placement_kind::replaced: return compared_placement::serial_first_touch(name(p));
    case placement_kind::partitioned_explicit_2m: return compared_placement::partitioned_explicit(page_size::explicit_2m, name(p));
    }
    return compared_placement::first_touch(name(p));
}

inline const std::vector<placement_kind>& all_placements() {
    static const std::vector<placement_kind> all{placement_kind::serial_init, placement_kind::parallel_init,
                                                 placement_kind::interleaved, placement_kind::node0,
                                                 placement_kind::partitioned};
    return all;
}

/// The value of A[i][j]: cheap, deterministic, not constant (so a wrong index changes the result).
inline double a_value(std::size_t i, std::size_t j) noexcept { return static_cast<double>((i * 7 + j * 13) % 17) - 8.0; }
inline double x_value(std::size_t j) noexcept { return static_cast<double>(j % 11) * 0.125 - 0.5; }

/// An M x N row-major matrix placed one way, with x and y.
class placed_matrix {
public:
    /// \param pages: small or huge overrides the placement's own THP advice before A is first written
    /// (MADV_NOHUGEPAGE or MADV_HUGEPAGE); as_placed keeps it.
    placed_matrix(placement_kind kind, std::size_t m, std::size_t n, page_kind pages = page_kind::as_placed)
        : kind_(kind), m_(m), n_(n), rows_(partition<double>::rows(m, n)), x_(n), y_(m, 0.0),
          a_(compared(kind), rows_, pages) {
        for (std::size_t j = 0; j < n; ++j) x_[j] = x_value(j);
        initialise();
    }
    placed_matrix(const placed_matrix&) = delete;
    placed_matrix& operator=(const placed_matrix&) = delete;

    placement_kind kind() const noexcept { return kind_; }
    page_kind pages() const noexcept { return a_.pages(); }
    std::size_t rows() const noexcept { return m_; }
    std::size_t cols() const noexcept { return n_; }
    std::size_t bytes() const noexcept { return m_ * n_ * sizeof(double); }
    const double* a() const noexcept { return a_.data(); }
    /// \returns A as placed (its placement, layout and where()).
    const placed_array<double>& array() const noexcept { return a_; }
    const double* x() const noexcept { return x_.data(); }
    double* y() noexcept { return y_.data(); }
    /// \returns A's rows partition: its indexes are rows, `where(a(), row_partition())` inspects all m*n elements.
    const numaplace::row_partition<double>& row_partition() const noexcept { return rows_; }

    /// \effects y = A x with the placement's loop (threads as the current oneTBB limit allows).
    void multiply() {
        const double* a = a_.data();
        const double* x = x_.data();
        double* y = y_.data();
        const std::size_t n = n_;
        for_rows([=](std::size_t b, std::size_t e) { dgemv_rows(a, n, x, y, b, e, n); });
    }
    /// \returns all of A read in parallel the same way by `read` (a probe::strategies() entry), each
    /// subrange of rows at a time, as the kernel reads them.
    double read_all(double (*read)(const double*, std::size_t, std::size_t) noexcept) const {
        const double* a = a_.data();
        const std::size_t n = n_;
        return parallel_reduce(rows_, 0.0, [=](subrange r, double s) { return s + read(a + r.begin() * n, r.size() * n, n); },
                               [](double p, double q) { return p + q; });
    }
    /// \returns true if y matches the naive in-order product on a sample of rows.
    bool check() const {
        for (std::size_t i = 0; i < m_; i += (m_ / 64 + 1))
            if (!dgemv_check(a_.data(), n_, x_.data(), y_.data(), i, i + 1, n_)) return false;
        return true;
    }

    /// \returns the fraction of A's pages that are on the node of the thread that computes them: runs
    /// the compute loop once more, recording the node of the executing CPU per row, then asks where()
    /// for every page against that (pages of rows computed off-node count as remote).
    double locality() {
        const auto& topo = topology::get();
        std::vector<int> node_of_row(m_, -1);
        const double* a = a_.data();
        const double* x = x_.data();
        double* y = y_.data();
        const std::size_t n = n_;
        for_rows([&](std::size_t b, std::size_t e) {
            const int node = topo.current_node();
            for (std::size_t i = b; i < e; ++i) node_of_row[i] = node;
            dgemv_rows(a, n, x, y, b, e, n);
        });
        return numaplace::locality(a, m_ * n_, [&](std::size_t i) { return node_of_row[i / n]; }).fraction();
    }

private:
    // Runs f(row_begin, row_end) over all rows with the placement's loop: numaplace::parallel_for on
    // the row partition, tbb static_partitioner for parallel_init (the same rows go to the same thread
    // in every loop), plain tbb::parallel_for otherwise.
    template <class F>
    void for_rows(F&& f) const {
        auto rows = [&f](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.end()); };
        const tbb::blocked_range<std::size_t> all(0, m_);
        // compute edges are exact whatever the page grain: the explicit-page matrix runs the same row blocks
        if (kind_ == placement_kind::partitioned || kind_ == placement_kind::replaced ||
            kind_ == placement_kind::partitioned_explicit_2m)
            parallel_for(rows_, [&f](subrange r) { f(r.begin(), r.end()); });
        else if (kind_ == placement_kind::parallel_init) tbb::parallel_for(all, rows, tbb::static_partitioner());
        else tbb::parallel_for(all, rows);
    }

    // serial_init fills A from one thread; every other placement fills it with its own loop (for the
    // bound placements the binding, not the toucher, decides).
    void initialise() {
        double* a = a_.data();
        const std::size_t n = n_;
        auto fill = [a, n](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i)
                for (std::size_t j = 0; j < n; ++j) a[i * n + j] = a_value(i, j);
        };
        if (kind_ == placement_kind::serial_init || kind_ == placement_kind::replaced) fill(0, m_);
        else for_rows(fill);
        if (kind_ == placement_kind::replaced) replace(static_cast<const double*>(a), rows_.elements(), fallback::degrade);
    }

    placement_kind kind_;
    std::size_t m_, n_;
    numaplace::row_partition<double> rows_; // M rows of N doubles: allocation, loops and where() by whole rows
    std::vector<double> x_, y_;
    placed_array<double> a_; // made by compared(kind_): allocation and the serial first touch
};

} // namespace numaplace::bench

#endif
