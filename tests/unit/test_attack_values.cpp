// Attack tests: boundaries and value semantics of partitions, placements, allocators, where, replicated,
// and the parallel entry points. Exact expectations on any topology (computed from the topology).

#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace np = numaplace;
using np::partition;

namespace {
constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();

// Checks that the blocks of `p` tile [0, p.size()) in order, each of its node.
template <class P>
void expect_tiles(const P& p) {
    std::size_t at = 0;
    for (std::size_t k = 0; k < p.block_count(); ++k) {
        const np::block b = p.block(k);
        EXPECT_EQ(b.node, p.nodes()[k]);
        EXPECT_EQ(b.begin, at) << "block " << k;
        EXPECT_LE(b.begin, b.end);
        at = b.end;
    }
    EXPECT_EQ(at, p.size());
}

struct big_page {
    char bytes[4096 + 8];
};
struct huge_elem {
    char bytes[(std::size_t(2) << 20) + 64];
};
} // namespace

TEST(AttackPartition, SizesAtTheEdges) {
    const std::size_t page = np::detail::page_size();
    for (std::size_t n : {std::size_t(0), std::size_t(1), page / 8 - 1, page / 8, page / 8 + 1, std::size_t(1000003)}) {
        partition<double> p(n);
        EXPECT_EQ(p.size(), n);
        expect_tiles(p);
        for (std::size_t i : {std::size_t(0), n / 2, n - 1, n, n + 1}) {
            const np::block b = p.block_of(i);
            if (i < n) EXPECT_TRUE(b.begin <= i && i < b.end) << n << " " << i;
            else EXPECT_EQ(b, np::block{});
        }
    }
    // the largest count whose bytes fit; one more overflows
    EXPECT_NO_THROW(partition<double>(max_size / 8));
    EXPECT_THROW(partition<double>(max_size / 8 + 1), np::invalid_placement);
    EXPECT_THROW(partition<double>{max_size}, np::invalid_placement);
    const partition<char> big(max_size);
    expect_tiles(big);
    EXPECT_EQ(big.block_of(max_size - 1).end, max_size);
}

TEST(AttackPartition, RowsAtTheEdges) {
    expect_tiles(partition<double>::rows(0, 100));
    EXPECT_EQ(partition<double>::rows(0, 100).element_count(), 0u);
    EXPECT_THROW(partition<double>::rows(10, 0), np::invalid_placement);
    EXPECT_THROW(partition<double>::rows(10, max_size), np::invalid_placement);
    EXPECT_THROW(partition<double>::rows(2, max_size / 8), np::invalid_placement); // 2 rows overflow
    EXPECT_NO_THROW(partition<double>::rows(1, max_size / 8));
    const auto r = partition<double>::rows(7, 513);
    expect_tiles(r);
    expect_tiles(r.elements());
    EXPECT_EQ(r.elements().size(), 7u * 513u);
    EXPECT_THROW(r.resized(max_size), np::invalid_placement);
    EXPECT_THROW(r.elements().resized(max_size), np::invalid_placement);
}

TEST(AttackPartition, HugeElementTypes) {
    partition<big_page> a(5);
    expect_tiles(a);
    // edges on page boundaries: lcm(4104, page) bytes per step
    EXPECT_EQ(a.step(), np::detail::page_size() / std::gcd(sizeof(big_page), np::detail::page_size()));
    partition<huge_elem> h(3);
    expect_tiles(h);
}

TEST(AttackPartition, WeightsWithZeros) {
    const np::node_set all = np::topology::get().all();
    std::vector<std::size_t> w(all.size(), 0);
    EXPECT_THROW(partition<int>(100, all, w), np::invalid_placement);
    w.back() = 1;
    const partition<int> last(100000, all, w);
    expect_tiles(last);
    EXPECT_EQ(last.block(all.size() - 1).size(), 100000u);
    EXPECT_EQ(np::partitioned(last).home_node(), all[all.size() - 1]);
    std::vector<std::size_t> bad(all.size() + 1, 1);
    EXPECT_THROW(partition<int>(100, all, bad), np::invalid_placement);
    EXPECT_THROW(partition<int>(100, np::node_set{}, {}), np::invalid_placement);
    std::vector<std::size_t> maxw(all.size(), max_size);
    const partition<int> m(12345, all, maxw);
    expect_tiles(m);
}

