// parallel_for / parallel_reduce / first_touch. Generic over the topology: on the one-node host the node
// checks are trivially node 0; in the multi-node guests each block must run on its node's CPUs.
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <oneapi/tbb/parallel_invoke.h>
#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <sched.h>

using namespace numaplace;

namespace {
void expect_each_index_once(std::size_t n) {
    partition<double> part(n);
    std::unique_ptr<std::atomic<unsigned char>[]> seen(new std::atomic<unsigned char>[n ? n : 1]);
    for (std::size_t i = 0; i < n; ++i) seen[i] = 0;
    parallel_for(part, [&](subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) seen[i].fetch_add(1, std::memory_order_relaxed);
    });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += seen[i].load() != 1;
    EXPECT_EQ(wrong, 0u) << "n = " << n;
}

// The node of the CPU each index ran on, and the block node the body was told.
struct where_ran {
    std::vector<int> cpu_node, told_node;
    explicit where_ran(std::size_t n) : cpu_node(n, -2), told_node(n, -2) {}
};
} // namespace

TEST(parallel_for, visits_every_index_exactly_once) {
    const std::size_t page_doubles = detail::page_size() / sizeof(double);
    for (std::size_t n : {std::size_t(0), std::size_t(1), topology::get().size() - 1, topology::get().size() + 1,
                          page_doubles * 64, page_doubles * 64 + 7, std::size_t(10'000'000)})
        expect_each_index_once(n);
}

TEST(parallel_for, block_k_runs_on_node_k_cpus_and_is_told_its_node) {
    const auto& topo = topology::get();
    const std::size_t n = 4u << 20;
    partition<double> part(n);
    where_ran w(n);
    parallel_for(part, [&](subrange r) {
        const int cpu_node = topo.current_node();
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            w.cpu_node[i] = cpu_node;
            w.told_node[i] = r.node();
        }
    }, 4096);
    for (const auto& b : part.blocks()) {
        std::size_t off_node = 0, mistold = 0;
        for (std::size_t i = b.begin; i < b.end; ++i) {
            off_node += w.cpu_node[i] != b.node;
            mistold += w.told_node[i] != b.node;
        }
        EXPECT_EQ(off_node, 0u) << "indexes of node " << b.node << "'s block ran on another node";
        EXPECT_EQ(mistold, 0u);
    }
}

TEST(parallel_for, every_node_with_cpus_gets_a_block_and_memory_only_nodes_none) {
    const auto& topo = topology::get();
    partition<char> part(1u << 24);
    for (const auto& n : topo.nodes()) {
        EXPECT_EQ(part.block_on(n.id).empty(), !n.has_cpus()) << "node " << n.id;
    }
}

TEST(parallel_for, per_index_body) {
    const std::size_t n = 100'003;
    std::vector<std::atomic<int>> hits(n);
    parallel_for(partition<int>(n), [&](std::size_t i) { hits[i].fetch_add(1); });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(parallel_reduce, equals_the_serial_sum_exactly_on_integers) {
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(4097), std::size_t(10'000'000)}) {
        partition<long> part(n);
        long long sum = parallel_reduce(
            part, 0LL,
            [](subrange r, long long acc) {
                for (std::size_t i = r.begin(); i < r.end(); ++i) acc += static_cast<long long>(i * i % 1000003);
                return acc;
            },
            [](long long a, long long b) { return a + b; });
        long long serial = 0;
        for (std::size_t i = 0; i < n; ++i) serial += static_cast<long long>(i * i % 1000003);
        EXPECT_EQ(sum, serial) << "n = " << n;
    }
}

TEST(parallel_for, exception_from_the_body_reaches_the_caller_and_cancels_the_rest) {
    const std::size_t n = 1u << 22;
    std::atomic<std::size_t> ran{0};
    EXPECT_THROW(parallel_for(partition<char>(n),
                              [&](subrange r) {
                                  ran += r.size();
                                  if (r.begin() <= n / 2 && n / 2 < r.end()) throw std::runtime_error("body failed");
                              },
                              1024),
                 std::runtime_error);
    // the loop is usable afterwards
    expect_each_index_once(12345);
}

