// Attack tests: parallel_for / parallel_reduce from several user threads at once, nested loops,
// exceptions from every block, loops inside replicated::update, many threads interning partitions.

#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

namespace np = numaplace;
using np::partition;

TEST(AttackConcurrency, LoopsFromSeveralUserThreadsAndNested) {
    constexpr std::size_t n = 20011;
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 5; ++rep) {
                const partition<int> p(n + static_cast<std::size_t>(t));
                std::vector<std::atomic<int>> seen(p.size());
                np::parallel_for(p, [&](np::subrange r) {
                    // nested: a small loop inside every subrange stays in this node's arena
                    np::parallel_for(partition<int>(3), [&](std::size_t) {});
                    for (std::size_t i = r.begin(); i < r.end(); ++i) seen[i].fetch_add(1);
                });
                for (auto& s : seen)
                    if (s.load() != 1) bad.fetch_add(1);
                const long long sum = np::parallel_reduce(p, 0LL, [](np::subrange r, long long s) {
                    for (std::size_t i = r.begin(); i < r.end(); ++i) s += static_cast<long long>(i);
                    return s;
                }, std::plus<>());
                const long long m = static_cast<long long>(p.size());
                if (sum != m * (m - 1) / 2) bad.fetch_add(1);
            }
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
}

TEST(AttackConcurrency, ExceptionsFromEveryBlock) {
    const partition<int> p(100000);
    for (int rep = 0; rep < 10; ++rep) {
        EXPECT_THROW(np::parallel_for(p, [](np::subrange) { throw std::logic_error("every"); }), std::logic_error);
        EXPECT_THROW(np::parallel_reduce(p, 0, [](np::subrange, int) -> int { throw std::range_error("r"); },
                                         std::plus<>()),
                     std::range_error);
    }
    // the machinery still works after
    std::atomic<std::size_t> count{0};
    np::parallel_for(p, [&](np::subrange r) { count.fetch_add(r.size()); });
    EXPECT_EQ(count.load(), p.size());
}

TEST(AttackConcurrency, LoopInsideReplicatedUpdate) {
    std::vector<int> src(50000, 1);
    np::replicated<int> r(src);
    r.update([](int* data, std::size_t size) {
        np::parallel_for(partition<int>(size), [data](std::size_t i) { data[i] = static_cast<int>(i); });
    });
    for (const auto& c : r.copies())
        for (std::size_t i = 0; i < r.size(); ++i) ASSERT_EQ(c.data[i], static_cast<int>(i));
    // and a replicated built from inside a loop body
    std::atomic<int> ok{0};
    np::parallel_for(partition<int>(2), [&](std::size_t) {
        np::replicated<int> inner(src);
        if (inner.local() != nullptr && inner.local()[49999] == 1) ok.fetch_add(1);
    });
    EXPECT_EQ(ok.load(), 2);
}

TEST(AttackConcurrency, ManyThreadsInternTheSameAndDistinctLayouts) {
    const np::node_set nodes = np::topology::get().with_cpus();
    std::vector<std::thread> threads;
    std::vector<partition<double>> same(8);
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (std::size_t i = 1; i < 300; ++i) {
                partition<double> d(1000, nodes, std::vector<std::size_t>(nodes.size(), i * 8 + static_cast<std::size_t>(t)));
                (void)d;
            }
            same[static_cast<std::size_t>(t)] = partition<double>(4242, nodes, std::vector<std::size_t>(nodes.size(), 77777));
        });
    for (auto& th : threads) th.join();
    for (const auto& p : same) EXPECT_EQ(p, same[0]);
}
