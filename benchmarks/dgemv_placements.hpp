// numaplace benchmarks: the DGEMV matrix under each placement the benchmark and the demo compare,
// with its initialisation, its compute loop and its locality. Shared by benchmarks/dgemv.cpp and
// examples/dgemv_placement.cpp so both measure exactly the same thing.
//
//   serial_init    plain pages, A filled by one thread (the seeds' baseline: every page on one node),
//                  compute with tbb::parallel_for
//   parallel_init  plain pages, filled and computed by tbb::parallel_for with static_partitioner
//                  (the same rows go to the same thread in both loops: first touch done right by hand)
//   interleaved    interleaved_allocator over all nodes, compute with tbb::parallel_for
//   node0          node_allocator(0): everything bound to node 0
//   partitioned    partitioned_allocator over partition<double>::rows(M, N) (blocks of whole rows),
//                  filled and computed by numaplace::parallel_for on that same rows partition
//   replaced       filled by one thread as serial_init, then numaplace::replace to the rows partition
//                  (pages moved, contents kept), computed by numaplace::parallel_for on it
#ifndef NUMAPLACE_BENCH_DGEMV_PLACEMENTS_HPP_INCLUDED
#define NUMAPLACE_BENCH_DGEMV_PLACEMENTS_HPP_INCLUDED

#include "dgemv_kernel.hpp"

#include <numaplace/numaplace.hpp>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <sys/mman.h>