TEST(parallel_reduce, exception_propagates) {
    EXPECT_THROW(parallel_reduce(
                     partition<double>(1000), 0,
                     [](subrange r, int acc) -> int {
                         if (r.begin() == 0) throw std::logic_error("x");
                         return acc + static_cast<int>(r.size());
                     },
                     [](int a, int b) { return a + b; }),
                 std::logic_error);
}

TEST(parallel_for, nested_calls_stay_on_the_outer_block_node) {
    const auto& topo = topology::get();
    const std::size_t outer = 64, inner = 10000;
    const auto part_outer = partition<char>::rows(outer, 4096); // one row per page: several per node
    std::vector<std::atomic<int>> count(outer * inner);
    std::atomic<std::size_t> off_node{0};
    parallel_for(part_outer, [&](std::size_t o) {
        const int node = part_outer.block_of(o).node;
        parallel_for(partition<int>(inner), [&](subrange r) {
            if (r.node() != node || topo.current_node() != node) off_node.fetch_add(1);
            for (std::size_t i = r.begin(); i < r.end(); ++i) count[o * inner + i].fetch_add(1);
        });
    });
    EXPECT_EQ(off_node.load(), 0u);
    for (auto& c : count) ASSERT_EQ(c.load(), 1);
}

TEST(parallel_for, called_from_tbb_tasks_does_not_deadlock) {
    // The raw oneTBB task handover below is annotated for ThreadSanitizer as parallel_for.hpp does
    // (no-ops in other builds).
    std::atomic<long> total{0};
    tbb::task_group g;
    NUMAPLACE_HANDOVER_RELEASE();
    for (int t = 0; t < 8; ++t)
        g.run([&] {
            NUMAPLACE_HANDOVER_ACQUIRE();
            parallel_for(partition<double>(50000), [&](subrange r) { total += static_cast<long>(r.size()); });
            NUMAPLACE_HANDOVER_RELEASE();
        });
    g.wait();
    NUMAPLACE_HANDOVER_ACQUIRE();
    EXPECT_EQ(total.load(), 8 * 50000);
    std::atomic<long> again{0};
    NUMAPLACE_HANDOVER_RELEASE();
    tbb::parallel_invoke(
        [&] {
            NUMAPLACE_HANDOVER_ACQUIRE();
            parallel_for(partition<double>(1000), [&](subrange r) { again += static_cast<long>(r.size()); });
            NUMAPLACE_HANDOVER_RELEASE();
        },
        [&] {
            NUMAPLACE_HANDOVER_ACQUIRE();
            parallel_for(partition<double>(3000), [&](subrange r) { again += static_cast<long>(r.size()); });
            NUMAPLACE_HANDOVER_RELEASE();
        });
    NUMAPLACE_HANDOVER_ACQUIRE();
    EXPECT_EQ(again.load(), 4000);
}

TEST(parallel_for, container_overload_follows_the_allocator_partition) {
    const std::size_t n = (16u << 20) / sizeof(double) + 5;
    partition<double> part(n);
    partitioned_vector<double> v(n, partitioned_allocator<double>(part));
    EXPECT_EQ(partition_of(v), part);
    parallel_for(v, [&](subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] = static_cast<double>(i);
    });
    for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(v[i], static_cast<double>(i));
    auto loc = where(v.data(), part);
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.remote, 0u);
}