TEST(AttackPartition, DefaultAndMovedFromObservers) {
    partition<double> d;
    EXPECT_EQ(d.size(), 0u);
    EXPECT_TRUE(d.empty());
    EXPECT_EQ(d.block_count(), 0u);
    EXPECT_TRUE(d.blocks().empty());
    EXPECT_EQ(d.block_of(0), np::block{});
    EXPECT_EQ(d.block_on(0).size(), 0u);
    EXPECT_EQ(d.nodes().size(), 0u);
    EXPECT_EQ(d.huge_pages(), np::huge_page_advice::none);
    EXPECT_GE(d.alignment(), 1u);
    EXPECT_EQ(d.elements(), d);
    EXPECT_EQ(d.clipped(5), d);
    EXPECT_EQ(d.resized(0), d);
    // 10 indexes and no block: a loop would silently visit none of them
    EXPECT_THROW(d.resized(10), np::invalid_placement);
    EXPECT_THROW(d.elements().resized(1), np::invalid_placement);
    EXPECT_THROW(np::partitioned{d}, np::invalid_placement);
    partition<double> a(100);
    partition<double> b = std::move(a);
    EXPECT_EQ(a, b); // moved-from equals source
    a = a;           // self-assignment
    EXPECT_EQ(a, b);
    std::swap(a, d);
    EXPECT_EQ(d, b);
    EXPECT_TRUE(a.empty());
    int calls = 0;
    np::parallel_for(partition<double>(), [&](np::subrange) { ++calls; });
    np::parallel_for(partition<double>(0), [&](np::subrange) { ++calls; });
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(np::parallel_reduce(partition<double>(), 7, [](np::subrange, int s) { return s + 1; }, std::plus<>()), 7);
}

TEST(AttackAllocator, ValueSemanticsAndBadSizes) {
    using A = np::partitioned_allocator<double>;
    A a; // the default partition of double
    A b = std::move(a);
    EXPECT_TRUE(a == b);
    a = a;
    EXPECT_TRUE(a == b);
    EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(max_size), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(a.max_size()), std::bad_alloc); // fits size_t, not memory
    double* p = a.allocate(0);
    a.deallocate(p, 0);
    for (std::size_t n : {std::size_t(1), std::size_t(511), std::size_t(512), std::size_t(513), std::size_t(262145)}) {
        double* q = a.allocate(n);
        ASSERT_NE(q, nullptr);
        for (std::size_t i = 0; i < n; ++i) q[i] = double(i);
        EXPECT_EQ(q[n - 1], double(n - 1));
        b.deallocate(q, n); // equal allocator frees
    }
    np::interleaved_allocator<char> il;
    np::interleaved_allocator<char> il2 = il;
    EXPECT_TRUE(il == il2);
    EXPECT_THROW(np::node_allocator<int>(-1), np::unknown_node);
    EXPECT_THROW(np::node_allocator<int>(static_cast<int>(np::topology::get().size())), np::unknown_node);
}

TEST(AttackAllocator, StdContainersWithWeightedInterleave) {
    const np::node_set all = np::topology::get().all();
    std::vector<std::size_t> w(all.size(), 1);
    w[0] = 3;
    const np::interleaved il(all, w);
    using S = std::basic_string<char, std::char_traits<char>, np::interleaved_allocator<char>>;
    np::interleaved_allocator<char> ca(il);
    std::map<int, S, std::less<int>, np::interleaved_allocator<std::pair<const int, S>>> m(ca);
    for (int i = 0; i < 2000; ++i) m.emplace(i, S(std::size_t(i % 300), char('a' + i % 26), ca));
    EXPECT_EQ(m.size(), 2000u);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(m.at(i), S(std::size_t(i % 300), char('a' + i % 26), ca));
    auto node = m.extract(5);
    EXPECT_EQ(node.key(), 5);
    m.insert(std::move(node));
    EXPECT_EQ(m.size(), 2000u);
    std::deque<int, np::interleaved_allocator<int>> d(ca);
    std::list<int, np::interleaved_allocator<int>> l(ca);
    for (int i = 0; i < 100000; ++i) { d.push_back(i); l.push_front(i); }
    EXPECT_EQ(std::accumulate(d.begin(), d.end(), 0LL), 4999950000LL);
    EXPECT_EQ(std::accumulate(l.begin(), l.end(), 0LL), 4999950000LL);
    while (!d.empty()) d.pop_front();
    S big(1 << 20, 'x', ca);
    EXPECT_EQ(std::count(big.begin(), big.end(), 'x'), 1 << 20);
}

