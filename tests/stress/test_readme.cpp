// README attacks, across every component (tests/stress): programs written from the README alone (DGEMV
// by rows, the allocator snippets, parallel_reduce, where/locality), checked for exact results; plus
// weighted interleave with zero weights.

#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory_resource>
#include <string>
#include <vector>

namespace np = numaplace;
using namespace numaplace;

namespace {
double a(std::size_t i, std::size_t j) { return static_cast<double>((i * 7 + j * 3) % 11); }
} // namespace

TEST(readme_attack, dgemv_by_rows) {
    for (std::size_t M : {std::size_t(1), std::size_t(3), std::size_t(1000)}) {
        for (std::size_t N : {std::size_t(1), std::size_t(511), std::size_t(1024)}) {
            const auto rows = partition<double>::rows(M, N);
            partitioned_vector<double> A(M * N, partitioned_allocator<double>(rows));
            partitioned_vector<double> c(M);
            std::vector<double> b(N, 1.0);
            std::vector<std::atomic<int>> visits(M);
            parallel_for(rows, [&](subrange r) {
                for (std::size_t i = r.begin(); i < r.end(); ++i) {
                    visits[i].fetch_add(1);
                    for (std::size_t j = 0; j < N; ++j) A[i * N + j] = a(i, j);
                }
            });
            parallel_for(rows, [&](subrange r) {
                for (std::size_t i = r.begin(); i < r.end(); ++i) {
                    double s = 0;
                    for (std::size_t j = 0; j < N; ++j) s += A[i * N + j] * b[j];
                    c[i] = s;
                }
            });
            for (std::size_t i = 0; i < M; ++i) {
                ASSERT_EQ(visits[i].load(), 1);
                double s = 0;
                for (std::size_t j = 0; j < N; ++j) s += a(i, j);
                ASSERT_EQ(c[i], s) << M << "x" << N << " row " << i;
            }
            const partition_locality l = where(A.data(), rows);
            EXPECT_EQ(l.histogram.pages, l.histogram.touched());
            if (topology::get().capabilities().memory_binding) EXPECT_EQ(l.remote, 0u) << M << "x" << N;
            const page_histogram h = where(A);
            EXPECT_EQ(h.pages, l.histogram.pages);
        }
    }
}

TEST(readme_attack, reduce_and_pmr) {
    const std::size_t n = 1000001;
    std::vector<double> c(n, 1.0);
    partition<double> part(n);
    double sum = parallel_reduce(part, 0.0, [&](subrange r, double s) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) s += c[i];
        return s;
    }, std::plus<>());
    EXPECT_EQ(sum, static_cast<double>(n));
    const int last = topology::get().all()[topology::get().size() - 1];
    std::pmr::map<int, std::pmr::string> m(&node_pool(last));
    for (int i = 0; i < 1000; ++i) m.emplace(i, std::pmr::string(std::size_t(i % 100), 'q'));
    EXPECT_EQ(std::string(m.at(999).begin(), m.at(999).end()), std::string(99, 'q'));
    page_resource<interleaved> pages{interleaved(topology::get().all())};
    std::pmr::vector<int> v(100000, 3, &pages);
    EXPECT_EQ(v[99999], 3);
}

TEST(readme_attack, weighted_interleave_with_zero_weights) {
    const topology& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "needs two nodes";
    const node_set two{topo.all()[0], topo.all()[1]};
    const interleaved only_second(two, {0, 5});
    EXPECT_EQ(only_second.weights(), (std::vector<std::size_t>{0, 1}));
    EXPECT_EQ(only_second.home_node(), two[1]); // a node with weight 0 gets nothing, small objects too
    const std::size_t page = detail::page_size();
    std::vector<char, interleaved_allocator<char>> v(16 * page, 'x', interleaved_allocator<char>(only_second));
    const page_histogram h = where(v.data(), v.size());
    EXPECT_EQ(h.pages, 16u);
    if (topo.capabilities().memory_binding) {
        EXPECT_EQ(h.on(two[1]), 16u);
        EXPECT_EQ(h.on(two[0]), 0u);
    }
    const interleaved two_to_one(two, {4, 2});
    EXPECT_EQ(two_to_one.weights(), (std::vector<std::size_t>{2, 1}));
    EXPECT_EQ(two_to_one.home_node(), two[0]);
    std::vector<char, interleaved_allocator<char>> w(30 * page, 'y', interleaved_allocator<char>(two_to_one));
    const page_histogram g = where(w.data(), w.size());
    if (topo.capabilities().memory_binding) {
        EXPECT_EQ(g.on(two[0]), 20u);
        EXPECT_EQ(g.on(two[1]), 10u);
    }
}

TEST(readme_attack, small_partitioned_allocations_live_where_their_loop_runs) {
    // Below a page, an allocation comes from the home node's heap; its split puts all units in the last
    // weighted block: the two must agree, or the loop runs on one node over data on another.
    const topology& topo = topology::get();
    for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(511)}) {
        const partition<double> p(n);
        const partitioned pl(p);
        const basic_partition split = pl.partition_for(n * sizeof(double));
        std::size_t nonempty = 0;
        for (const block& b : split.blocks())
            if (!b.empty()) {
                ++nonempty;
                EXPECT_EQ(b.node, pl.home_node()) << n;
            }
        EXPECT_EQ(nonempty, 1u);
        partitioned_vector<double> v(n, partitioned_allocator<double>(p));
        parallel_for(v, [&](subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] = 1.0;
        });
        if (topo.capabilities().memory_binding) {
            const partition_locality l = where(v.data(), partition_of(v));
            EXPECT_EQ(l.remote, 0u) << n;
            EXPECT_EQ(l.local, l.histogram.pages) << n;
        }
    }
}