TEST(first_touch, places_block_k_on_node_k_without_changing_contents) {
    const auto& topo = topology::get();
    const std::size_t n = (32u << 20) / sizeof(double);
    // plain pages (no binding): only the touching thread's node decides
    void* raw = memory::map(n * sizeof(double), detail::huge_page_size());
    auto* data = static_cast<double*>(raw);
    partition<double> part(n);
    EXPECT_EQ(where(data, n * sizeof(double)).untouched, n * sizeof(double) / detail::page_size());
    first_touch(data, part);
    auto loc = where(data, part);
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.remote, 0u) << "of " << loc.histogram.pages << " pages";
    for (const auto& b : part.blocks()) {
        if (b.empty()) continue;
        auto h = where(data + b.begin, b.size() * sizeof(double));
        EXPECT_EQ(h.on(b.node), h.pages) << "node " << b.node;
    }
    for (std::size_t i = 0; i < n; i += 1000) ASSERT_EQ(data[i], 0.0);
    (void)topo;
    memory::unmap(raw, n * sizeof(double));
}

TEST(first_touch, default_init_vector_then_first_touch) {
    const std::size_t n = (16u << 20) / sizeof(float);
    partition<float> part(n);
    partitioned_vector<float> v(n, partitioned_allocator<float>(part));
    EXPECT_EQ(where(v).untouched, where(v).pages);
    first_touch(v);
    EXPECT_EQ(where(v).untouched, 0u);
    EXPECT_EQ(where(v.data(), part).fraction(), 1.0);
}

TEST(arenas, report_says_how_blocks_are_pinned) {
    const auto& r = arena_capabilities();
    const auto cpu_nodes = topology::get().with_cpus().size();
    if (cpu_nodes <= 1) {
        EXPECT_EQ(r.pinning, pinning::single_node);
    } else {
        EXPECT_TRUE(r.pinning == pinning::tbbbind || r.pinning == pinning::hwloc) << r.reason;
        // tbbbind path only when TBB sees exactly our CPU nodes
        if (r.pinning == pinning::tbbbind) EXPECT_TRUE(r.tbbbind_loaded);
        if (!r.tbbbind_loaded) EXPECT_EQ(r.pinning, pinning::hwloc);
    }
    // Set by the guest harness: which path this layout must take.
    if (const char* expect = std::getenv("NUMAPLACE_EXPECT_PINNING")) {
        const char* actual = r.pinning == pinning::tbbbind ? "tbbbind" : r.pinning == pinning::hwloc ? "hwloc"
                           : r.pinning == pinning::single_node ? "single_node" : "none";
        EXPECT_STREQ(actual, expect) << r.reason;
    }
    if (const char* expect = std::getenv("NUMAPLACE_EXPECT_TBBBIND")) EXPECT_EQ(r.tbbbind_loaded, expect[0] == '1');
}

// --- The typed partition carried from allocation to loop -------------------------------------------

TEST(parallel_for, rows_partition_runs_block_k_rows_on_node_k_and_their_pages_are_there) {
    // The seeds' DGEMV shape, scaled: A of M x N doubles placed and computed by whole rows.
    const auto& topo = topology::get();
    const std::size_t m = 3001, n = 1000; // 8000-byte rows: edges every 32 rows of 4 KiB pages
    const auto rows = partition<double>::rows(m, n);
    partitioned_vector<double> a(m * n, partitioned_allocator<double>(rows));
    std::vector<int> ran_on(m, -2), told(m, -2);
    std::unique_ptr<std::atomic<unsigned char>[]> seen(new std::atomic<unsigned char>[m]);
    for (std::size_t i = 0; i < m; ++i) seen[i] = 0;
    parallel_for(rows, [&](subrange r) { // indexes are rows; parallel init of A, row by row
        const int cpu = topo.current_node();
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            seen[i].fetch_add(1, std::memory_order_relaxed);
            ran_on[i] = cpu;
            told[i] = r.node();
            for (std::size_t j = 0; j < n; ++j) a[i * n + j] = static_cast<double>(i);
        }
    });
    for (std::size_t i = 0; i < m; ++i) {
        ASSERT_EQ(seen[i].load(), 1) << "row " << i;
        ASSERT_EQ(told[i], rows.block_of(i).node) << "row " << i;
        if (topo.with_cpus().size() > 1) ASSERT_EQ(ran_on[i], told[i]) << "row " << i;
    }
    // where() inspects every element's page (m * n elements), expected node = block of row i / n
    auto loc = where(a.data(), rows);
    EXPECT_EQ(loc.histogram.pages, (m * n * sizeof(double) + detail::page_size() - 1) / detail::page_size());
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.remote, 0u);
    for (const auto& b : rows.blocks()) {
        if (b.empty()) continue;
        auto h = where(a.data() + b.begin * n, b.size() * n * sizeof(double));
        EXPECT_EQ(h.on(b.node), h.pages) << "rows of node " << b.node;
    }
}