namespace numaplace::bench {

enum class placement_kind { serial_init, parallel_init, interleaved, node0, partitioned, replaced };

/// The pages A is made of. The benchmark measures every kernel and its read-bandwidth probes on one kind
/// (the probes' limit is not the same with huge pages: fewer TLB misses, so a faster read).
enum class page_kind {
    as_placed, ///< whatever the placement advises (the partitioned placement may ask for huge pages)
    small,     ///< MADV_NOHUGEPAGE before the first write: small pages whatever THP's mode
    huge       ///< MADV_HUGEPAGE before the first write: what THP in `madvise` mode gives
};

inline const char* name(page_kind k) noexcept {
    return k == page_kind::small ? "small pages" : k == page_kind::huge ? "MADV_HUGEPAGE" : "as placed";
}

inline const char* name(placement_kind p) noexcept {
    switch (p) {
    case placement_kind::serial_init: return "serial_init";
    case placement_kind::parallel_init: return "parallel_init";
    case placement_kind::interleaved: return "interleaved";
    case placement_kind::node0: return "node0";
    case placement_kind::partitioned: return "partitioned";
    case placement_kind::replaced: return "replaced";
    }
    return "?";
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
        : kind_(kind), m_(m), n_(n), rows_(partition<double>::rows(m, n)), x_(n), y_(m, 0.0), pages_(pages) {
        const std::size_t count = m * n, bytes = count * sizeof(double);
        switch (kind) {
        case placement_kind::serial_init:
        case placement_kind::parallel_init:
            a_ = static_cast<double*>(memory::map(bytes));
            release_ = [bytes](double* p) { memory::unmap(p, bytes); };
            break;
        case placement_kind::interleaved: take_from(interleaved_allocator<double>(topology::get().all()), count); break;
        case placement_kind::node0: take_from(node_allocator<double>(0), count); break;
        case placement_kind::partitioned: take_from(partitioned_allocator<double>(rows_), count); break;
        case placement_kind::replaced: // aligned as the partitioned allocation, so the same edges hold
            a_ = static_cast<double*>(memory::map(bytes, rows_.alignment()));
            release_ = [bytes](double* p) { memory::unmap(p, bytes); };
            break;
        }
        if (pages != page_kind::as_placed)
            ::madvise(a_, bytes, pages == page_kind::huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (std::size_t j = 0; j < n; ++j) x_[j] = x_value(j);
        initialise();
    }
    ~placed_matrix() { release_(a_); }
    placed_matrix(const placed_matrix&) = delete;
    placed_matrix& operator=(const placed_matrix&) = delete;

    placement_kind kind() const noexcept { return kind_; }
    page_kind pages() const noexcept { return pages_; }
    std::size_t rows() const noexcept { return m_; }
    std::size_t cols() const noexcept { return n_; }
    std::size_t bytes() const noexcept { return m_ * n_ * sizeof(double); }
    const double* a() const noexcept { return a_; }
    const double* x() const noexcept { return x_.data(); }
    double* y() noexcept { return y_.data(); }
    /// \returns A's rows partition: its indexes are rows, `where(a(), row_partition())` inspects all m*n elements.
    const partition<double>& row_partition() const noexcept { return rows_; }

    /// \effects y = A x with the placement's loop (threads as the current oneTBB limit allows).
    void multiply() {
        const double* a = a_;
        const double* x = x_.data();
        double* y = y_.data();
        const std::size_t n = n_;
        for_rows([=](std::size_t b, std::size_t e) { dgemv_rows(a, n, x, y, b, e, n); });
    }
    /// \returns the sum of all of A read in parallel the same way (the read-bandwidth probe).
    double read_all() const { return read_all(&read_sum); }
    /// \returns all of A read in parallel the same way by `read` (a probe::strategies() entry), each
    /// subrange of rows at a time, as the kernel reads them.
    double read_all(double (*read)(const double*, std::size_t) noexcept) const {
        const double* a = a_;
        const std::size_t n = n_;
        return parallel_reduce(rows_, 0.0, [=](subrange r, double s) { return s + read(a + r.begin() * n, r.size() * n); },
                               [](double p, double q) { return p + q; });
    }
    /// \returns true if y matches the naive in-order product on a sample of rows.
    bool check() const {
        for (std::size_t i = 0; i < m_; i += (m_ / 64 + 1))
            if (!dgemv_check(a_, n_, x_.data(), y_.data(), i, i + 1, n_)) return false;
        return true;
    }

    /// \returns the fraction of A's pages that are on the node of the thread that computes them: runs
    /// the compute loop once more, recording the node of the executing CPU per row, then asks where()
    /// for every page against that (pages of rows computed off-node count as remote).
    double locality() {
        const auto& topo = topology::get();
        std::vector<int> node_of_row(m_, -1);
        const double* a = a_;
        const double* x = x_.data();
        double* y = y_.data();
        const std::size_t n = n_;
        for_rows([&](std::size_t b, std::size_t e) {
            const int node = topo.current_node();
            for (std::size_t i = b; i < e; ++i) node_of_row[i] = node;
            dgemv_rows(a, n, x, y, b, e, n);
        });
        return numaplace::locality(a_, m_ * n_, [&](std::size_t i) { return node_of_row[i / n]; }).fraction();
    }

private:
    // Runs f(row_begin, row_end) over all rows with the placement's loop: numaplace::parallel_for on
    // the row partition, tbb static_partitioner for parallel_init (the same rows go to the same thread
    // in every loop), plain tbb::parallel_for otherwise.
    template <class F>
    void for_rows(F&& f) const {
        auto rows = [&f](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.end()); };
        const tbb::blocked_range<std::size_t> all(0, m_);
        if (kind_ == placement_kind::partitioned || kind_ == placement_kind::replaced)
            parallel_for(rows_, [&f](subrange r) { f(r.begin(), r.end()); });
        else if (kind_ == placement_kind::parallel_init) tbb::parallel_for(all, rows, tbb::static_partitioner());
        else tbb::parallel_for(all, rows);
    }

    // serial_init fills A from one thread; every other placement fills it with its own loop (for the
    // bound placements the binding, not the toucher, decides).
    void initialise() {
        double* a = a_;
        const std::size_t n = n_;
        auto fill = [a, n](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i)
                for (std::size_t j = 0; j < n; ++j) a[i * n + j] = a_value(i, j);
        };
        if (kind_ == placement_kind::serial_init || kind_ == placement_kind::replaced) fill(0, m_);
        else for_rows(fill);
        if (kind_ == placement_kind::replaced) replace(static_cast<const double*>(a_), rows_, fallback::degrade);
    }

    // Takes A from a numaplace allocator; the matrix gives it back with the same allocator.
    template <class Alloc>
    void take_from(Alloc alloc, std::size_t count) {
        a_ = alloc.allocate(count);
        release_ = [alloc, count](double* p) mutable { alloc.deallocate(p, count); };
    }

    placement_kind kind_;
    std::size_t m_, n_;
    partition<double> rows_; // M rows of N doubles: allocation, loops and where() by whole rows
    std::vector<double> x_, y_;
    page_kind pages_;
    double* a_ = nullptr;
    std::function<void(double*)> release_;
};

} // namespace numaplace::bench

#endif