TEST(AttackContainer, PartitionOfAcrossLifecycle) {
    np::partitioned_vector<int> v;
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    expect_tiles(np::partition_of(v));
    v.resize(100000);
    expect_tiles(np::partition_of(v));
    EXPECT_EQ(np::partition_of(v).size(), 100000u);
    std::vector<std::atomic<int>> seen(100000);
    np::parallel_for(v, [&](std::size_t i) { seen[i].fetch_add(1); });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
    v.resize(10);
    EXPECT_EQ(np::partition_of(v).size(), 10u);
    v.clear();
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    int calls = 0;
    np::parallel_for(v, [&](std::size_t) { ++calls; });
    EXPECT_EQ(calls, 0);
    v.shrink_to_fit();
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    np::partitioned_vector<int> w = std::move(v);
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    EXPECT_EQ(np::partition_of(w).size(), 0u);
    np::first_touch(v);
    np::first_touch(w);
}

TEST(AttackWhere, RangesAtTheEdges) {
    const std::size_t page = np::detail::page_size();
    EXPECT_EQ(np::where(nullptr, 0).pages, 0u);
    std::vector<char> buf(3 * page);
    char* p = buf.data();
    EXPECT_EQ(np::where(p, 1).pages, 1u);
    const auto* aligned = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page);
    EXPECT_EQ(np::where(aligned, page).pages, 1u);
    EXPECT_EQ(np::where(aligned, page + 1).pages, 2u);
    EXPECT_EQ(np::where(aligned + page - 1, 2).pages, 2u);
    // a range past the end of the address space: a typed error, not a wrapped-around loop
    EXPECT_THROW(np::where(aligned, max_size), std::invalid_argument);
    EXPECT_THROW(np::where(aligned, max_size - 5), std::invalid_argument);
    EXPECT_THROW(np::locality(reinterpret_cast<const double*>(aligned), max_size / 4, [](std::size_t) { return 0; }),
                 std::invalid_argument);
    // an unmapped range: pages counted untouched
    const np::page_histogram h = np::where(reinterpret_cast<void*>(page * 16), 2 * page);
    EXPECT_EQ(h.pages, 2u);
    EXPECT_EQ(h.untouched, 2u);
}

TEST(AttackReplicated, BoundariesAndValues) {
    np::replicated<int> d;
    EXPECT_EQ(d.copy_for(0), nullptr);
    EXPECT_EQ(d.local(), nullptr);
    EXPECT_EQ(d.bytes(), 0u);
    d.update([](int*, std::size_t) { FAIL(); });
    std::vector<int> src(1025);
    std::iota(src.begin(), src.end(), 0);
    np::replicated<int> r(src);
    EXPECT_EQ(r.copies().size(), np::topology::get().with_cpus().size());
    for (const auto& c : r.copies()) EXPECT_TRUE(std::equal(src.begin(), src.end(), c.data));
    np::replicated<int> m = std::move(r);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_EQ(r.copy_for(0), nullptr);
    m = std::move(m);
    EXPECT_EQ(m.size(), 1025u);
    EXPECT_EQ(m.copy_for(0)[1024], 1024);
    np::replicated<int> z(src.data(), 0);
    EXPECT_EQ(z.size(), 0u);
    EXPECT_EQ(z.bytes(), 0u);
    EXPECT_THROW(np::replicated<int>(src.data(), max_size), std::bad_array_new_length);
    EXPECT_THROW(np::replicated<int>(nullptr, 10), std::invalid_argument);
    EXPECT_THROW(np::replicated<int>(src.data(), 10, np::node_set{}), np::invalid_placement);
    EXPECT_THROW(m.copy_for(-1), np::unknown_node);
}

TEST(AttackBalancing, BadRanges) {
    const std::size_t page = np::detail::page_size();
    const np::node_set all = np::topology::get().all();
    std::vector<char> buf(3 * page);
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + page - 1) / page * page);
    EXPECT_THROW(np::bind_with_balancing(aligned + 1, page, all), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, max_size, all), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, max_size - page, all, np::fallback::degrade), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, page, np::node_set{}), np::invalid_placement);
    EXPECT_TRUE(np::bind_with_balancing(aligned, 0, all));
}