TEST(parallel_for, container_loop_covers_its_elements_for_a_rows_partition) {
    const std::size_t m = 777, n = 513;
    const auto rows = partition<double>::rows(m, n);
    partitioned_vector<double> a(m * n, partitioned_allocator<double>(rows));
    const partition<double> part = partition_of(a);
    EXPECT_EQ(part, rows.elements());
    EXPECT_EQ(part.size(), m * n);
    std::unique_ptr<std::atomic<unsigned char>[]> seen(new std::atomic<unsigned char>[m * n]);
    for (std::size_t i = 0; i < m * n; ++i) seen[i] = 0;
    std::atomic<std::size_t> wrong_node{0};
    parallel_for(a, [&](subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            seen[i].fetch_add(1, std::memory_order_relaxed);
            if (r.node() != rows.block_of(i / n).node) wrong_node.fetch_add(1);
        }
    });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < m * n; ++i) wrong += seen[i].load() != 1;
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(wrong_node.load(), 0u);
    // element-wise first_touch of the rows partition covers every page
    partitioned_vector<double> b(m * n, partitioned_allocator<double>(rows));
    first_touch(b);
    EXPECT_EQ(where(b.data(), rows).histogram.untouched, 0u);
    EXPECT_EQ(where(b.data(), rows).remote, 0u);
}

TEST(parallel_for, grown_vector_loop_follows_its_capacity_split_block_k_on_node_k) {
    const auto& topo = topology::get();
    std::vector<double, partitioned_allocator<double>> v; // the default partition of double
    for (std::size_t i = 0; i < 3'000'000; ++i) v.push_back(static_cast<double>(i)); // reallocates ~22 times
    ASSERT_GT(v.capacity(), v.size());
    const partition<double> part = partition_of(v);
    EXPECT_EQ(part.size(), v.size());
    EXPECT_EQ(part.units(), v.capacity());
    EXPECT_EQ(part, partition<double>(v.capacity()).clipped(v.size())); // the split of the capacity
    std::vector<int> ran_on(v.size(), -2), told(v.size(), -2);
    parallel_for(v, [&](subrange r) {
        const int cpu = topo.current_node();
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            ran_on[i] = cpu;
            told[i] = r.node();
            v[i] += 1.0;
        }
    });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        wrong += v[i] != static_cast<double>(i) + 1.0;
        wrong += told[i] != part.block_of(i).node;
        if (topo.with_cpus().size() > 1) wrong += ran_on[i] != told[i];
    }
    EXPECT_EQ(wrong, 0u);
    // the pages of block k (bound when the capacity was allocated) are on node k
    auto loc = where(v.data(), part);
    EXPECT_EQ(loc.remote, 0u);
    // resize within the capacity moves only the clip
    const std::size_t cap = v.capacity();
    v.resize(v.size() + 10);
    ASSERT_EQ(v.capacity(), cap);
    EXPECT_EQ(partition_of(v), part.resized(cap).clipped(v.size()));
}

TEST(parallel_reduce, rows_partition_reduces_over_rows) {
    const std::size_t m = 1000, n = 100;
    const auto rows = partition<int>::rows(m, n);
    const long long sum = parallel_reduce(
        rows, 0LL, [](subrange r, long long s) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) s += static_cast<long long>(i);
            return s;
        },
        [](long long a, long long b) { return a + b; });
    EXPECT_EQ(sum, static_cast<long long>(m * (m - 1) / 2));
}
