// README attacks, across every component (tests/stress): README.md's code blocks as the README prints
// them (extracted at configure time by tests/CMakeLists.txt into readme/<name>.{head,body}.inc: the
// #include lines at file scope, the rest inside a function here, which supplies what the fragment
// leaves to its reader and checks what it computed); plus weighted interleave with zero weights and
// small partitioned allocations.

#include "dgemv.head.inc"
#include "tour.head.inc"

#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory_resource>
#include <string>
#include <vector>

namespace np = numaplace;
using namespace numaplace;

namespace {

// README "The worked example": the DGEMV fragment for an M x N matrix with a(i, j) of its own.
void readme_dgemv(std::size_t M, std::size_t N) {
    const auto a = [](std::size_t i, std::size_t j) { return static_cast<double>((i * 7 + j * 3) % 11); };
#include "dgemv.body.inc"
    // What the fragment computed: c = A*b with b all ones, row by row; where() over every page of A.
    for (std::size_t i = 0; i < M; ++i) {
        double s = 0;
        for (std::size_t j = 0; j < N; ++j) s += a(i, j);
        ASSERT_EQ(c[i], s) << M << "x" << N << " row " << i;
    }
    EXPECT_EQ(l.histogram.pages, l.histogram.touched());
    if (topology::get().capabilities().memory_binding) {
        EXPECT_EQ(l.remote, 0u) << M << "x" << N;
        EXPECT_EQ(l.fraction(), 1.0) << M << "x" << N;
    }
    EXPECT_EQ(h.pages, l.histogram.pages);
}

// README "A tour": the placements, loops, pmr, replace and where in one fragment (nodes 0 and 1).
std::vector<double> load_in_one_thread() { return std::vector<double>(std::size_t(1) << 20, 2.0); }

void readme_tour(std::size_t n) {
#include "tour.body.inc"
    const topology& topo = topology::get();
    const bool binds = topo.capabilities().memory_binding;
    EXPECT_EQ(sum, static_cast<double>(n));
    const page_histogram ha = where(a.data(), a.size() * sizeof(double));
    const page_histogram hb = where(b.data(), b.size() * sizeof(double));
    if (binds) {
        EXPECT_EQ(ha.on(1), ha.touched()); // a's pages on node 1
        EXPECT_LE(hb.on(0) > hb.on(1) ? hb.on(0) - hb.on(1) : hb.on(1) - hb.on(0), 1u); // round robin
        EXPECT_EQ(l.remote, 0u);
        EXPECT_EQ(l.fraction(), 1.0);
    }
    EXPECT_EQ(weighted.placement().weights(), (std::vector<std::size_t>{2, 1}));
    for (int i = 0; i < 1000; ++i) m.emplace(i, std::pmr::string(std::size_t(i % 100), 'q'));
    EXPECT_EQ(std::string(m.at(999).begin(), m.at(999).end()), std::string(99, 'q'));
    std::pmr::vector<int> w(100000, 3, &pages);
    EXPECT_EQ(w[99999], 3);
    EXPECT_EQ(h.pages, l.histogram.pages);
    EXPECT_TRUE(r.done());
    EXPECT_TRUE(r.failures.empty());
    for (double x : v) ASSERT_EQ(x, 2.0); // contents kept
}

} // namespace

TEST(readme_attack, dgemv_by_rows) {
    for (std::size_t M : {std::size_t(1), std::size_t(3), std::size_t(1000)})
        for (std::size_t N : {std::size_t(1), std::size_t(511), std::size_t(1024)}) readme_dgemv(M, N);
}

TEST(readme_attack, tour) {
    if (topology::get().size() < 2) GTEST_SKIP() << "needs two nodes (the README's tour names nodes 0 and 1)";
    for (std::size_t n : {std::size_t(1), std::size_t(1000001)}) readme_tour(n);
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
    // Below a page, an allocation comes from the home node's heap (the first weighted node, whose block
    // holds index 0), aligned so that it lies in one page; that page belongs to the block holding its first
    // byte, index 0's: heap, pages and where() agree, while the loop's blocks stay exact.
    const topology& topo = topology::get();
    for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(6), std::size_t(100), std::size_t(511)}) {
        const partition<double> p(n);
        const partitioned pl(p);
        const basic_partition split = pl.partition_for(n * sizeof(double));
        EXPECT_EQ(split.block_of(0).node, pl.home_node()) << n;
        for (std::size_t k = 0; k < split.block_count(); ++k) // compute within one index of its share
            EXPECT_LE(split.block(k).size(), n / split.block_count() + 1) << n;
        partitioned_vector<double> v(n, partitioned_allocator<double>(p));
        const auto at = reinterpret_cast<std::uintptr_t>(v.data());
        const std::size_t page = detail::page_size();
        EXPECT_EQ(at / page, (at + n * sizeof(double) - 1) / page) << n << ": in one page";
        { // and every one of many (a class of 48 bytes packed from a span's start would straddle pages)
            std::vector<partitioned_vector<double>> many;
            std::size_t straddling = 0;
            for (int i = 0; i < 200; ++i) {
                many.emplace_back(n, partitioned_allocator<double>(p));
                const auto a = reinterpret_cast<std::uintptr_t>(many.back().data());
                straddling += a / page != (a + n * sizeof(double) - 1) / page;
            }
            EXPECT_EQ(straddling, 0u) << n;
        }
        parallel_for(v, [&](subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] = 1.0;
        });
        if (topo.capabilities().memory_binding) {
            const partition_locality l = where(v.data(), partition_of(v));
            EXPECT_EQ(l.remote, 0u) << n;
            EXPECT_EQ(l.local + l.shared, l.histogram.pages) << n;
            EXPECT_EQ(l.histogram.pages, 1u) << n;
        }
    }
}
